package fencelock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// wallJumper is a clock whose wall reading a test can step.
type wallJumper interface {
	clock.Clock
	Jump(d time.Duration) error
}

// wallOnlyClock is the clock fencelock must not be: its times carry no
// monotonic reading, so a step of the wall clock moves every deadline. The
// tests run it as a control, to show that they would catch a design that
// relied on the wall clock.
type wallOnlyClock struct{ off atomic.Int64 }

func (c *wallOnlyClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.off.Load()))
}
func (c *wallOnlyClock) NewTimer(d time.Duration) clock.Timer { return clock.Real.NewTimer(d) }
func (c *wallOnlyClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real.AfterFunc(d, f)
}
func (c *wallOnlyClock) Jump(d time.Duration) error { c.off.Add(int64(d)); return nil }

var clocks = []struct {
	name     string
	new      func() wallJumper
	monotone bool
}{
	{"monotonic", func() wallJumper { return &clock.Jumping{} }, true},
	{"wall-only-control", func() wallJumper { return &wallOnlyClock{} }, false},
}

// clusterWithClock starts 3 replicas that all take time from one new clock
// c, as if the hosts' clocks were stepped together, and waits for their
// leader.
func clusterWithClock(t *testing.T, newClock func() wallJumper) (c wallJumper, cl *testCluster, ctx context.Context, leader uint64) {
	c = newClock()
	cl = newCluster(t, 3, func(cfg *Config) { testhook.UseClock(cfg, c) })
	ctx = testCtx(t)
	return c, cl, ctx, cl.leader(ctx)
}

// A forward step of the wall clock, on every replica and the holder at once,
// expires nothing: the holder keeps its lock and session for 1.5 more TTLs.
// With the wall-only control clock the same step expires the session at once.
func TestWallClockJumpForwardExpiresNothing(t *testing.T) {
	for _, k := range clocks {
		t.Run(k.name, func(t *testing.T) {
			c, cl, ctx, leader := clusterWithClock(t, k.new)
			const ttl = 2 * time.Second
			s := newSession(t, ctx, cl.node(leader%3+1), WithTTL(ttl))
			l, err := s.Acquire(ctx, "jump")
			require.NoError(t, err)

			require.NoError(t, c.Jump(time.Hour))
			lost := false
			for end := time.Now().Add(3 * ttl / 2); time.Now().Before(end) && !lost; {
				info := inspect(t, ctx, cl.node(leader), "jump")
				lost = closed(l.Done()) || info.Token != l.Token()
				time.Sleep(50 * time.Millisecond) // observing that nothing happens: no event to wait for
			}
			if k.monotone {
				require.False(t, lost, "a wall-clock step expired the session: %v %v", s.Err(), l.Err())
				require.NoError(t, s.Err())
				require.NoError(t, l.Release(ctx))
			} else {
				require.True(t, lost, "control: a wall-only clock lets the step expire the session")
			}
		})
	}
}

// A backward step of the wall clock extends nothing: a holder that stops
// renewing still finds Done closed after TTL−margin by its own clock, and the
// group still passes its lock on after TTL. With the wall-only control clock
// the step would keep the dead holder's lock for an hour.
func TestWallClockJumpBackwardExtendsNothing(t *testing.T) {
	for _, k := range clocks {
		t.Run(k.name, func(t *testing.T) {
			c, cl, ctx, leader := clusterWithClock(t, k.new)
			const ttl = time.Second
			holder := newSession(t, ctx, cl.node(leader%3+1), WithTTL(ttl))
			waiter := newSession(t, ctx, cl.node(leader), WithTTL(5*time.Second))
			l, res := holdWithWaiter(t, ctx, cl.node(leader), holder, waiter, "jump")

			testhook.Freeze(holder) // its keep-alives stop; its deadline timer runs
			defer testhook.Thaw(holder)
			expiries := cl.node(leader).Stats().Expiries
			require.NoError(t, c.Jump(-time.Hour))
			wait, cancel := context.WithTimeout(ctx, 4*ttl)
			defer cancel()
			select {
			case r := <-res:
				require.True(t, k.monotone, "control: the wall-only clock should have kept the lock")
				require.NoError(t, r.err)
				require.Greater(t, r.l.Token(), l.Token())
				// The lock passed because the group expired the session
				// (the frozen holder closes nothing), not because of how
				// soon it did.
				waitUntil(t, ctx, "the group counted the session's expiry", func() bool {
					return cl.node(leader).Stats().Expiries == expiries+1
				})
				require.True(t, closed(l.Done()), "the holder gave up before the group passed the lock on")
				require.ErrorIs(t, l.Err(), ErrSessionExpired)
			case <-wait.Done():
				require.False(t, k.monotone, "a backward wall-clock step kept a dead holder's lock")
				require.False(t, closed(l.Done()), "control: the wall-only holder still believes it holds the lock")
			}
		})
	}
}

// holderAndWaiter starts 3 replicas, and the sessions of a holder, on a
// follower with TTL 1s, and of a waiter, on the leader with TTL 5s.
func holderAndWaiter(t *testing.T) (cl *testCluster, ctx context.Context, leader uint64, holder, waiter *Session) {
	t.Helper()
	cl = newCluster(t, 3, nil)
	ctx = testCtx(t)
	leader = cl.leader(ctx)
	holder = newSession(t, ctx, cl.node(leader%3+1), WithTTL(time.Second))
	waiter = newSession(t, ctx, cl.node(leader), WithTTL(5*time.Second))
	return cl, ctx, leader, holder, waiter
}

// pauseHolderUntilPassedOn queues waiter for name behind holder, pauses the
// holder's whole process (testhook.Pause; the test resumes it), and returns
// the waiter's lock once the group expired the holder and granted it on.
func pauseHolderUntilPassedOn(t *testing.T, ctx context.Context, n *Node, holder, waiter *Session, name string) *Lock {
	t.Helper()
	res := acquireAsync(ctx, waiter, name)
	waitWaiters(t, ctx, n, name, 1)
	testhook.Pause(holder)
	r := <-res
	require.NoError(t, r.err, "the group expired the paused holder and granted on")
	return r.l
}

// A holder whose whole process pauses past its TTL (no keep-alive, no
// timer, no news from the group: testhook.Pause) cannot know it lost the
// lock while paused. On waking it finds Done closed on its first look, and
// its late write is refused by the resource.
func TestPausedProcessFindsDoneClosedOnWaking(t *testing.T) {
	cl, ctx, leader, a, b := holderAndWaiter(t)
	storage := NewFencer()
	la, err := a.Acquire(ctx, "file")
	require.NoError(t, err)
	require.NoError(t, storage.Do("file", la.Token(), func() error { return nil }))

	done := la.Done()
	successor := pauseHolderUntilPassedOn(t, ctx, cl.node(leader), a, b, "file")
	require.False(t, closed(done), "while paused, the holder learned nothing")
	require.NoError(t, storage.Do("file", successor.Token(), func() error { return nil }))

	testhook.Resume(a)
	require.True(t, closed(la.Done()), "on waking, the first look finds Done closed")
	require.ErrorIs(t, la.Err(), ErrSessionExpired)
	require.ErrorIs(t, a.Err(), ErrSessionExpired)
	wrote := false
	err = storage.Do("file", la.Token(), func() error { wrote = true; return nil })
	require.ErrorIs(t, err, ErrStaleToken, "the late write is refused")
	require.False(t, wrote)
	require.ErrorIs(t, la.Release(ctx), ErrNotHeld)
	require.Equal(t, b.ID(), inspect(t, ctx, cl.node(leader), "file").SessionID)
}

// A holder paused past its TTL (testhook.Pause: no timer, no news) keeps an
// open grant context while paused; on waking, its first TokenFrom refuses
// the token.
func TestTokenFromRechecksDeadlineAfterPause(t *testing.T) {
	cl, ctx, leader, a, b := holderAndWaiter(t)
	la, err := a.Acquire(ctx, "ctx/paused")
	require.NoError(t, err)
	lctx := la.Context(ctx)

	pauseHolderUntilPassedOn(t, ctx, cl.node(leader), a, b, "ctx/paused")
	require.NoError(t, lctx.Err(), "while paused, nothing cancelled the grant's context")
	testhook.Resume(a)
	_, ok := TokenFrom(lctx)
	require.False(t, ok, "on waking, TokenFrom sees the deadline passed")
	require.Error(t, lctx.Err(), "on waking, the context's Err sees it too, whatever the timer did")
	require.True(t, closed(lctx.Done()))
	require.ErrorIs(t, context.Cause(lctx), ErrSessionExpired)
}

// aheadClock is the process clock with a reading a test can move forward,
// monotonic part included, while its timers run in real time: it stands for
// a process that slept (SIGSTOP, a long GC pause) and woke before any timer
// of its had a chance to run.
type aheadClock struct{ ahead atomic.Int64 }

func (c *aheadClock) Now() time.Time                       { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *aheadClock) NewTimer(d time.Duration) clock.Timer { return clock.Real.NewTimer(d) }
func (c *aheadClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real.AfterFunc(d, f)
}

// A grant context's Err and Done answer by the holder's clock at the call:
// once the deadline has passed they report it, although the deadline timer
// is still many seconds away from running and the group has not expired
// the session. GrantErr and TokenFrom see it through derived contexts, whose
// own Err does not check. Nothing here waits: every answer is the first look.
func TestGrantContextRechecksDeadlineAtCall(t *testing.T) {
	c := &aheadClock{}
	cl := newCluster(t, 1, func(cfg *Config) { testhook.UseClock(cfg, c) })
	ctx := testCtx(t)
	const ttl = 20 * time.Second // no timer of the test's sessions runs during the test
	s1 := newSession(t, ctx, cl.node(1), WithTTL(ttl))
	s2 := newSession(t, ctx, cl.node(1), WithTTL(ttl))
	l, err := s1.Acquire(ctx, "ctx/ahead")
	require.NoError(t, err)
	lead, err := s2.Campaign(ctx, "ctx/ahead", "v")
	require.NoError(t, err)
	lctx, ectx := l.Context(ctx), lead.Context(ctx)
	derived, cancel := context.WithTimeout(lctx, time.Hour) // as database/sql and net/http derive
	defer cancel()
	require.NoError(t, GrantErr(derived))
	require.NoError(t, lctx.Err())
	require.False(t, closed(ectx.Done()))

	testhook.Freeze(s1) // no keep-alive moves the deadlines on
	testhook.Freeze(s2)
	c.ahead.Store(int64(2 * ttl)) // the process "wakes" two TTLs later

	require.ErrorIs(t, GrantErr(derived), ErrSessionExpired, "through a derived context")
	tok, ok := TokenFrom(derived)
	require.False(t, ok)
	require.Equal(t, l.Token(), tok)
	require.Error(t, lctx.Err())
	require.ErrorIs(t, context.Cause(lctx), ErrSessionExpired)
	require.Error(t, derived.Err(), "cancelling the grant context cancels its children at once")
	require.True(t, closed(ectx.Done()), "Done is closed on its first look")
	require.ErrorIs(t, context.Cause(ectx), ErrSessionExpired)
	require.ErrorIs(t, lead.Err(), ErrSessionExpired)
	testhook.Thaw(s1)
	testhook.Thaw(s2)
}

// GrantErr of a context without a grant is nil: helpers that re-check
// before writing have nothing to check then, and TokenFrom says no token.
func TestGrantErrWithoutGrant(t *testing.T) {
	require.NoError(t, GrantErr(context.Background()))
	tok, ok := TokenFrom(context.Background())
	require.False(t, ok)
	require.Zero(t, tok)
}
