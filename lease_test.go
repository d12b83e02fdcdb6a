package fencelock

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/internal/testhook"
)

// slowLink delays a session's background commands (its keep-alives and
// its close) by before on the way to the group and after on the way back,
// as a slow link between holder and leader would; it counts keep-alives in
// flight and acknowledged.
type slowLink struct {
	before, after          time.Duration
	inFlight, maxInFlight  atomic.Int32
	acked, reachedTheGroup atomic.Int32
}

func (sl *slowLink) option() SessionOption {
	return withCommit(func(next commitFunc) commitFunc {
		return func(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
			if keepAlive(cmd) {
				n := sl.inFlight.Add(1)
				defer sl.inFlight.Add(-1)
				for m := sl.maxInFlight.Load(); n > m && !sl.maxInFlight.CompareAndSwap(m, n); m = sl.maxInFlight.Load() {
				}
			}
			if err := delay(ctx, sl.before); err != nil {
				return fsm.Result{}, err
			}
			if keepAlive(cmd) {
				sl.reachedTheGroup.Add(1)
			}
			res, err := next(ctx, cmd)
			if err != nil {
				return res, err
			}
			if err := delay(ctx, sl.after); err != nil {
				return fsm.Result{}, err
			}
			if keepAlive(cmd) && res.Status == fsm.OK {
				sl.acked.Add(1)
			}
			return res, nil
		}
	})
}

// keepAlive reports whether cmd renews a session.
func keepAlive(cmd fsm.Command) bool {
	return cmd.Kind == fsm.KindKeepAlive || cmd.Kind == fsm.KindKeepAliveBatch
}

// delay is the link's latency: it waits d, or until ctx ends.
func delay(ctx context.Context, d time.Duration) error {
	if !sleepCtx(ctx, d) {
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	return nil
}

// With TTL 2s and 300ms each way between holder and leader (600ms per
// keep-alive), the holder keeps its session and lock: its tolerance is
// TTL − margin − TTL/3 ≈ 933ms. (When each keep-alive waited for the
// previous one's answer, the holder gave up after about 2.3s.)
func TestKeepAlivesSurviveSlowCommits(t *testing.T) {
	cl := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := cl.leader(ctx)
	const ttl = 2 * time.Second
	link := &slowLink{before: 300 * time.Millisecond, after: 300 * time.Millisecond}
	s := newSession(t, ctx, cl.node(leader%3+1), WithTTL(ttl), link.option())
	l, err := s.Acquire(ctx, "slow")
	require.NoError(t, err)

	watch := time.NewTimer(3 * ttl)
	defer watch.Stop()
	select {
	case <-l.Done():
		t.Fatalf("the holder gave its lock up after %d keep-alives: %v", link.acked.Load(), l.Err())
	case <-watch.C: // three TTLs with nothing happening
	}
	require.NoError(t, s.Err())
	require.GreaterOrEqual(t, link.acked.Load(), int32(6), "keep-alives went on at TTL/3")
	require.LessOrEqual(t, link.maxInFlight.Load(), int32(session.MaxKeepAlivesInFlight))
	info := inspect(t, ctx, cl.node(leader), "slow")
	require.Equal(t, s.ID(), info.SessionID)
	require.Equal(t, l.Token(), info.Token)
	require.NoError(t, l.Release(ctx))
}

// With keep-alives that take longer than TTL − margin to reach the group,
// none is answered in time: the holder gives up at TTL − margin after the
// open by its own clock, and only after that does the group expire the
// session (its close, slow too, arrives later) and grant the lock on.
func TestSlowCommitsGiveUpBeforeTheGroupExpires(t *testing.T) {
	cl := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := cl.leader(ctx)
	const ttl, margin = 2 * time.Second, 400 * time.Millisecond
	link := &slowLink{before: 1800 * time.Millisecond}
	waiter := newSession(t, ctx, cl.node(leader))
	expiries := cl.node(leader).Stats().Expiries

	opened := time.Now()
	holder := newSession(t, ctx, cl.node(leader%3+1), WithTTL(ttl), WithSafetyMargin(margin), link.option())
	l, err := holder.Acquire(ctx, "slow")
	require.NoError(t, err)
	type granted struct {
		acquired
		holderDone bool // the holder had closed Done by itself when the grant arrived
		after      time.Duration
	}
	res := make(chan granted, 1)
	go func() {
		r := <-acquireAsync(ctx, waiter, "slow")
		res <- granted{r, closed(holder.s.Testing().Done()), time.Since(opened)}
	}()

	<-l.Done()
	gaveUp := time.Since(opened)
	require.ErrorIs(t, l.Err(), ErrSessionExpired)
	require.GreaterOrEqual(t, gaveUp, ttl-margin, "the open's deadline is TTL − margin after its send")

	r := <-res
	require.NoError(t, r.err)
	require.True(t, r.holderDone, "the group granted on while the holder still believed it held the lock")
	require.GreaterOrEqual(t, r.after, ttl, "the group expires a session no sooner than TTL after the open")
	require.Greater(t, r.l.Token(), l.Token())
	wait, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	waitUntil(t, wait, "the group expired the session (its close had not reached it)", func() bool {
		return cl.node(leader).Stats().Expiries == expiries+1
	})
	require.Zero(t, link.reachedTheGroup.Load(), "no keep-alive reached the group")
	require.NoError(t, r.l.Release(ctx))
}

// suspendingClock is the clock of a machine a test can suspend. Suspend(d)
// is a suspend of length d as the process sees it once the machine wakes:
// the boot reading (CLOCK_BOOTTIME) has moved on by d, while Now's monotonic
// reading (CLOCK_MONOTONIC) and the runtime's timers have not moved at all.
type suspendingClock struct{ slept atomic.Int64 }

func (c *suspendingClock) Now() time.Time                       { return time.Now() }
func (c *suspendingClock) NewTimer(d time.Duration) clock.Timer { return clock.Real.NewTimer(d) }
func (c *suspendingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real.AfterFunc(d, f)
}
func (c *suspendingClock) Boot() clock.Instant {
	return clock.Boot(clock.Real).Add(time.Duration(c.slept.Load()))
}
func (c *suspendingClock) Suspend(d time.Duration) { c.slept.Add(int64(d)) }

// monotonicOnly is the same machine read as fencelock read it before:
// through Now's monotonic reading alone, which no suspend moves. It is the
// control, to show the test would catch a deadline on the monotonic clock.
type monotonicOnly struct{ c *suspendingClock }

func (m monotonicOnly) Now() time.Time                                  { return m.c.Now() }
func (m monotonicOnly) NewTimer(d time.Duration) clock.Timer            { return m.c.NewTimer(d) }
func (m monotonicOnly) AfterFunc(d time.Duration, f func()) clock.Timer { return m.c.AfterFunc(d, f) }

// A holder whose machine was suspended past its TTL (here: its process
// paused, and its boot clock moved on by the suspend while its monotonic
// clock stood still) finds its deadline passed on waking: Done is closed on
// the first look and its lock passes on. A session that nobody looks at is
// ended by its node's renewer within a period, even with its deadline
// timer stopped, as a suspend delays it. With the control clock, which
// measures the deadline on the monotonic clock, the holder wakes believing
// it still holds its lock.
func TestSuspendedHolderFindsItsDeadlinePassed(t *testing.T) {
	for _, countsSuspend := range []bool{true, false} {
		t.Run(fmt.Sprintf("boot=%v", countsSuspend), func(t *testing.T) {
			clocks := map[uint64]*suspendingClock{1: {}, 2: {}, 3: {}}
			cl := newCluster(t, 3, func(cfg *Config) {
				if countsSuspend {
					testhook.UseClock(cfg, clocks[cfg.ReplicaID])
				} else {
					testhook.UseClock(cfg, monotonicOnly{clocks[cfg.ReplicaID]})
				}
			})
			ctx := testCtx(t)
			leader := cl.leader(ctx)
			host := leader%3 + 1 // the holder's machine; the leader's clock runs on
			const ttl = 2 * time.Second
			holder := newSession(t, ctx, cl.node(host), WithTTL(ttl))
			unwatched := newSession(t, ctx, cl.node(host), WithTTL(ttl))
			waiter := newSession(t, ctx, cl.node(leader), WithTTL(10*time.Second))
			l, res := holdWithWaiter(t, ctx, cl.node(leader), holder, waiter, "suspend")

			testhook.Pause(holder) // the machine sleeps: nothing of the holder runs
			testhook.Pause(unwatched)
			clocks[host].Suspend(2 * ttl)
			unwatched.s.Testing().StopDeadlineTimer() // a suspend delays the runtime's timers
			testhook.Resume(holder)
			testhook.Resume(unwatched)

			if !countsSuspend {
				require.False(t, closed(l.Done()), "control: on the monotonic clock the suspend went unnoticed")
				require.NoError(t, l.Err())
				return
			}
			require.True(t, closed(l.Done()), "the first look after waking finds Done closed")
			require.ErrorIs(t, l.Err(), ErrSessionExpired)
			require.ErrorIs(t, holder.Err(), ErrSessionExpired)
			r := <-res
			require.NoError(t, r.err, "the holder's close passed the lock on")
			require.Greater(t, r.l.Token(), l.Token())

			watch := time.NewTimer(3 * ttl)
			defer watch.Stop()
			select {
			case <-unwatched.s.Testing().Done(): // not Done(): that would look itself
			case <-watch.C:
				t.Fatal("the renewer did not notice the suspend")
			}
			require.ErrorIs(t, unwatched.Err(), ErrSessionExpired)
		})
	}
}

// A session that its node stops covering (frozen: its process is cut off,
// its clock runs on) while the node's batches renew the others expires at
// the group one TTL after the last renewal that covered it, no sooner; its
// holder gave it up before; the others live on.
func TestUncoveredSessionExpiresOneTTLAfterItsLastRenewal(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := c.leader(ctx)
	f := c.node(leader%3 + 1)
	const ttl = time.Second
	a := newSession(t, ctx, f, WithTTL(ttl))
	b := newSession(t, ctx, f, WithTTL(ttl))
	la, err := a.Acquire(ctx, "covered/a")
	require.NoError(t, err)
	lb, err := b.Acquire(ctx, "covered/b")
	require.NoError(t, err)
	waiter := newSession(t, ctx, c.node(leader), WithTTL(10*time.Second))
	res := acquireAsync(ctx, waiter, "covered/a")
	waitWaiters(t, ctx, c.node(leader), "covered/a", 1)

	expiries := c.node(leader).Stats().Expiries
	testhook.Freeze(a)
	defer testhook.Thaw(a)
	r := <-res
	granted := time.Now()
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), la.Token())
	require.True(t, closed(la.Done()), "the holder gave up before the group passed its lock on")
	last := testhook.LastKeepAlive(a)
	require.GreaterOrEqual(t, granted.Sub(last), ttl, "the group expired the session less than a TTL after a renewal covered it")
	// The lock passed on because the group expired the session (its frozen
	// holder closes nothing): how soon after the TTL is not the test's.
	waitUntil(t, ctx, "the group counted the session's expiry", func() bool {
		return c.node(leader).Stats().Expiries == expiries+1
	})

	// b shared a's batches until a froze, and kept renewing.
	watch := time.NewTimer(2 * ttl)
	defer watch.Stop()
	select {
	case <-lb.Done():
		t.Fatalf("the covered session lost its lock: %v", lb.Err())
	case <-watch.C:
	}
	require.NoError(t, b.Err())
	require.True(t, testhook.LastKeepAlive(b).After(granted), "b was renewed after a expired")
	require.Equal(t, b.ID(), inspect(t, ctx, c.node(leader), "covered/b").SessionID)
	require.NoError(t, r.l.Release(ctx))
}

// A session with WithExternalKeepAlive lives while KeepAlive is called, and
// once the calls stop its locks pass on, after the holder gave it up.
func TestExternalKeepAlive(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	n := c.node(c.leader(ctx))
	const ttl = time.Second
	s, err := n.NewSession(ctx, WithTTL(ttl), WithExternalKeepAlive())
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "ext")
	require.NoError(t, err)

	// Heartbeats for three TTLs keep it alive: without them it would end
	// after TTL − margin.
	start := time.Now()
	var last time.Time
	for time.Since(start) < 3*ttl {
		last = time.Now()
		require.NoError(t, s.KeepAlive(ctx))
		select {
		case <-l.Done():
			t.Fatalf("lock lost while heartbeating: %v", l.Err())
		case <-time.After(ttl / 4):
		}
	}
	info, err := n.Inspect(ctx, "ext")
	require.NoError(t, err)
	require.Equal(t, s.ID(), info.SessionID)

	// The waiter is queued, and granted once the heartbeats stop.
	other, err := c.node(1 + c.leader(ctx)%3).NewSession(ctx)
	require.NoError(t, err)
	defer other.Close(ctx)
	queued := make(chan int, 1)
	l2, err := other.Acquire(ctx, "ext", WithQueuePosition(func(p int) { queued <- p }))
	holderStopped := closed(s.s.Testing().Done()) // the raw channel: Done() would check the deadline itself
	require.NoError(t, err)
	freed := time.Since(last)
	require.Equal(t, 1, <-queued, "it waited at the head of the queue")
	require.Greater(t, l2.Token(), l.Token())
	t.Logf("lock passed on %v after the last heartbeat (TTL %v)", freed, ttl)
	require.GreaterOrEqual(t, freed, ttl-s.SafetyMargin()-50*time.Millisecond)
	// It passed on because the heartbeats stopped: the holder had given
	// the session up by its own deadline when the waiter was granted.
	require.True(t, holderStopped, "the lock passed on while its holder still believed it held it")
	<-s.Done()
	require.ErrorIs(t, s.KeepAlive(ctx), ErrSessionExpired)
}

// delayedHold is what frozenHolderWithLockDelay set up: the holder runs on
// follower f1 of leader, the waiter on follower f2.
type delayedHold struct {
	leader, f1, f2 uint64
	waiter         *Session
	held           *Lock           // the frozen holder's, already given up
	res            <-chan acquired // where the waiter's Acquire ends
}

// frozenHolderWithLockDelay queues a waiter (with waiterOpts) behind a holder
// of lock "job" whose session has TTL ttl and lock-delay delay, then freezes
// the holder, as if cut off from the group, until the test ends, and waits
// until the holder gave the lock up by its own clock.
func frozenHolderWithLockDelay(t *testing.T, c *testCluster, ctx context.Context, ttl, delay time.Duration, waiterOpts ...SessionOption) delayedHold {
	t.Helper()
	h := delayedHold{leader: c.leader(ctx)}
	h.f1 = h.leader%3 + 1
	h.f2 = h.f1%3 + 1
	a := newSession(t, ctx, c.node(h.f1), WithTTL(ttl), WithLockDelay(delay))
	h.waiter = newSession(t, ctx, c.node(h.f2), waiterOpts...)
	h.held, h.res = holdWithWaiter(t, ctx, c.node(h.f2), a, h.waiter, "job")
	testhook.Freeze(a)
	t.Cleanup(func() { testhook.Thaw(a) })
	<-h.held.Done()
	return h
}

// A holder cut off from the group (frozen) with a lock-delay: the group
// expires its session and frees the lock into a delayed state, shown by
// Inspect, and the waiter is granted it only when the leader's timer ends
// the delay, at least the delay after the holder stopped by its own clock.
func TestLockDelayAfterExpiry(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const ttl, delay = time.Second, 2 * time.Second
	h := frozenHolderWithLockDelay(t, c, ctx, ttl, delay)
	stopped := time.Now()
	leader, f1, f2, b, la, res := h.leader, h.f1, h.f2, h.waiter, h.held, h.res
	require.ErrorIs(t, la.Err(), ErrSessionExpired)
	waitUntil(t, ctx, "the expired holder's lock is delayed", func() bool {
		info := inspect(t, ctx, c.node(f2), "job")
		return info.Delayed && !info.Held && info.Waiters == 1
	})
	_, err := newSession(t, ctx, c.node(leader)).TryAcquire(ctx, "job")
	require.ErrorIs(t, err, ErrLocked, "nobody gets a delayed lock")

	r := <-res
	require.NoError(t, r.err)
	// The group expired the session at least a margin after the holder
	// stopped, and the delay ran from then.
	require.GreaterOrEqual(t, time.Since(stopped), delay, "granted before the delay ran out")
	require.Greater(t, r.l.Token(), la.Token())
	info := inspect(t, ctx, c.node(f1), "job")
	require.False(t, info.Delayed)
	require.Equal(t, b.ID(), info.SessionID)
}

// A leader change during a delay restarts it in full: the new leader
// cannot know how much of it ran, so the lock stays delayed for the whole
// delay after the new leader took office, never less.
func TestLockDelayRestartsOnLeaderChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const ttl, delay = time.Second, 4 * time.Second
	h := frozenHolderWithLockDelay(t, c, ctx, ttl, delay, WithTTL(20*time.Second))
	old, la, res := h.leader, h.held, h.res
	waitUntil(t, ctx, "the lock is delayed", func() bool { return inspect(t, ctx, c.node(h.f2), "job").Delayed })
	// Let a good part of the delay run on the old leader's timer first.
	time.Sleep(delay / 2)
	stoppedLeader := time.Now()
	c.crash(old)
	r := <-res
	require.NoError(t, r.err)
	require.GreaterOrEqual(t, time.Since(stoppedLeader), delay,
		"the new leader ended the delay before a full delay of its own")
	require.Greater(t, r.l.Token(), la.Token())
}
