package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Two of three replicas stopped: a waiting Acquire and a Campaign, with a
// distant deadline or none, end with ErrNoQuorum (and ErrUnavailable)
// about when a TryAcquire does, not at their deadline: waiting for the lock
// is not waiting for the group to come back, which only an operator can
// bring about.
func TestWaitingCallsSayNoQuorum(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	c.Leader(ctx)
	n := c.Node(1)
	s, err := n.NewSession(ctx, fencelock.WithTTL(time.Minute))
	require.NoError(t, err)
	c.Stop(2)
	c.Stop(3)

	timed := func(what string, call func(context.Context) error, deadline bool) time.Duration {
		t.Helper()
		// Without a deadline: context.Background's, which the test's own
		// deadline must not give one; a timer stands in for it.
		cctx, cancel := context.WithCancel(context.Background())
		if deadline {
			cctx, cancel = context.WithTimeout(ctx, 40*time.Second)
		}
		defer time.AfterFunc(40*time.Second, cancel).Stop()
		defer cancel()
		start := time.Now()
		err := call(cctx)
		took := time.Since(start)
		early := cctx.Err() == nil
		require.ErrorIs(t, err, fencelock.ErrNoQuorum, what)
		require.ErrorIs(t, err, fencelock.ErrUnavailable, what)
		require.True(t, early, "%s: failed only when its context ended: %v", what, err)
		require.Contains(t, err.Error(), "a quorum needs 2 of 3", what)
		return took
	}
	try := timed("TryAcquire", func(ctx context.Context) error {
		_, err := s.TryAcquire(ctx, "a")
		return err
	}, true)
	require.NoError(t, s.Err())
	for _, deadline := range []bool{false, true} {
		acq := timed("Acquire", func(ctx context.Context) error {
			_, err := s.Acquire(ctx, "b")
			return err
		}, deadline)
		require.Less(t, acq, try+2*time.Second, "Acquire (deadline %v) took %v, TryAcquire %v", deadline, acq, try)
		timed("Campaign", func(ctx context.Context) error {
			_, err := s.Campaign(ctx, "e", "v")
			return err
		}, deadline)
		require.NoError(t, s.Err())
	}
}
