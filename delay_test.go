package fencelock

import (
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
