package fencelock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two of three replicas stopped: a call on the third fails with
// ErrNoQuorum (and ErrUnavailable), names the voters it does not reach and
// how many the group needs, per group, and does so before a distant
// deadline; a call without a deadline waits, and gets the same cause with
// the context's error when it ends.
func TestNoQuorumSaysTheCause(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Groups = []GroupConfig{{Name: "orders", Voters: []uint64{1, 2, 3}}}
	})
	ctx := testCtx(t)
	c.leader(ctx)
	n := c.node(1)
	_, err := n.Inspect(ctx, "x@orders") // the named group has a leader too
	require.NoError(t, err)
	c.stop(2)
	c.stop(3)

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
		require.ErrorIs(t, err, ErrNoQuorum, tc.what)
		require.ErrorIs(t, err, ErrUnavailable, tc.what)
		require.True(t, early, "%s: failed only at its deadline: %v", tc.what, err)
		msg := err.Error()
		require.Contains(t, msg, tc.group, tc.what)
		require.Contains(t, msg, "this replica reaches 0 of the other 2 voters", tc.what)
		require.Contains(t, msg, "2="+c.members[2], tc.what)
		require.Contains(t, msg, "3="+c.members[3], tc.what)
		require.Contains(t, msg, "a quorum needs 2 of 3", tc.what)
	}

	// Without a deadline a call waits for the group: it still waits
	// (ended here by cancel), and says why when it ends.
	wait, stop := context.WithCancel(context.Background())
	defer time.AfterFunc(300*time.Millisecond, stop).Stop()
	_, err = n.Inspect(wait, "y")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, ErrNoQuorum)
	require.ErrorIs(t, err, ErrUnavailable)
	require.False(t, errors.Is(err, context.DeadlineExceeded))
}
