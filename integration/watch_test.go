package integration_test

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// until receives from ch until a LockInfo satisfies ok, and returns it.
func until(t *testing.T, ctx context.Context, ch <-chan fencelock.LockInfo, what string, ok func(fencelock.LockInfo) bool) fencelock.LockInfo {
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
	c, ctx := newCluster(t, 3)
	wctx, stop := context.WithCancel(ctx)
	ch := c.Node(3).Watch(wctx, "jobs/reindex")
	first := until(t, ctx, ch, "the first state", func(fencelock.LockInfo) bool { return true })
	require.Equal(t, fencelock.LockInfo{Name: "jobs/reindex"}, first)

	a, l := holding(t, ctx, c.Node(1), "jobs/reindex")
	held := until(t, ctx, ch, "the grant", func(i fencelock.LockInfo) bool { return i.Held })
	require.Equal(t, l.Token(), held.Token)
	require.Equal(t, a.ID(), held.SessionID)

	b := newSession(t, ctx, c.Node(2))
	granted := make(chan *fencelock.Lock, 1)
	go func() {
		next, _ := b.Acquire(ctx, "jobs/reindex")
		granted <- next
	}()
	until(t, ctx, ch, "the waiter", func(i fencelock.LockInfo) bool { return i.Waiters == 1 })
	require.NoError(t, l.Release(ctx))
	next := <-granted
	require.NotNil(t, next)
	handed := until(t, ctx, ch, "the hand-over", func(i fencelock.LockInfo) bool { return i.Token == next.Token() })
	require.Equal(t, fencelock.LockInfo{Name: "jobs/reindex", Held: true, Token: next.Token(), SessionID: b.ID(), PartID: b.ID(),
		Holders: []fencelock.Holder{{SessionID: b.ID(), PartID: b.ID(), Token: next.Token(), Owner: 2}}}, unnamed(t, handed))

	require.NoError(t, c.Node(1).Revoke(ctx, "jobs/reindex"))
	until(t, ctx, ch, "the revocation", func(i fencelock.LockInfo) bool { return !i.Held })
	stop()
	for range ch { // closes once its ctx ended
	}
}

func TestWatchInvalidName(t *testing.T) {
	c, ctx := newCluster(t, 1)
	ch := c.Node(1).Watch(ctx, "")
	info, ok := <-ch
	require.True(t, ok)
	require.ErrorIs(t, info.Err, fencelock.ErrInvalidName)
	_, ok = <-ch
	require.False(t, ok)
}

// A watcher that keeps up sees every grant of a contended lock, in the
// order the group made them: each holder releases only once the watch has
// shown its grant, so nothing coalesces away.
func TestWatchSeesEveryGrantOfAContendedLock(t *testing.T) {
	c, ctx := newCluster(t, 3)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch := c.Node(3).Watch(wctx, "hot")
	until(t, ctx, ch, "the first state", func(fencelock.LockInfo) bool { return true })

	const holders = 6
	seen := make(chan uint64, holders) // grants the watch showed, in its order
	watched := make(chan struct{})
	go func() {
		defer close(seen)
		var last uint64
		for n := 0; n < holders; {
			info, ok := <-ch
			if !ok {
				return
			}
			if info.Held && info.Token != last {
				last = info.Token
				seen <- info.Token
				n++
			}
		}
	}()
	shown := map[uint64]chan struct{}{} // token -> closed once the watch showed it
	var mu sync.Mutex
	shownCh := func(tok uint64) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if shown[tok] == nil {
			shown[tok] = make(chan struct{})
		}
		return shown[tok]
	}
	var order []uint64
	go func() {
		defer close(watched)
		for tok := range seen {
			mu.Lock()
			order = append(order, tok)
			mu.Unlock()
			close(shownCh(tok))
		}
	}()
	var wg sync.WaitGroup
	granted := make(chan uint64, holders)
	for i := range holders {
		s := newSession(t, ctx, c.Node(uint64(1+i%3)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := s.Acquire(ctx, "hot")
			if !assert.NoError(t, err) {
				return
			}
			granted <- l.Token()
			select {
			case <-shownCh(l.Token()):
			case <-ctx.Done():
			}
			assert.NoError(t, l.Release(ctx))
		}()
	}
	wg.Wait()
	<-watched
	close(granted)
	var tokens []uint64
	for tok := range granted {
		tokens = append(tokens, tok)
	}
	slices.Sort(tokens)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, tokens, order, "every grant, in the order of its token")
}
