package client

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

func TestAcquireReleaseTryAcquire(t *testing.T) {
	g, ctx := newGroup(t)
	c := newClient(t, g.urls[1], g.urls[2], g.urls[3])
	a := newSession(t, ctx, c, 3*time.Second, fencelock.WithSessionName("a@test"))
	b := newSession(t, ctx, c, 3*time.Second)
	require.NotEqual(t, a.ID(), b.ID())

	l, err := a.Acquire(ctx, "jobs/a")
	require.NoError(t, err)
	require.Equal(t, "jobs/a", l.Name())
	require.NotZero(t, l.Token())
	require.Equal(t, l.Token(), l.Fence().Token)
	require.NotZero(t, l.Fence().Group)
	require.NoError(t, l.Err())

	_, err = b.TryAcquire(ctx, "jobs/a")
	require.ErrorIs(t, err, fencelock.ErrLocked)
	_, err = a.TryAcquire(ctx, "jobs/a") // the session holds it: one grant per session and name
	require.ErrorIs(t, err, fencelock.ErrLocked)

	requireHeldBy(t, ctx, c, "jobs/a", l, a, "a@test")

	lctx := l.Context(ctx)
	require.NoError(t, l.Release(ctx))
	<-l.Done()
	require.ErrorIs(t, l.Err(), fencelock.ErrNotHeld)
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), fencelock.ErrNotHeld)
	require.ErrorIs(t, l.Release(ctx), fencelock.ErrNotHeld)

	l2, err := b.TryAcquire(ctx, "jobs/a")
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())

	// A stale release at the group is ErrNotHeld and changes nothing.
	stale := &Lock{newGrant(b, "jobs/a", l.Token(), l.Fence(), false, "", func() {})}
	require.True(t, b.add(stale.g))
	require.ErrorIs(t, stale.Release(ctx), fencelock.ErrNotHeld)
	info, err := c.Inspect(ctx, "jobs/a")
	require.NoError(t, err)
	require.Equal(t, l2.Token(), info.Token)

	require.NoError(t, b.Close(ctx))
	<-l2.Done()
	require.ErrorIs(t, l2.Err(), fencelock.ErrSessionClosed)
	require.ErrorIs(t, b.Err(), fencelock.ErrSessionClosed)
	require.NoError(t, b.Close(ctx)) // over: nil
	_, err = b.Acquire(ctx, "jobs/b")
	require.ErrorIs(t, err, fencelock.ErrSessionClosed)
	info, err = c.Inspect(ctx, "jobs/a")
	require.NoError(t, err)
	require.False(t, info.Held)
}

func TestAcquireWaitsInQueue(t *testing.T) {
	g, ctx := newGroup(t)
	c := newClient(t, g.urls[2], g.urls[3], g.urls[1])
	a := newSession(t, ctx, c, 3*time.Second)
	b := newSession(t, ctx, c, 3*time.Second)
	l, err := a.Acquire(ctx, "q")
	require.NoError(t, err)

	positions, got := acquireQueued(ctx, b, "q")
	require.Equal(t, 1, <-positions)
	info, err := c.Inspect(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, []uint64{b.ID()}, info.Queue)

	// A second Acquire of the same name by the same session waits behind
	// the first rather than sharing its grant.
	second := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := b.Acquire(sctx, "q")
		second <- err
	}()
	require.ErrorIs(t, <-second, context.DeadlineExceeded)

	l2 := grantedAfter(t, ctx, l, got)

	// A cancelled waiter leaves the queue.
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	_, err = a.Acquire(wctx, "q")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	info, err = c.Inspect(ctx, "q")
	require.NoError(t, err)
	require.Empty(t, info.Queue)
	require.Equal(t, l2.Token(), info.Token)
	require.NoError(t, l2.Release(ctx))
}

func TestCampaignProclaimResignObserve(t *testing.T) {
	g, ctx := newGroup(t)
	c := newClient(t, g.urls[1], g.urls[2], g.urls[3])
	a := newSession(t, ctx, c, 3*time.Second)
	b := newSession(t, ctx, c, 3*time.Second)

	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := c.Observe(octx, "orders/primary")
	first := <-obs
	require.NoError(t, first.Err)
	require.Zero(t, first.Token)

	lead, err := a.Campaign(ctx, "orders/primary", "10.0.0.1:80")
	require.NoError(t, err)
	require.Equal(t, "orders/primary", lead.Election())
	require.Equal(t, "10.0.0.1:80", lead.Value())
	require.NotZero(t, lead.Token())
	require.Equal(t, lead.Token(), lead.Fence().Token)
	waitLeader(t, obs, func(li fencelock.LeaderInfo) bool { return li.Token == lead.Token() && li.Value == "10.0.0.1:80" })

	_, err = b.TryCampaign(ctx, "orders/primary", "x")
	require.ErrorIs(t, err, fencelock.ErrElectionTaken)

	require.NoError(t, lead.Proclaim(ctx, "10.0.0.1:81"))
	require.Equal(t, "10.0.0.1:81", lead.Value())
	waitLeader(t, obs, func(li fencelock.LeaderInfo) bool { return li.Value == "10.0.0.1:81" })
	li, err := c.Leader(ctx, "orders/primary")
	require.NoError(t, err)
	require.Equal(t, a.ID(), li.SessionID)

	next := make(chan *Leadership, 1)
	go func() {
		l, err := b.Campaign(ctx, "orders/primary", "10.0.0.2:80")
		if err != nil {
			t.Error(err)
		}
		next <- l
	}()
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, lead.Resign(ctx))
	<-lead.Done()
	require.ErrorIs(t, lead.Err(), fencelock.ErrNotLeader)
	require.ErrorIs(t, lead.Resign(ctx), fencelock.ErrNotLeader)
	require.ErrorIs(t, lead.Proclaim(ctx, "late"), fencelock.ErrNotLeader)
	l2 := <-next
	require.NotNil(t, l2)
	require.Greater(t, l2.Token(), lead.Token())
	waitLeader(t, obs, func(li fencelock.LeaderInfo) bool { return li.Token == l2.Token() && li.Value == "10.0.0.2:80" })
	require.NoError(t, l2.Resign(ctx))
	_, err = c.Leader(ctx, "orders/primary")
	require.ErrorIs(t, err, fencelock.ErrNoLeader)
	stop()
	for range obs { // closed once ctx ends
	}
}

func waitLeader(t *testing.T, obs <-chan fencelock.LeaderInfo, ok func(fencelock.LeaderInfo) bool) {
	t.Helper()
	waitEvent(t, obs, func(li fencelock.LeaderInfo) error { return li.Err }, ok, "observe closed", "no such leader observed")
}

func TestErrorsAreRootSentinels(t *testing.T) {
	g, ctx := newGroup(t)
	c := newClient(t, g.urls[1])
	s := newSession(t, ctx, c, 2*time.Second)

	_, err := s.Acquire(ctx, "")
	require.ErrorIs(t, err, fencelock.ErrInvalidName)
	_, err = s.Acquire(ctx, strings.Repeat("a", fencelock.MaxNameLen+1))
	require.ErrorIs(t, err, fencelock.ErrInvalidName)
	require.ErrorContains(t, err, "513 bytes, at most 512", "a name's error gives its length and the limit")
	_, err = c.Inspect(ctx, "a\x00b")
	require.ErrorContains(t, err, "contains NUL")
	_, err = s.Acquire(ctx, "x@nogroup") // refused by the replica
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "unknown_group", e.Code)
	require.Contains(t, err.Error(), "nogroup") // the server's message is kept
	_, err = c.Inspect(ctx, "y@nogroup")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
	_, err = s.Campaign(ctx, "e", string(make([]byte, 5000)))
	require.ErrorIs(t, err, fencelock.ErrValueTooLarge)
	_, err = s.AcquireSemaphore(ctx, "x", 0)
	require.ErrorIs(t, err, fencelock.ErrInvalidPermits)
	_, err = s.Acquire(ctx, "x", fencelock.WithMaxHold(time.Millisecond))
	require.ErrorIs(t, err, fencelock.ErrInvalidMaxHold)
	_, err = s.Campaign(ctx, "e", "v", fencelock.WithMaxHold(time.Minute))
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = c.NewSession(ctx, fencelock.WithTTL(time.Millisecond))
	require.ErrorIs(t, err, fencelock.ErrInvalidTTL)
	_, err = c.NewSession(ctx, fencelock.WithSessionName("a\x00b"))
	require.ErrorIs(t, err, fencelock.ErrInvalidSessionName)
	_, err = c.NewSession(ctx, fencelock.WithLockDelay(time.Second))
	require.ErrorIs(t, err, errors.ErrUnsupported)
	_, err = New(ctx, Config{Endpoints: []string{"ftp://x"}})
	require.ErrorIs(t, err, ErrBadEndpoint)

	// The group ends the session (an operator): the next heartbeat's 404
	// ends it for the holder before its lease, ErrSessionExpired.
	l, err := s.Acquire(ctx, "held")
	require.NoError(t, err)
	require.NoError(t, g.Node(1).EndSession(ctx, s.ID()))
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session not ended after the group ended it")
	}
	require.ErrorIs(t, s.Err(), fencelock.ErrSessionExpired)
	<-l.Done()
	require.ErrorIs(t, l.Err(), fencelock.ErrSessionExpired)
}

// Every code of httpapi/errors.go maps to a sentinel.
func TestCodeSentinels(t *testing.T) {
	for code, want := range map[string]error{
		"bad_request": ErrBadRequest, "invalid_name": fencelock.ErrInvalidName, "invalid_ttl": fencelock.ErrInvalidTTL,
		"value_too_large": fencelock.ErrValueTooLarge, "unknown_group": fencelock.ErrUnknownGroup,
		"unauthorized": ErrUnauthorized, "forbidden": ErrForbidden, "not_found": ErrNotFound,
		"method_not_allowed": ErrServer, "request_timeout": ErrServer, "stale_token": fencelock.ErrNotHeld,
		"not_leader": fencelock.ErrNotLeader, "locked": fencelock.ErrLocked, "id_removed": fencelock.ErrIDRemoved,
		"membership": fencelock.ErrMembership, "too_large": ErrServer, "session_elsewhere": fencelock.ErrUnavailable,
		"limit_exceeded": fencelock.ErrLimitExceeded, "too_many_streams": ErrTooManyStreams,
		"unavailable": fencelock.ErrUnavailable, "replica_removed": fencelock.ErrUnavailable,
		"no_quorum": fencelock.ErrNoQuorum, "internal": ErrServer,
		"invalid_permits": fencelock.ErrInvalidPermits, "permit_conflict": fencelock.ErrPermitConflict,
		"max_hold_exceeded": fencelock.ErrMaxHoldExceeded,
	} {
		e := decodeError(400, []byte(`{"error":"the server's words","code":"`+code+`"}`), false, "x")
		require.ErrorIs(t, e, want, code)
		require.Contains(t, e.Error(), "the server's words")
	}
	e := decodeError(404, []byte(`{"error":"session not found","code":"not_found"}`), true, "x")
	require.ErrorIs(t, e, fencelock.ErrSessionExpired)
	e = decodeError(503, []byte(`{"error":"x","code":"no_quorum"}`), false, "x")
	require.ErrorIs(t, e, fencelock.ErrUnavailable)
	e = decodeError(429, []byte(`{"error":"`+fencelock.ErrTooManyWaiters.Error()+`: 100","code":"limit_exceeded"}`), false, "x")
	require.ErrorIs(t, e, fencelock.ErrTooManyWaiters)
	e = decodeError(502, []byte("<html>bad gateway</html>"), false, "x")
	require.ErrorIs(t, e, fencelock.ErrUnavailable)
	require.Equal(t, "http", e.Code)
}

func TestSharedAndSemaphore(t *testing.T) {
	g, ctx := newGroup(t)
	c1, c2 := newClient(t, g.urls[1]), newClient(t, g.urls[2])
	s1 := newSession(t, ctx, c1, 5*time.Second)
	s2 := newSession(t, ctx, c2, 5*time.Second)
	s3 := newSession(t, ctx, c1, 5*time.Second)

	// Two sessions' shared acquires, concurrently: both granted at once.
	var wg sync.WaitGroup
	locks := make([]*Lock, 2)
	errs := make([]error, 2)
	for i, s := range []*Session{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			locks[i], errs[i] = s.AcquireShared(ctx, "rw")
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NotEqual(t, locks[0].Token(), locks[1].Token())
	require.Nil(t, locks[0].Err())
	require.Nil(t, locks[1].Err())
	_, err := s3.TryAcquire(ctx, "rw")
	require.ErrorIs(t, err, fencelock.ErrLocked)
	_, err = s3.AcquireSemaphore(ctx, "rw", 2)
	require.ErrorIs(t, err, fencelock.ErrPermitConflict)
	require.NoError(t, locks[0].Release(ctx))
	require.NoError(t, locks[1].Release(ctx))

	// A semaphore of 2: two permits, a third try is refused.
	p1, err := s1.AcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	p2, err := s2.AcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	_, err = s3.TryAcquireSemaphore(ctx, "pool", 2)
	require.ErrorIs(t, err, fencelock.ErrLocked)
	_, err = s3.AcquireSemaphore(ctx, "pool", 3)
	require.ErrorIs(t, err, fencelock.ErrPermitConflict)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "permit_conflict", e.Code)
	_, err = s3.Acquire(ctx, "pool")
	require.ErrorIs(t, err, fencelock.ErrPermitConflict)
	require.NoError(t, p1.Release(ctx))
	p3, err := s3.AcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	require.NoError(t, p2.Release(ctx))
	require.NoError(t, p3.Release(ctx))

	// WithMaxHold: the holder stops first, and the next in line is granted.
	l, err := s1.Acquire(ctx, "bounded", fencelock.WithMaxHold(2*time.Second))
	require.NoError(t, err)
	start := time.Now()
	next, err := s2.Acquire(ctx, "bounded")
	require.NoError(t, err)
	select {
	case <-l.Done():
	default:
		t.Fatal("the next holder was granted before the bounded one stopped")
	}
	require.ErrorIs(t, l.Err(), fencelock.ErrMaxHoldExceeded)
	require.Greater(t, time.Since(start), time.Second)
	require.Nil(t, s1.Err())
	require.NoError(t, next.Release(ctx))
}
