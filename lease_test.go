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
	"github.com/fencelock/fencelock/internal/testhook"
)

// at is the boot-clock instant d after an arbitrary origin.
func at(d time.Duration) clock.Instant { return clock.Instant{}.Add(d) }

// leaseRun is what simulateLease saw.
type leaseRun struct {
	gaveUp      time.Duration // when the holder's deadline passed; 0 if it never did
	maxInFlight int
	acked       int
}

// simulateLease drives the session's own schedule (renewals) and deadline
// (lease) through virtual time, as the renewer does, from an
// open sent at 0 until horizon or until the holder's deadline passes. The
// i-th keep-alive (from 1) is answered OK latency(i) after it was sent.
func simulateLease(ttl, margin time.Duration, latency func(i int) time.Duration, horizon time.Duration) leaseRun {
	l := lease{life: ttl - margin, deadline: at(ttl - margin)}
	r := renewals{period: ttl / 3, retry: ttl / 20, next: at(ttl / 3)}
	type keepAlive struct{ sent, answer clock.Instant }
	var inFlight []keepAlive
	var run leaseRun
	for now, sent := at(0), 0; now.Before(at(horizon)); {
		next, first := now.Add(r.wait(now)), -1 // the next send, or the first answer before it
		for i, k := range inFlight {
			if !k.answer.After(next) {
				next, first = k.answer, i
			}
		}
		if !l.live(next) { // nothing renews it before the deadline
			run.gaveUp = l.deadline.Sub(at(0))
			return run
		}
		now = next
		switch {
		case first >= 0:
			l.extend(inFlight[first].sent)
			r.answered(true, now)
			inFlight = append(inFlight[:first], inFlight[first+1:]...)
			run.acked++
		case r.send(now):
			sent++
			inFlight = append(inFlight, keepAlive{now, now.Add(latency(sent))})
			run.maxInFlight = max(run.maxInFlight, len(inFlight))
		}
	}
	return run
}

func constant(d time.Duration) func(int) time.Duration { return func(int) time.Duration { return d } }

// Keep-alives do not wait for one another: with TTL 2s and the default
// margin (400ms) each one may take up to TTL − margin − TTL/3 ≈ 933ms to be
// acknowledged and the session lives on, several in flight when commits take
// longer than the period. Beyond that it gives up at the deadline the last
// acknowledged one earned (the open's, if none was).
func TestLeaseSurvivesCommitsUpToTTLMinusMarginMinusPeriod(t *testing.T) {
	const ttl, margin = 2 * time.Second, 400 * time.Millisecond
	const period, hour = ttl / 3, time.Hour

	ok := simulateLease(ttl, margin, constant(600*time.Millisecond), hour)
	require.Zero(t, ok.gaveUp, "600ms commits: the session lives")
	require.Equal(t, 1, ok.maxInFlight)
	require.Greater(t, ok.acked, 5000)

	overlap := simulateLease(ttl, margin, constant(900*time.Millisecond), hour)
	require.Zero(t, overlap.gaveUp, "900ms commits, longer than the 667ms period: still alive")
	require.Equal(t, 2, overlap.maxInFlight, "the next keep-alive went out before the previous was answered")

	slow := simulateLease(ttl, margin, constant(950*time.Millisecond), hour)
	require.Equal(t, ttl-margin, slow.gaveUp, "the first answer comes after the open's deadline")
	require.Zero(t, slow.acked)

	// Three fast keep-alives, then none answered in time: the third, sent
	// at 3 periods, earned the last deadline.
	stalls := simulateLease(ttl, margin, func(i int) time.Duration {
		if i <= 3 {
			return 10 * time.Millisecond
		}
		return time.Hour
	}, hour)
	require.Equal(t, 3*period+ttl-margin, stalls.gaveUp)
	require.Equal(t, 3, stalls.acked)
	require.Equal(t, 2, stalls.maxInFlight, "the fourth and fifth went out unanswered before the deadline")

	// An old, slow answer arriving after a newer, fast one moves nothing back.
	reordered := simulateLease(ttl, margin, func(i int) time.Duration {
		if i == 1 {
			return 900 * time.Millisecond
		}
		if i == 2 {
			return 10 * time.Millisecond
		}
		return time.Hour
	}, hour)
	require.Equal(t, 2*period+ttl-margin, reordered.gaveUp)
	require.Equal(t, 2, reordered.acked)
}

// The tolerance is TTL − margin − TTL/3 for every TTL and margin the session
// accepts: a little less latency keeps the session, a little more ends it.
func TestLeaseToleranceBoundary(t *testing.T) {
	for _, c := range []struct{ ttl, margin time.Duration }{
		{2 * time.Second, 400 * time.Millisecond},  // default margin
		{3 * time.Second, 1500 * time.Millisecond}, // the largest margin accepted
		{10 * time.Second, 10 * time.Millisecond},
		{100 * time.Millisecond, 20 * time.Millisecond},
	} {
		t.Run(fmt.Sprint(c.ttl, "/", c.margin), func(t *testing.T) {
			tolerance := c.ttl - c.margin - c.ttl/3
			require.Positive(t, tolerance)
			eps := tolerance / 100
			below := simulateLease(c.ttl, c.margin, constant(tolerance-eps), 100*c.ttl)
			require.Zero(t, below.gaveUp, "latency %v, just below %v", tolerance-eps, tolerance)
			above := simulateLease(c.ttl, c.margin, constant(tolerance+eps), 100*c.ttl)
			require.NotZero(t, above.gaveUp, "latency %v, just above %v", tolerance+eps, tolerance)
		})
	}
}

// At most maxKeepAlivesInFlight keep-alives are in flight: a due one waits
// until one is answered, and then goes out at once. A failed one brings the
// next forward to within retry.
func TestRenewalsBoundInFlightAndRetrySooner(t *testing.T) {
	r := renewals{period: time.Second, retry: 100 * time.Millisecond, next: at(time.Second)}
	require.False(t, r.send(at(999*time.Millisecond)), "not due yet")
	require.Equal(t, time.Millisecond, r.wait(at(999*time.Millisecond)))
	for i := 1; i <= maxKeepAlivesInFlight; i++ {
		now := at(time.Duration(i) * time.Second)
		require.True(t, r.send(now), "keep-alive %d", i)
		require.False(t, r.send(now), "one per period")
	}
	full := at(time.Duration(maxKeepAlivesInFlight+1) * time.Second)
	require.False(t, r.send(full), "due, but %d are in flight", maxKeepAlivesInFlight)
	require.False(t, r.send(full.Add(time.Hour)))
	r.answered(true, full.Add(time.Hour))
	require.Zero(t, r.wait(full.Add(time.Hour)), "an answer frees a slot, and the overdue one goes now")
	require.True(t, r.send(full.Add(time.Hour)))

	now := full.Add(time.Hour + time.Millisecond)
	r.answered(false, now)
	require.Equal(t, 100*time.Millisecond, r.wait(now), "after a failure the next is due within retry")
	require.True(t, r.send(now.Add(100*time.Millisecond)))
	r.answered(false, now.Add(2*time.Hour))
	require.Zero(t, r.wait(now.Add(2*time.Hour)))
}

// The deadline only moves forwards: an answer to an older keep-alive,
// arriving after a newer one's, changes nothing.
func TestLeaseExtendsFromEachSendTime(t *testing.T) {
	l := lease{life: time.Second, deadline: at(time.Second)}
	l.extend(at(2 * time.Second))
	require.Equal(t, at(3*time.Second), l.deadline)
	l.extend(at(time.Second))
	require.Equal(t, at(3*time.Second), l.deadline, "an older send earns less")
	require.True(t, l.live(at(3*time.Second-1)))
	require.False(t, l.live(at(3*time.Second)))
}

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
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
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
	require.LessOrEqual(t, link.maxInFlight.Load(), int32(maxKeepAlivesInFlight))
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
		res <- granted{r, closed(holder.done), time.Since(opened)}
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

// WithSafetyMargin refuses margins the session cannot honour: above TTL/2 a
// keep-alive has under TTL/6 to commit (at 2TTL/3, none: TTL 3s and margin
// 2.1s gave itself up 0.9s after opening on a healthy group). At TTL/2 the
// session lives on a healthy group.
func TestSafetyMarginMustLeaveTimeToCommit(t *testing.T) {
	cl := newCluster(t, 1, nil)
	ctx := testCtx(t)
	n := cl.node(1)
	for _, m := range []time.Duration{2100 * time.Millisecond, 1500*time.Millisecond + 1, 3 * time.Second, -time.Second} {
		_, err := n.NewSession(ctx, WithTTL(3*time.Second), WithSafetyMargin(m))
		require.ErrorIs(t, err, ErrInvalidTTL, "margin %v", m)
	}
	_, err := n.NewSession(ctx, WithSafetyMargin(n.cfg.SessionTTL/2+1))
	require.ErrorIs(t, err, ErrInvalidTTL, "the bound applies to the default TTL too")

	const ttl = 2 * time.Second // keep-alives have TTL/6, 333ms, to commit
	s := newSession(t, ctx, n, WithTTL(ttl), WithSafetyMargin(ttl/2))
	watch := time.NewTimer(2 * ttl)
	defer watch.Stop()
	select {
	case <-s.Done():
		t.Fatalf("margin TTL/2: the session gave itself up on a healthy group: %v", s.Err())
	case <-watch.C: // two TTLs with nothing happening
	}
	require.NoError(t, s.Close(ctx))
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
			l, err := holder.Acquire(ctx, "suspend")
			require.NoError(t, err)
			res := acquireAsync(ctx, waiter, "suspend")
			waitWaiters(t, ctx, cl.node(leader), "suspend", 1)

			testhook.Pause(holder) // the machine sleeps: nothing of the holder runs
			testhook.Pause(unwatched)
			clocks[host].Suspend(2 * ttl)
			unwatched.mu.Lock()
			unwatched.timer.Stop() // a suspend delays the runtime's timers
			unwatched.mu.Unlock()
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
			case <-unwatched.done: // not Done(): that would look itself
			case <-watch.C:
				t.Fatal("the renewer did not notice the suspend")
			}
			require.ErrorIs(t, unwatched.Err(), ErrSessionExpired)
		})
	}
}
