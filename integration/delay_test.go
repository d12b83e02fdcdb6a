package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// A release, a Close, or a holder giving its session up delays nothing,
// however long the lock-delay; an operator's EndSession does.
func TestLockDelayNotAfterReleaseOrClose(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	waiter := newSession(t, ctx, c.Node(2))
	prompt := func(what string, end func(*fencelock.Session, *fencelock.Lock)) {
		t.Helper()
		s := newSession(t, ctx, c.Node(1), fencelock.WithLockDelay(fencelock.MaxLockDelay))
		l, err := s.Acquire(ctx, "x")
		require.NoError(t, err)
		res := acquireAsync(ctx, waiter, "x")
		waitWaiters(t, ctx, c.Node(2), "x", 1)
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
		require.False(t, inspect(t, ctx, c.Node(3), "x").Delayed, what)
		_ = s.Close(ctx)
	}
	prompt("release", func(_ *fencelock.Session, l *fencelock.Lock) { require.NoError(t, l.Release(ctx)) })
	prompt("close", func(s *fencelock.Session, _ *fencelock.Lock) { require.NoError(t, s.Close(ctx)) })

	s := newSession(t, ctx, c.Node(1), fencelock.WithLockDelay(fencelock.MaxLockDelay))
	l, err := s.Acquire(ctx, "y")
	require.NoError(t, err)
	require.NoError(t, c.Node(3).EndSession(ctx, s.ID()))
	<-l.Done()
	require.ErrorIs(t, l.Err(), fencelock.ErrRevoked)
	require.True(t, inspect(t, ctx, c.Node(3), "y").Delayed, "an operator's end delays the lock")

	_, err = c.Node(1).NewSession(ctx, fencelock.WithLockDelay(fencelock.MaxLockDelay+1))
	require.ErrorIs(t, err, fencelock.ErrInvalidLockDelay)
	_, err = c.Node(1).NewSession(ctx, fencelock.WithLockDelay(-time.Second))
	require.ErrorIs(t, err, fencelock.ErrInvalidLockDelay)
}

// WithMaxHold: the holder's Done closes at the maximum hold less the
// margin by its own clock, before the group frees the grant; the waiter
// gets the lock only after that, with a larger token, while the holder's
// session lives on.
func TestMaxHoldClosesDoneFirst(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	const ttl, hold = 2 * time.Second, 1500 * time.Millisecond // margin 400ms
	a := newSession(t, ctx, c.Node(1), fencelock.WithTTL(ttl))
	b := newSession(t, ctx, c.Node(2))
	sent := time.Now()
	la, err := a.Acquire(ctx, "job", fencelock.WithMaxHold(hold))
	require.NoError(t, err)
	done := la.Done()
	require.False(t, closed(done))
	info := inspect(t, ctx, c.Node(3), "job")
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
	require.ErrorIs(t, la.Err(), fencelock.ErrMaxHoldExceeded)
	require.NoError(t, a.Err(), "the session lives on")
	require.Greater(t, r.l.Token(), la.Token())
	require.ErrorIs(t, la.Release(ctx), fencelock.ErrNotHeld)
	require.Equal(t, b.ID(), inspect(t, ctx, c.Node(1), "job").SessionID)

	// A term of leadership too.
	lead, err := a.Campaign(ctx, "e", "a", fencelock.WithMaxHold(hold))
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
	require.ErrorIs(t, lead.Err(), fencelock.ErrMaxHoldExceeded)
	require.NoError(t, <-next)

	for _, d := range []time.Duration{time.Millisecond, 2*a.SafetyMargin() - 1, fencelock.MaxHoldLimit + 1, -time.Second} {
		_, err = a.TryAcquire(ctx, "bad", fencelock.WithMaxHold(d))
		require.ErrorIs(t, err, fencelock.ErrInvalidMaxHold, "%v", d)
	}
}
