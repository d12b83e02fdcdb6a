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
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithConfig(func(cfg *fencelock.Config) {
		cfg.Groups = []fencelock.GroupConfig{{Name: "orders", Voters: []uint64{1, 2, 3}}}
	}))
	ctx := testCtx(t)
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
	c := fencelocktest.NewCluster(t, 3)
	net := c.Network()
	ctx := testCtx(t)
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
