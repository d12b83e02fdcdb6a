package client

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// What a holder that stops a grace before the deadline needs (fencelock
// lock): the lease and the time left, a heartbeat period of its own, and a
// report of every heartbeat, failing ones included.
func TestLeaseLeftPeriodAndHeartbeatReport(t *testing.T) {
	g, ctx := newGroup(t)
	f := newFront(t, g.API(1))
	c := newClient(t, f.url)
	s := newSession(t, ctx, c, 3*time.Second)
	lease := s.Lease()
	require.Greater(t, lease, time.Duration(0))
	require.LessOrEqual(t, lease, s.TTL())
	left := s.LeaseLeft()
	require.Greater(t, left, time.Duration(0))
	require.LessOrEqual(t, left, lease)

	require.ErrorIs(t, s.SetHeartbeatPeriod(0), fencelock.ErrInvalidConfig)
	require.ErrorIs(t, s.SetHeartbeatPeriod(MinHeartbeatPeriod-1), fencelock.ErrInvalidConfig)
	require.ErrorIs(t, s.SetHeartbeatPeriod(lease/2+1), fencelock.ErrInvalidConfig)

	var mu sync.Mutex
	var reports []error
	var maxLeft time.Duration
	s.OnHeartbeat(func(err error, left time.Duration) {
		mu.Lock()
		reports = append(reports, err)
		maxLeft = max(maxLeft, left)
		mu.Unlock()
	})
	count := func() (ok, failed int) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range reports {
			if e == nil {
				ok++
			} else {
				failed++
			}
		}
		return
	}
	// The default period is a third of the lease: a 50ms one beats many
	// times in the same while.
	require.NoError(t, s.SetHeartbeatPeriod(50*time.Millisecond))
	before := f.calls.Load()
	time.Sleep(600 * time.Millisecond)
	require.GreaterOrEqual(t, f.calls.Load()-before, int64(5), "heartbeats at the new period")
	ok, failed := count()
	require.GreaterOrEqual(t, ok, 5)
	require.Zero(t, failed)

	// Unanswered heartbeats are reported, and the time left runs down.
	f.mode.Store("503")
	require.Eventually(t, func() bool { _, failed := count(); return failed >= 2 }, 5*time.Second, 10*time.Millisecond)
	require.Less(t, s.LeaseLeft(), lease)
	require.NoError(t, s.Err(), "the lease is not over yet")
	f.mode.Store("ok")
	n, _ := count()
	require.Eventually(t, func() bool { ok, _ := count(); return ok > n }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, s.Err())
	mu.Lock()
	require.LessOrEqual(t, maxLeft, lease, "the time left never exceeds the lease")
	mu.Unlock()
	require.NoError(t, s.Close(ctx))
	require.LessOrEqual(t, s.LeaseLeft(), lease)
}

// Watch reports a lock's state, its grant and its end, and reopens on
// another endpoint when its replica stops.
func TestWatch(t *testing.T) {
	g, ctx := newGroup(t)
	c := newClient(t, g.urls[1], g.urls[2], g.urls[3])
	s := newSession(t, ctx, c, 3*time.Second)

	bad := <-c.Watch(ctx, "")
	require.ErrorIs(t, bad.Err, fencelock.ErrInvalidName)

	w := c.Watch(ctx, "jobs/w")
	next := func(want func(fencelock.LockInfo) bool) fencelock.LockInfo {
		t.Helper()
		return waitEvent(t, w, func(li fencelock.LockInfo) error { return li.Err }, want, "the watch ended", "no such event within 20s")
	}
	first := next(func(fencelock.LockInfo) bool { return true })
	require.False(t, first.Held)
	require.Equal(t, "jobs/w", first.Name)

	l, err := s.Acquire(ctx, "jobs/w")
	require.NoError(t, err)
	held := next(func(li fencelock.LockInfo) bool { return li.Held })
	require.Equal(t, l.Token(), held.Token)
	require.Equal(t, s.ID(), held.SessionID)

	// The replica serving the stream stops: it reopens on another and
	// begins with the current state.
	g.Stop(1)
	require.NoError(t, l.Release(ctx))
	next(func(li fencelock.LockInfo) bool { return !li.Held })
	require.NoError(t, s.Close(ctx))
}
