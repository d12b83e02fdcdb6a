package fencelock

import (
	"context"
	"errors"
	"strings"
	"sync"
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

func TestAcquireReleaseSeenByEveryReplica(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.node(1))
	require.NotZero(t, s.ID())

	l, err := s.Acquire(ctx, "jobs/reindex")
	require.NoError(t, err)
	require.Equal(t, "jobs/reindex", l.Name())
	require.NotZero(t, l.Token())
	require.Nil(t, l.Err())
	for id := uint64(1); id <= 3; id++ {
		info := inspect(t, ctx, c.node(id), "jobs/reindex")
		require.Equal(t, LockInfo{Name: "jobs/reindex", Held: true, Token: l.Token(), SessionID: s.ID(), PartID: s.ID(),
			Holders: []Holder{{SessionID: s.ID(), PartID: s.ID(), Token: l.Token(), Owner: 1}}}, unnamed(t, info))
	}

	require.NoError(t, l.Release(ctx))
	require.True(t, closed(l.Done()), "Done closes on release")
	require.ErrorIs(t, l.Err(), ErrNotHeld)
	require.Equal(t, LockInfo{Name: "jobs/reindex"}, inspect(t, ctx, c.node(2), "jobs/reindex"))
	require.ErrorIs(t, l.Release(ctx), ErrNotHeld, "a second release finds the grant gone")

	l2, err := s.Acquire(ctx, "jobs/reindex")
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token(), "every grant gets a larger token")
	require.NoError(t, s.Close(ctx))
	require.True(t, closed(l2.Done()))
	require.False(t, inspect(t, ctx, c.node(3), "jobs/reindex").Held, "closing the session released its lock")
}

func TestTryAcquireFailsAtOnceWhenHeld(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	s1, s2 := newSession(t, ctx, c.node(1)), newSession(t, ctx, c.node(2))
	l1, err := s1.TryAcquire(ctx, "a")
	require.NoError(t, err)

	_, err = s2.TryAcquire(ctx, "a")
	require.ErrorIs(t, err, ErrLocked)
	_, err = s1.TryAcquire(ctx, "a")
	require.ErrorIs(t, err, ErrLocked, "each call is its own request, even in the holder's session")
	require.Equal(t, 0, inspect(t, ctx, c.node(3), "a").Waiters, "TryAcquire never queues")

	require.NoError(t, l1.Release(ctx))
	l2, err := s2.TryAcquire(ctx, "a")
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l1.Token())
}

// On release exactly the head of the queue is granted, wherever its session
// lives, and the others keep waiting.
func TestFIFOGrantOrderAcrossReplicas(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	holder := newSession(t, ctx, c.node(1))
	l, err := holder.Acquire(ctx, "q")
	require.NoError(t, err)

	var sessions []*Session
	var results []<-chan acquired
	for i, id := range []uint64{2, 3, 1, 2} {
		s := newSession(t, ctx, c.node(id))
		sessions = append(sessions, s)
		results = append(results, acquireAsync(ctx, s, "q"))
		waitWaiters(t, ctx, c.node(3), "q", i+1) // enqueue in a known order
	}

	last := l.Token()
	require.NoError(t, l.Release(ctx))
	for i, s := range sessions {
		r := <-results[i]
		require.NoError(t, r.err)
		require.Greater(t, r.l.Token(), last)
		last = r.l.Token()
		info := inspect(t, ctx, c.node(1), "q")
		require.Equal(t, s.ID(), info.SessionID, "waiter %d is granted in queue order", i)
		require.Equal(t, len(sessions)-i-1, info.Waiters)
		for _, later := range results[i+1:] {
			require.Empty(t, later, "only the head is woken")
		}
		require.NoError(t, r.l.Release(ctx))
	}
	require.False(t, inspect(t, ctx, c.node(2), "q").Held)
}

func TestCancelWhileQueuedLeavesTheQueue(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	holder, waiter := newSession(t, ctx, c.node(1)), newSession(t, ctx, c.node(2))
	l, err := holder.Acquire(ctx, "q")
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	res := acquireAsync(wctx, waiter, "q")
	waitWaiters(t, ctx, c.node(3), "q", 1)
	cancel()
	r := <-res
	require.ErrorIs(t, r.err, context.Canceled)
	require.Nil(t, r.l)
	require.Equal(t, 0, inspect(t, ctx, c.node(1), "q").Waiters, "the cancelled call left the queue")

	require.NoError(t, l.Release(ctx))
	require.False(t, inspect(t, ctx, c.node(3), "q").Held, "nobody holds a lock whose caller gave up")

	l2, err := waiter.Acquire(ctx, "q")
	require.NoError(t, err, "the session is still usable")
	require.NoError(t, l2.Release(ctx))
}

// A cancel that races a grant never leaves the lock held by a caller that
// gave up: either the call returned the lock, or the lock ends up free.
func TestCancelRacingGrantReleasesTheLock(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	holder, waiter := newSession(t, ctx, c.node(1)), newSession(t, ctx, c.node(2))
	for i := range 10 {
		l, err := holder.Acquire(ctx, "race")
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		res := acquireAsync(wctx, waiter, "race")
		waitWaiters(t, ctx, c.node(2), "race", 1)
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
		info := inspect(t, ctx, c.node(3), "race")
		require.False(t, info.Held, "round %d: lock left held by a cancelled caller: %+v", i, info)
		require.Zero(t, info.Waiters)
		cancel()
	}
}

// Each Acquire is its own waiter: two goroutines of one session exclude each
// other.
func TestTwoGoroutinesOfOneSessionExcludeEachOther(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.node(1))
	first, err := s.Acquire(ctx, "shared")
	require.NoError(t, err)
	second := acquireAsync(ctx, s, "shared")
	waitWaiters(t, ctx, c.node(2), "shared", 1)
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
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	s1, s2 := newSession(t, ctx, c.node(1)), newSession(t, ctx, c.node(2))
	a, err := s1.Acquire(ctx, "a")
	require.NoError(t, err)
	b, err := s1.Acquire(ctx, "b")
	require.NoError(t, err)
	res := acquireAsync(ctx, s2, "a")
	waitWaiters(t, ctx, c.node(3), "a", 1)

	require.NoError(t, s1.Close(ctx))
	require.True(t, closed(s1.Done()))
	require.ErrorIs(t, s1.Err(), ErrSessionClosed)
	require.True(t, closed(a.Done()))
	require.True(t, closed(b.Done()))
	r := <-res
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), b.Token())
	require.False(t, inspect(t, ctx, c.node(3), "b").Held)

	_, err = s1.Acquire(ctx, "c")
	require.ErrorIs(t, err, ErrSessionClosed)
	require.NoError(t, s1.Close(ctx), "Close is idempotent")
	require.NoError(t, s2.Close(ctx))
}

func TestNodeCloseEndsItsSessions(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	n := c.node(2)
	s := newSession(t, ctx, n)
	l, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	c.stop(2)
	require.True(t, closed(s.Done()))
	require.ErrorIs(t, s.Err(), ErrClosed)
	require.True(t, closed(l.Done()))
	require.ErrorIs(t, l.Err(), ErrClosed)
	require.NoError(t, n.Close(), "Close is idempotent")
	_, err = n.NewSession(ctx)
	require.ErrorIs(t, err, ErrClosed)
	_, err = n.Inspect(ctx, "x")
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Acquire(ctx, "y")
	require.ErrorIs(t, err, ErrClosed)
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

func TestInvalidInputGetsSentinelErrors(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.node(1))
	for _, name := range []string{"", strings.Repeat("x", 513), "bad\x00name", "\xff\xfe"} {
		_, err := s.Acquire(ctx, name)
		require.ErrorIs(t, err, ErrInvalidName, "%q", name)
		_, err = s.TryAcquire(ctx, name)
		require.ErrorIs(t, err, ErrInvalidName)
		_, err = c.node(1).Inspect(ctx, name)
		require.ErrorIs(t, err, ErrInvalidName)
	}
	l, err := s.Acquire(ctx, strings.Repeat("é", 256))
	require.NoError(t, err, "512 bytes of UTF-8 is a valid name")
	require.NoError(t, l.Release(ctx))

	for _, opts := range [][]SessionOption{
		{WithTTL(time.Millisecond)}, {WithTTL(25 * time.Hour)},
		{WithTTL(time.Second), WithSafetyMargin(time.Second)},
		{WithSafetyMargin(-time.Second)},
	} {
		_, err := c.node(1).NewSession(ctx, opts...)
		require.ErrorIs(t, err, ErrInvalidTTL)
	}

	dir := t.TempDir()
	for _, cfg := range []Config{
		{Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir},
		{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1:1"}},
		{ReplicaID: 2, Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir},
		{ReplicaID: 1, Join: true, Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir},
		{ReplicaID: 1, Join: true, Dir: dir},
		{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir, ElectionTicks: 4, HeartbeatTicks: 2},
		{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1:1"}, Dir: dir, SessionTTL: time.Millisecond},
	} {
		_, err := Start(ctx, cfg)
		require.True(t, errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrInvalidTTL), "%+v: %v", cfg, err)
	}
}

// Many sessions and goroutines on a few locks: every grant is exclusive and
// every token is larger than the previous grant's of the same lock.
func TestConcurrentAcquireIsExclusive(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	fencer := NewFencer()
	var mu sync.Mutex
	inside := map[string]bool{}
	var wg sync.WaitGroup
	for w := range 6 {
		s := newSession(t, ctx, c.node(uint64(w%3+1)))
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

func assertNoError(t testing.TB, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}
