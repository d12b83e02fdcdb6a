package integration_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

func TestAcquireReleaseSeenByEveryReplica(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s := newSession(t, ctx, c.Node(1))
	require.NotZero(t, s.ID())

	l, err := s.Acquire(ctx, "jobs/reindex")
	require.NoError(t, err)
	require.Equal(t, "jobs/reindex", l.Name())
	require.NotZero(t, l.Token())
	require.Nil(t, l.Err())
	for id := uint64(1); id <= 3; id++ {
		info := inspect(t, ctx, c.Node(id), "jobs/reindex")
		require.Equal(t, fencelock.LockInfo{Name: "jobs/reindex", Held: true, Token: l.Token(), SessionID: s.ID(), PartID: s.ID(),
			Holders: []fencelock.Holder{{SessionID: s.ID(), PartID: s.ID(), Token: l.Token(), Owner: 1}}}, unnamed(t, info))
	}

	require.NoError(t, l.Release(ctx))
	require.True(t, closed(l.Done()), "Done closes on release")
	require.ErrorIs(t, l.Err(), fencelock.ErrNotHeld)
	require.Equal(t, fencelock.LockInfo{Name: "jobs/reindex"}, inspect(t, ctx, c.Node(2), "jobs/reindex"))
	require.ErrorIs(t, l.Release(ctx), fencelock.ErrNotHeld, "a second release finds the grant gone")

	l2, err := s.Acquire(ctx, "jobs/reindex")
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token(), "every grant gets a larger token")
	require.NoError(t, s.Close(ctx))
	require.True(t, closed(l2.Done()))
	require.False(t, inspect(t, ctx, c.Node(3), "jobs/reindex").Held, "closing the session released its lock")
}

func TestTryAcquireFailsAtOnceWhenHeld(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s1, s2 := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	l1, err := s1.TryAcquire(ctx, "a")
	require.NoError(t, err)

	_, err = s2.TryAcquire(ctx, "a")
	require.ErrorIs(t, err, fencelock.ErrLocked)
	_, err = s1.TryAcquire(ctx, "a")
	require.ErrorIs(t, err, fencelock.ErrLocked, "each call is its own request, even in the holder's session")
	require.Equal(t, 0, inspect(t, ctx, c.Node(3), "a").Waiters, "TryAcquire never queues")

	require.NoError(t, l1.Release(ctx))
	l2, err := s2.TryAcquire(ctx, "a")
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l1.Token())
}

// On release exactly the head of the queue is granted, wherever its session
// lives, and the others keep waiting.
func TestFIFOGrantOrderAcrossReplicas(t *testing.T) {
	c, ctx := newCluster(t, 3)
	_, l := holding(t, ctx, c.Node(1), "q")

	var sessions []*fencelock.Session
	var results []<-chan acquired
	for i, id := range []uint64{2, 3, 1, 2} {
		s := newSession(t, ctx, c.Node(id))
		sessions = append(sessions, s)
		results = append(results, acquireAsync(ctx, s, "q"))
		waitWaiters(t, ctx, c.Node(3), "q", i+1) // enqueue in a known order
	}

	last := l.Token()
	require.NoError(t, l.Release(ctx))
	for i, s := range sessions {
		r := <-results[i]
		require.NoError(t, r.err)
		require.Greater(t, r.l.Token(), last)
		last = r.l.Token()
		info := inspect(t, ctx, c.Node(1), "q")
		require.Equal(t, s.ID(), info.SessionID, "waiter %d is granted in queue order", i)
		require.Equal(t, len(sessions)-i-1, info.Waiters)
		for _, later := range results[i+1:] {
			require.Empty(t, later, "only the head is woken")
		}
		require.NoError(t, r.l.Release(ctx))
	}
	require.False(t, inspect(t, ctx, c.Node(2), "q").Held)
}

func TestCancelWhileQueuedLeavesTheQueue(t *testing.T) {
	c, ctx := newCluster(t, 3)
	holder, waiter := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	l, err := holder.Acquire(ctx, "q")
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	res := acquireAsync(wctx, waiter, "q")
	waitWaiters(t, ctx, c.Node(3), "q", 1)
	cancel()
	r := <-res
	require.ErrorIs(t, r.err, context.Canceled)
	require.Nil(t, r.l)
	require.Equal(t, 0, inspect(t, ctx, c.Node(1), "q").Waiters, "the cancelled call left the queue")

	require.NoError(t, l.Release(ctx))
	require.False(t, inspect(t, ctx, c.Node(3), "q").Held, "nobody holds a lock whose caller gave up")

	l2, err := waiter.Acquire(ctx, "q")
	require.NoError(t, err, "the session is still usable")
	require.NoError(t, l2.Release(ctx))
}

// A cancel that races a grant never leaves the lock held by a caller that
// gave up: either the call returned the lock, or the lock ends up free.
func TestCancelRacingGrantReleasesTheLock(t *testing.T) {
	c, ctx := newCluster(t, 3)
	holder, waiter := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	for i := range 10 {
		l, err := holder.Acquire(ctx, "race")
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		res := acquireAsync(wctx, waiter, "race")
		waitWaiters(t, ctx, c.Node(2), "race", 1)
		released := make(chan error, 1)
		go func() { released <- l.Release(ctx) }()
		if i%2 == 0 {
			cancel()
			require.NoError(t, <-released)
		} else {
			require.NoError(t, <-released)
			cancel()
		}
		r := <-res
		if r.err == nil {
			require.NoError(t, r.l.Release(ctx))
		} else {
			require.ErrorIs(t, r.err, context.Canceled)
		}
		info := inspect(t, ctx, c.Node(3), "race")
		require.False(t, info.Held, "round %d: lock left held by a cancelled caller: %+v", i, info)
		require.Zero(t, info.Waiters)
		cancel()
	}
}

// Each Acquire is its own waiter: two goroutines of one session exclude each
// other.
func TestTwoGoroutinesOfOneSessionExcludeEachOther(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s, first := holding(t, ctx, c.Node(1), "shared")
	second := acquireAsync(ctx, s, "shared")
	waitWaiters(t, ctx, c.Node(2), "shared", 1)
	require.Empty(t, second)
	require.NoError(t, first.Release(ctx))
	r := <-second
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), first.Token())

	other, err := s.Acquire(ctx, "other")
	require.NoError(t, err, "a session holds many locks")
	require.NoError(t, other.Release(ctx))
	require.NoError(t, r.l.Release(ctx))
}

func TestSessionCloseReleasesAllItsLocks(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s1, s2 := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	a, err := s1.Acquire(ctx, "a")
	require.NoError(t, err)
	b, err := s1.Acquire(ctx, "b")
	require.NoError(t, err)
	res := acquireAsync(ctx, s2, "a")
	waitWaiters(t, ctx, c.Node(3), "a", 1)

	require.NoError(t, s1.Close(ctx))
	require.True(t, closed(s1.Done()))
	require.ErrorIs(t, s1.Err(), fencelock.ErrSessionClosed)
	require.True(t, closed(a.Done()))
	require.True(t, closed(b.Done()))
	r := <-res
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), b.Token())
	require.False(t, inspect(t, ctx, c.Node(3), "b").Held)

	_, err = s1.Acquire(ctx, "c")
	require.ErrorIs(t, err, fencelock.ErrSessionClosed)
	require.NoError(t, s1.Close(ctx), "Close is idempotent")
	require.NoError(t, s2.Close(ctx))
}

func TestNodeCloseEndsItsSessions(t *testing.T) {
	c, ctx := newCluster(t, 3)
	n := c.Node(2)
	s := newSession(t, ctx, n)
	l, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	c.Stop(2)
	require.True(t, closed(s.Done()))
	require.ErrorIs(t, s.Err(), fencelock.ErrClosed)
	require.True(t, closed(l.Done()))
	require.ErrorIs(t, l.Err(), fencelock.ErrClosed)
	require.NoError(t, n.Close(), "Close is idempotent")
	_, err = n.NewSession(ctx)
	require.ErrorIs(t, err, fencelock.ErrClosed)
	_, err = n.Inspect(ctx, "x")
	require.ErrorIs(t, err, fencelock.ErrClosed)
	_, err = s.Acquire(ctx, "y")
	require.ErrorIs(t, err, fencelock.ErrClosed)
}

func TestInvalidInputGetsSentinelErrors(t *testing.T) {
	c, ctx := newCluster(t, 1)
	s := newSession(t, ctx, c.Node(1))
	for _, name := range []string{"", strings.Repeat("x", 513), "bad\x00name", "\xff\xfe"} {
		_, err := s.Acquire(ctx, name)
		require.ErrorIs(t, err, fencelock.ErrInvalidName, "%q", name)
		_, err = s.TryAcquire(ctx, name)
		require.ErrorIs(t, err, fencelock.ErrInvalidName)
		_, err = c.Node(1).Inspect(ctx, name)
		require.ErrorIs(t, err, fencelock.ErrInvalidName)
	}
	l, err := s.Acquire(ctx, strings.Repeat("é", 256))
	require.NoError(t, err, "512 bytes of UTF-8 is a valid name")
	require.NoError(t, l.Release(ctx))

	for _, opts := range [][]fencelock.SessionOption{
		{fencelock.WithTTL(time.Millisecond)}, {fencelock.WithTTL(25 * time.Hour)},
		{fencelock.WithTTL(time.Second), fencelock.WithSafetyMargin(time.Second)},
		{fencelock.WithSafetyMargin(-time.Second)},
	} {
		_, err := c.Node(1).NewSession(ctx, opts...)
		require.ErrorIs(t, err, fencelock.ErrInvalidTTL)
	}

	dir := t.TempDir()
	for _, cfg := range []fencelock.Config{
		{Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir},
		{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1:1"}},
		{ReplicaID: 2, Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir},
		{ReplicaID: 1, Join: true, Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir},
		{ReplicaID: 1, Join: true, Dir: dir},
		{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir, ElectionTicks: 4, HeartbeatTicks: 2},
		{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir, SessionTTL: time.Millisecond},
	} {
		_, err := fencelock.Start(ctx, cfg)
		require.True(t, errors.Is(err, fencelock.ErrInvalidConfig) || errors.Is(err, fencelock.ErrInvalidTTL), "%+v: %v", cfg, err)
	}
}

// Many sessions and goroutines on a few locks: every grant is exclusive and
// every token is larger than the previous grant's of the same lock.
func TestConcurrentAcquireIsExclusive(t *testing.T) {
	c, ctx := newCluster(t, 3)
	fencer := fencelock.NewFencer()
	var mu sync.Mutex
	inside := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 6 {
		s := newSession(t, ctx, c.Node(uint64(w%3+1)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 15 {
				name := []string{"x", "y"}[(w+i)%2]
				l, err := s.Acquire(ctx, name)
				if !assertNoError(t, err) {
					return
				}
				mu.Lock()
				if inside[name] {
					t.Errorf("two holders of %q at once", name)
				}
				inside[name] = true
				mu.Unlock()
				if err := fencer.Admit(name, l.Token()); err != nil {
					t.Errorf("token of a fresh grant refused: %v", err)
				}
				mu.Lock()
				inside[name] = false
				mu.Unlock()
				if !assertNoError(t, l.Release(ctx)) {
					return
				}
			}
		}()
	}
	wg.Wait()
}

// A grant's context carries its token while the grant lasts and is
// cancelled, with the grant's reason as its cause, when it ends.
func TestGrantContext(t *testing.T) {
	cl, ctx := newCluster(t, 3)
	leader := cl.Leader(ctx)
	s := newSession(t, ctx, cl.Node(leader))
	_, ok := fencelock.TokenFrom(ctx)
	require.False(t, ok, "a context without a grant carries no token")

	l, err := s.Acquire(ctx, "ctx/lock")
	require.NoError(t, err)
	lctx := l.Context(ctx)
	tok, ok := fencelock.TokenFrom(lctx)
	require.True(t, ok)
	require.Equal(t, l.Token(), tok)
	require.NoError(t, lctx.Err())

	require.NoError(t, l.Release(ctx))
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), fencelock.ErrNotHeld)
	tok, ok = fencelock.TokenFrom(lctx)
	require.False(t, ok, "an ended grant's token is not to be written with")
	require.Equal(t, l.Token(), tok)

	lead, err := s.Campaign(ctx, "ctx/election", "v")
	require.NoError(t, err)
	ectx := lead.Context(ctx)
	tok, ok = fencelock.TokenFrom(ectx)
	require.True(t, ok)
	require.Equal(t, lead.Token(), tok)
	require.NoError(t, lead.Resign(ctx))
	<-ectx.Done()
	require.ErrorIs(t, context.Cause(ectx), fencelock.ErrNotLeader)
}
