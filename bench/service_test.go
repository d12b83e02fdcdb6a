package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// The client system short, on three real `fencelock serve` processes: W1
// on the leader's replica and W3 (four workers on one lock) through the Go
// client complete calls without an error, W3's grants never overlap and
// their tokens rise, and the grants are shared about evenly (FIFO: no
// worker is passed over again and again while it waits; the counts of a
// fixed window differ by the few grants at its edges).
func TestClientSystemRunsW1AndW3OnServeProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := buildServe(dir)
	require.NoError(t, err)
	o := lockbench.Options{System: clientSystem, Duration: time.Second, Workers: 4, Iterations: 50}

	r, err := lockbench.Run(ctx, o, lockbench.W1Leader, clientStarter(bin, 3), t.TempDir())
	require.NoError(t, err)
	t.Log(r.JSON())
	require.Zero(t, r.Errors, r.Notes)
	require.Equal(t, 50, r.Ops, r.Notes)
	onLeader, _ := r.Note("worker_on_leader")
	require.Equal(t, 1.0, onLeader, "the session did not open on the leader's replica: %s", r.Notes)

	r, err = lockbench.Run(ctx, o, "W3", clientStarter(bin, 3), t.TempDir())
	require.NoError(t, err)
	t.Log(r.JSON())
	require.Zero(t, r.Errors, r.Notes)
	require.Positive(t, r.Ops, r.Notes)
	lo, _ := r.Note("grants_per_worker_min")
	hi, _ := r.Note("grants_per_worker_max")
	require.GreaterOrEqual(t, 2*lo, hi, "a waiter was passed over: %s", r.Notes)
}
