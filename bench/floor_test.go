package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// The floor's stubs are processes of their own that answer W1 and W2's
// calls; W2's CPU figure counts theirs, and Close ends them.
func TestHTTPFloorRunsW1AndW2OnStubProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, w := range []string{lockbench.W1Leader, "W2"} {
		r, err := lockbench.Run(ctx, lockbench.Options{System: floorSystem, Duration: 300 * time.Millisecond, Iterations: 50},
			w, floorStarter(3), t.TempDir())
		require.NoError(t, err, w)
		require.Positive(t, r.Ops, w)
		require.Zero(t, r.Errors, w)
	}

	c, err := floorStarter(3)(ctx, "")
	require.NoError(t, err)
	fc := c.(*floorCluster)
	require.Len(t, fc.Pids(), 3)
	stubs := cpuOfPids(t, fc.Pids())
	r, err := lockbench.Throughput(ctx, c, 8, 300*time.Millisecond, func(i int) string { return "bench/F/" + string(rune('a'+i)) })
	require.NoError(t, err)
	require.Greater(t, cpuOfPids(t, fc.Pids()), stubs, "the stubs answered without CPU")
	_, ok := r.Note("cpu_us_per_pair")
	require.True(t, ok, "notes %q", r.Notes)
	require.NoError(t, c.Close())
	for _, cmd := range fc.cmds {
		require.True(t, cmd.ProcessState.Exited(), "a stub outlived Close")
	}
}

func cpuOfPids(t *testing.T, pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		d, ok := lockbench.ProcessCPU(pid)
		require.True(t, ok, "pid %d", pid)
		total += d
	}
	return total
}
