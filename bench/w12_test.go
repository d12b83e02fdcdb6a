package main

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// W12 short, against three real `fencelock serve` processes: 4 clients
// through the Go client, the fencelock lock command running a long command
// and the Python client each holding a lock; every replica, leader first,
// gets SIGTERM and is restarted, then the leader gets SIGKILL and is
// restarted. The acceptance (issue 35): no session lost, no
// long-held lock lost, no command killed, no Python holder ended, no double
// holder. Its timing figures are the benchmark's, not checked here.
func TestW12ServiceRollingRestartLosesNothing(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("W12 runs the Python client of examples/python and needs python3 on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := buildServe(dir)
	require.NoError(t, err)
	res, err := w12With(ctx, bin, dir, lockbench.W12Options{Clients: 4, Rounds: 1, Settle: 2,
		TTL: 5 * time.Second, Down: 1500 * time.Millisecond, Dwell: 2 * time.Second, Log: t.Logf})
	require.NoError(t, err)
	t.Log(res.JSON())
	for _, key := range []string{"sessions_lost", "held_lost", "commands_killed", "python_lost", "double_holders", "stale_writes"} {
		got, ok := res.Note(key)
		require.True(t, ok, "note %s missing: %s", key, res.Notes)
		require.Zero(t, got, "%s: %s", key, res.Notes)
	}
	require.Positive(t, res.Ops, "the clients completed no cycle: %s", res.Notes)
}
