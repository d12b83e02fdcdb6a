package integration_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// WithSafetyMargin refuses margins the session cannot honour: above TTL/2 a
// keep-alive has under TTL/6 to commit (at 2TTL/3, none: TTL 3s and margin
// 2.1s gave itself up 0.9s after opening on a healthy group). At TTL/2 the
// session lives on a healthy group.
func TestSafetyMarginMustLeaveTimeToCommit(t *testing.T) {
	cl, ctx := newCluster(t, 1)
	n := cl.Node(1)
	for _, m := range []time.Duration{2100 * time.Millisecond, 1500*time.Millisecond + 1, 3 * time.Second, -time.Second} {
		_, err := n.NewSession(ctx, fencelock.WithTTL(3*time.Second), fencelock.WithSafetyMargin(m))
		require.ErrorIs(t, err, fencelock.ErrInvalidTTL, "margin %v", m)
	}
	_, err := n.NewSession(ctx, fencelock.WithSafetyMargin(fencelock.DefaultSessionTTL/2+1))
	require.ErrorIs(t, err, fencelock.ErrInvalidTTL, "the bound applies to the default TTL too")

	const ttl = 2 * time.Second // keep-alives have TTL/6, 333ms, to commit
	s := newSession(t, ctx, n, fencelock.WithTTL(ttl), fencelock.WithSafetyMargin(ttl/2))
	watch := time.NewTimer(2 * ttl)
	defer watch.Stop()
	select {
	case <-s.Done():
		t.Fatalf("margin TTL/2: the session gave itself up on a healthy group: %v", s.Err())
	case <-watch.C: // two TTLs with nothing happening
	}
	require.NoError(t, s.Close(ctx))
}

// A node renews all its sessions with a few batches per period: every
// session lives on, holding its lock, while the keep-alive commands number
// a small fraction of the renewals they carry.
func TestBatchedKeepAlivesRenewEverySession(t *testing.T) {
	c, ctx := newCluster(t, 3)
	leader := c.Leader(ctx)
	f := c.Node(leader%3 + 1)
	const ttl, sessions = time.Second, 40
	ss := make([]*fencelock.Session, sessions)
	locks := make([]*fencelock.Lock, sessions)
	for i := range ss {
		ss[i] = newSession(t, ctx, f, fencelock.WithTTL(ttl))
		l, err := ss[i].Acquire(ctx, fmt.Sprint("batched/", i))
		require.NoError(t, err)
		locks[i] = l
	}
	before, leaderBefore := f.Stats(), c.Node(leader).Stats()

	watch := time.NewTimer(4 * ttl) // four TTLs in which only keep-alives happen
	defer watch.Stop()
	select {
	case <-locks[0].Done():
		t.Fatalf("a holder lost its lock: %v", locks[0].Err())
	case <-watch.C:
	}
	after, leaderAfter := f.Stats(), c.Node(leader).Stats()
	for i, s := range ss {
		require.NoError(t, s.Err(), "session %d", i)
		info := inspect(t, ctx, c.Node(leader), locks[i].Name())
		require.Equal(t, s.ID(), info.SessionID)
		require.Equal(t, locks[i].Token(), info.Token)
	}
	require.Equal(t, leaderBefore.Expiries, leaderAfter.Expiries, "no session expired")
	renewals, commands := after.Renewals-before.Renewals, after.KeepAlives-before.KeepAlives
	// Each session renews every TTL/3: about 12 times each in four TTLs.
	require.GreaterOrEqual(t, renewals, uint64(sessions*6), "every session was renewed, period after period")
	require.LessOrEqual(t, commands*8, renewals, "keep-alives went in batches (%d commands for %d renewals)", commands, renewals)
	require.LessOrEqual(t, after.KeepAliveEntries-before.KeepAliveEntries, commands)
}

// A release, a Close, or a holder giving its session up delays nothing,
// however long the lock-delay; an operator's EndSession does.
func TestLockDelayNotAfterReleaseOrClose(t *testing.T) {
	c, ctx := newCluster(t, 3)
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
	c, ctx := newCluster(t, 3)
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
