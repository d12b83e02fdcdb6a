package fencelock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/testhook"
)

// A holder cut off from the group (frozen) with a lock-delay: the group
// expires its session and frees the lock into a delayed state, shown by
// Inspect, and the waiter is granted it only when the leader's timer ends
// the delay, at least the delay after the holder stopped by its own clock.
func TestLockDelayAfterExpiry(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := c.leader(ctx)
	f1 := leader%3 + 1
	f2 := f1%3 + 1
	const ttl, delay = time.Second, 2 * time.Second
	a := newSession(t, ctx, c.node(f1), WithTTL(ttl), WithLockDelay(delay))
	b := newSession(t, ctx, c.node(f2))
	la, err := a.Acquire(ctx, "job")
	require.NoError(t, err)
	res := acquireAsync(ctx, b, "job")
	waitWaiters(t, ctx, c.node(f2), "job", 1)

	testhook.Freeze(a)
	defer testhook.Thaw(a)
	<-la.Done()
	stopped := time.Now()
	require.ErrorIs(t, la.Err(), ErrSessionExpired)
	waitUntil(t, ctx, "the expired holder's lock is delayed", func() bool {
		info := inspect(t, ctx, c.node(f2), "job")
		return info.Delayed && !info.Held && info.Waiters == 1
	})
	_, err = newSession(t, ctx, c.node(leader)).TryAcquire(ctx, "job")
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

// A release, a Close, or a holder giving its session up delays nothing,
// however long the lock-delay; an operator's EndSession does.
func TestLockDelayNotAfterReleaseOrClose(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	waiter := newSession(t, ctx, c.node(2))
	prompt := func(what string, end func(*Session, *Lock)) {
		t.Helper()
		s := newSession(t, ctx, c.node(1), WithLockDelay(MaxLockDelay))
		l, err := s.Acquire(ctx, "x")
		require.NoError(t, err)
		res := acquireAsync(ctx, waiter, "x")
		waitWaiters(t, ctx, c.node(2), "x", 1)
		end(s, l)
		short, cancel := context.WithTimeout(ctx, 20*time.Second) // far below the delay
		defer cancel()
		select {
		case r := <-res:
			require.NoError(t, r.err, what)
			require.Greater(t, r.l.Token(), l.Token())
			require.NoError(t, r.l.Release(ctx))
		case <-short.Done():
			t.Fatalf("%s: the lock was delayed", what)
		}
		require.False(t, inspect(t, ctx, c.node(3), "x").Delayed, what)
		_ = s.Close(ctx)
	}
	prompt("release", func(_ *Session, l *Lock) { require.NoError(t, l.Release(ctx)) })
	prompt("close", func(s *Session, _ *Lock) { require.NoError(t, s.Close(ctx)) })

	s := newSession(t, ctx, c.node(1), WithLockDelay(MaxLockDelay))
	l, err := s.Acquire(ctx, "y")
	require.NoError(t, err)
	require.NoError(t, c.node(3).EndSession(ctx, s.ID()))
	<-l.Done()
	require.ErrorIs(t, l.Err(), ErrRevoked)
	require.True(t, inspect(t, ctx, c.node(3), "y").Delayed, "an operator's end delays the lock")

	_, err = c.node(1).NewSession(ctx, WithLockDelay(MaxLockDelay+1))
	require.ErrorIs(t, err, ErrInvalidLockDelay)
	_, err = c.node(1).NewSession(ctx, WithLockDelay(-time.Second))
	require.ErrorIs(t, err, ErrInvalidLockDelay)
}

// A leader change during a delay restarts it in full: the new leader
// cannot know how much of it ran, so the lock stays delayed for the whole
// delay after the new leader took office, never less.
func TestLockDelayRestartsOnLeaderChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	old := c.leader(ctx)
	f1 := old%3 + 1
	f2 := f1%3 + 1
	const ttl, delay = time.Second, 4 * time.Second
	a := newSession(t, ctx, c.node(f1), WithTTL(ttl), WithLockDelay(delay))
	b := newSession(t, ctx, c.node(f2), WithTTL(20*time.Second))
	la, err := a.Acquire(ctx, "job")
	require.NoError(t, err)
	res := acquireAsync(ctx, b, "job")
	waitWaiters(t, ctx, c.node(f2), "job", 1)

	testhook.Freeze(a)
	defer testhook.Thaw(a)
	<-la.Done()
	waitUntil(t, ctx, "the lock is delayed", func() bool { return inspect(t, ctx, c.node(f2), "job").Delayed })
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

// WithMaxHold: the holder's Done closes at the maximum hold less the
// margin by its own clock, before the group frees the grant; the waiter
// gets the lock only after that, with a larger token, while the holder's
// session lives on.
func TestMaxHoldClosesDoneFirst(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const ttl, hold = 2 * time.Second, 1500 * time.Millisecond // margin 400ms
	a := newSession(t, ctx, c.node(1), WithTTL(ttl))
	b := newSession(t, ctx, c.node(2))
	sent := time.Now()
	la, err := a.Acquire(ctx, "job", WithMaxHold(hold))
	require.NoError(t, err)
	done := la.Done()
	require.False(t, closed(done))
	info := inspect(t, ctx, c.node(3), "job")
	require.Equal(t, hold, info.Holders[0].MaxHold)
	res := acquireAsync(ctx, b, "job")
	doneAt := make(chan time.Time, 1)
	go func() {
		<-done // closed by the holder's timer: nobody polls it
		doneAt <- time.Now()
	}()

	r := <-res
	granted := time.Now()
	require.NoError(t, r.err)
	select {
	case at := <-doneAt:
		require.True(t, at.Before(granted))
		require.Less(t, at.Sub(sent), hold, "the holder stops before the maximum hold")
	default:
		t.Fatal("the waiter was granted before the holder's Done closed")
	}
	require.GreaterOrEqual(t, granted.Sub(sent), hold, "the group freed the grant before its maximum hold")
	require.ErrorIs(t, la.Err(), ErrMaxHoldExceeded)
	require.NoError(t, a.Err(), "the session lives on")
	require.Greater(t, r.l.Token(), la.Token())
	require.ErrorIs(t, la.Release(ctx), ErrNotHeld)
	require.Equal(t, b.ID(), inspect(t, ctx, c.node(1), "job").SessionID)

	// A term of leadership too.
	lead, err := a.Campaign(ctx, "e", "a", WithMaxHold(hold))
	require.NoError(t, err)
	next := make(chan error, 1)
	go func() {
		l, err := b.Campaign(ctx, "e", "b")
		if err == nil && l.Token() <= lead.Token() {
			t.Error("the next term's token is not larger")
		}
		next <- err
	}()
	<-lead.Done()
	require.ErrorIs(t, lead.Err(), ErrMaxHoldExceeded)
	require.NoError(t, <-next)

	for _, d := range []time.Duration{time.Millisecond, 2*a.SafetyMargin() - 1, MaxHoldLimit + 1, -time.Second} {
		_, err = a.TryAcquire(ctx, "bad", WithMaxHold(d))
		require.ErrorIs(t, err, ErrInvalidMaxHold, "%v", d)
	}
}
