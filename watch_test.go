package fencelock

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// until receives from ch until a LockInfo satisfies ok, and returns it.
func until(t *testing.T, ctx context.Context, ch <-chan LockInfo, what string, ok func(LockInfo) bool) LockInfo {
	t.Helper()
	for {
		select {
		case info, open := <-ch:
			require.True(t, open, "the watch closed before %s", what)
			if ok(info) {
				return info
			}
		case <-ctx.Done():
			t.Fatalf("watch never showed %s: %v", what, ctx.Err())
		}
	}
}

// A watch on one replica follows a lock changed from the others: its state
// first, then grants, a waiter queued, the hand-over, an expiry-free
// release, each as this replica applies it.
func TestWatchFollowsALock(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	wctx, stop := context.WithCancel(ctx)
	ch := c.node(3).Watch(wctx, "jobs/reindex")
	first := until(t, ctx, ch, "the first state", func(LockInfo) bool { return true })
	require.Equal(t, LockInfo{Name: "jobs/reindex"}, first)

	a := newSession(t, ctx, c.node(1))
	l, err := a.Acquire(ctx, "jobs/reindex")
	require.NoError(t, err)
	held := until(t, ctx, ch, "the grant", func(i LockInfo) bool { return i.Held })
	require.Equal(t, l.Token(), held.Token)
	require.Equal(t, a.ID(), held.SessionID)

	b := newSession(t, ctx, c.node(2))
	granted := make(chan *Lock, 1)
	go func() {
		next, _ := b.Acquire(ctx, "jobs/reindex")
		granted <- next
	}()
	until(t, ctx, ch, "the waiter", func(i LockInfo) bool { return i.Waiters == 1 })
	require.NoError(t, l.Release(ctx))
	next := <-granted
	require.NotNil(t, next)
	handed := until(t, ctx, ch, "the hand-over", func(i LockInfo) bool { return i.Token == next.Token() })
	require.Equal(t, LockInfo{Name: "jobs/reindex", Held: true, Token: next.Token(), SessionID: b.ID(),
		Holders: []Holder{{SessionID: b.ID(), Token: next.Token(), Owner: 2}}}, handed)

	require.NoError(t, c.node(1).Revoke(ctx, "jobs/reindex"))
	until(t, ctx, ch, "the revocation", func(i LockInfo) bool { return !i.Held })
	stop()
	for range ch { // closes once its ctx ended
	}
}

func TestWatchInvalidName(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := testCtx(t)
	ch := c.node(1).Watch(ctx, "")
	info, ok := <-ch
	require.True(t, ok)
	require.ErrorIs(t, info.Err, ErrInvalidName)
	_, ok = <-ch
	require.False(t, ok)
}
