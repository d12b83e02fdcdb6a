package integration_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Two of three replicas stopped: a call on the third fails with
// ErrNoQuorum (and ErrUnavailable), names the voters it does not reach and
// how many the group needs, per group, and does so before a distant
// deadline; a call without a deadline waits, and gets the same cause with
// the context's error when it ends.
func TestNoQuorumSaysTheCause(t *testing.T) {
	c, ctx := newCluster(t, 3, fencelocktest.WithConfig(func(cfg *fencelock.Config) {
		cfg.Groups = []fencelock.GroupConfig{{Name: "orders", Voters: []uint64{1, 2, 3}}}
	}))
	c.Leader(ctx)
	n := c.Node(1)
	_, err := n.Inspect(ctx, "x@orders") // the named group has a leader too
	require.NoError(t, err)
	c.Stop(2)
	c.Stop(3)

	for _, tc := range []struct {
		what, group string
		call        func(context.Context) error
	}{
		{"NewSession", "the default group", func(ctx context.Context) error {
			s, err := n.NewSession(ctx)
			if err == nil {
				s.Close(ctx)
			}
			return err
		}},
		{"Inspect", `group "orders"`, func(ctx context.Context) error {
			_, err := n.Inspect(ctx, "x@orders")
			return err
		}},
	} {
		// A generous deadline: the call must fail well before it.
		cctx, cancel := context.WithTimeout(ctx, 40*time.Second)
		err := tc.call(cctx)
		early := cctx.Err() == nil
		cancel()
		require.ErrorIs(t, err, fencelock.ErrNoQuorum, tc.what)
		require.ErrorIs(t, err, fencelock.ErrUnavailable, tc.what)
		require.True(t, early, "%s: failed only at its deadline: %v", tc.what, err)
		msg := err.Error()
		require.Contains(t, msg, tc.group, tc.what)
		require.Contains(t, msg, "this replica reaches 0 of the other 2 voters", tc.what)
		require.Contains(t, msg, "2="+c.Addr(2), tc.what)
		require.Contains(t, msg, "3="+c.Addr(3), tc.what)
		require.Contains(t, msg, "a quorum needs 2 of 3", tc.what)
	}

	// Without a deadline a call waits for the group: it still waits
	// (ended here by cancel), and says why when it ends.
	wait, stop := context.WithCancel(context.Background())
	defer time.AfterFunc(300*time.Millisecond, stop).Stop()
	_, err = n.Inspect(wait, "y")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, fencelock.ErrNoQuorum)
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
	require.False(t, errors.Is(err, context.DeadlineExceeded))
}

// A follower whose messages to the leader are lost (it still hears the
// leader) gets no answer to its proposals. A call that ends before one
// attempt could time out says that its deadline came first, not that the
// group has no leader or quorum; a longer call names what its attempts
// met (the group's silence), not the deadline that cut its last one.
func TestUnansweredCallNamesWhatItsAttemptsMet(t *testing.T) {
	c, ctx := newCluster(t, 3)
	net := c.Network()
	l := c.Leader(ctx)
	f := l%3 + 1
	n := c.Node(f)
	s := newSession(t, ctx, n) // before the cut
	net.Cut(net.Addr(f), net.Addr(l))

	short, cancel := context.WithTimeout(ctx, fencelock.DefaultProposalTimeout/4)
	_, err := s.TryAcquire(short, "x")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "last attempt: the call's deadline came before the group answered")

	long, cancel := context.WithTimeout(ctx, 3*fencelock.DefaultProposalTimeout)
	_, err = s.TryAcquire(long, "x")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "last attempt: no answer in time")
}

// Two of three replicas stopped: a waiting Acquire and a Campaign, with a
// distant deadline or none, end with ErrNoQuorum (and ErrUnavailable)
// about when a TryAcquire does, not at their deadline: waiting for the lock
// is not waiting for the group to come back, which only an operator can
// bring about.
func TestWaitingCallsSayNoQuorum(t *testing.T) {
	c, ctx := newCluster(t, 3)
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
