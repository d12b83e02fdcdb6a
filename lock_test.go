package fencelock

import (
	"context"

	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitUntil polls a condition on the group's state, for which no channel
// exists, until it holds or ctx ends.
func waitUntil(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func inspect(t testing.TB, ctx context.Context, n *Node, name string) LockInfo {
	t.Helper()
	info, err := n.Inspect(ctx, name)
	require.NoError(t, err)
	return info
}

// waitWaiters waits until lock name has n queued requests.
func waitWaiters(t testing.TB, ctx context.Context, n *Node, name string, waiters int) {
	t.Helper()
	waitUntil(t, ctx, "the queue is long enough", func() bool { return inspect(t, ctx, n, name).Waiters == waiters })
}

func newSession(t testing.TB, ctx context.Context, n *Node, opts ...SessionOption) *Session {
	t.Helper()
	s, err := n.NewSession(ctx, opts...)
	require.NoError(t, err)
	return s
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

type acquired struct {
	l   *Lock
	err error
}

// acquireAsync starts an Acquire and returns where its result arrives.
func acquireAsync(ctx context.Context, s *Session, name string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx, name)
		ch <- acquired{l, err}
	}()
	return ch
}

// holdWithWaiter has holder take lock name and waiter queue behind it, and
// waits until n shows the waiter queued: the grant, and where the waiter's
// result arrives.
func holdWithWaiter(t testing.TB, ctx context.Context, n *Node, holder, waiter *Session, name string) (*Lock, <-chan acquired) {
	t.Helper()
	l, err := holder.Acquire(ctx, name)
	require.NoError(t, err)
	res := acquireAsync(ctx, waiter, name)
	waitWaiters(t, ctx, n, name, 1)
	return l, res
}

// Close ends a node's sessions here without ending them at the group, so
// a Release or Resign made once they ended (a leader loop resigns when its
// work returns) fails with ErrClosed and changes nothing at the group,
// even while the node's replica is still running: Close stops it only
// after the sessions (examples/election's -keep-term lost its term to
// that resign, once in 8 runs).
func TestCallsAfterCloseDoNotReachTheGroup(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	n := c.node(2)
	s := newSession(t, ctx, n, WithTTL(30*time.Second))
	l, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	lead, err := s.Campaign(ctx, "e", "v")
	require.NoError(t, err)
	n.h.Close(ErrClosed) // the sessions end here; the replica runs on
	require.True(t, closed(l.Done()))
	require.ErrorIs(t, l.Release(ctx), ErrClosed)
	require.ErrorIs(t, lead.Resign(ctx), ErrClosed)
	info := inspect(t, ctx, c.node(1), "x")
	require.True(t, info.Held, "the lock is kept at the group, for a resume")
	require.Equal(t, l.Token(), info.Token)
	got, err := c.node(1).Leader(ctx, "e")
	require.NoError(t, err)
	require.Equal(t, lead.Token(), got.Token, "the term is kept at the group")
	require.NoError(t, n.Close())
}
