package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// W11 against a real 3-replica fencelock cluster: every replica restarts,
// the worker's own last with its session resumed; no acquire fails and the
// lock the worker holds throughout is not lost (the probe would get it
// within two TTLs). Its timing figures are the benchmark's, not checked here.
func TestW11RollingRestartKeepsTheWorkersLock(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts three replicas")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := lockbench.Run(ctx, lockbench.Options{System: "fencelock"}, "W11", starter(3, nil), t.TempDir())
	require.NoError(t, err)
	t.Log(res.Notes)
	for key, want := range map[string]float64{"failed_acquires": 0, "locks_lost": 0} {
		got, ok := res.Note(key)
		require.True(t, ok, "note %s missing: %s", key, res.Notes)
		require.Equal(t, want, got, key)
	}
	resumed, ok := res.Note("own_restart_ms")
	require.True(t, ok)
	require.Positive(t, resumed)
	require.Contains(t, res.Notes, "resumed=true")
}
