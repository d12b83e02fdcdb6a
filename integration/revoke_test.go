package integration_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// Issue 26: a revoke is an end the holder did not choose, so a holder
// whose session has a lock-delay gets it, as after EndSession or an expiry:
// Inspect shows the lock Delayed, nobody is granted it (the waiter, a
// try-acquire) until the delay ran out, and the holder's session lives on.
// Before the fix the waiter was granted in the revoke's own step.
func TestRevokeAppliesLockDelay(t *testing.T) {
	c, ctx := newCluster(t, 3)
	const delay = 2 * time.Second
	holder := newSession(t, ctx, c.Node(1), fencelock.WithLockDelay(delay))
	l, err := holder.Acquire(ctx, "job")
	require.NoError(t, err)
	waiter := newSession(t, ctx, c.Node(2))
	res := acquireAsync(ctx, waiter, "job")
	waitWaiters(t, ctx, c.Node(3), "job", 1)

	// The delay runs from when the leader applied the revoke, which is
	// after this.
	start := time.Now()
	require.NoError(t, c.Node(3).RevokeGrant(ctx, "job", l.Token()))
	<-l.Done()
	require.ErrorIs(t, l.Err(), fencelock.ErrRevoked)
	info := inspect(t, ctx, c.Node(3), "job")
	require.True(t, info.Delayed, "the revoked lock is delayed: %+v", info)
	require.False(t, info.Held)
	require.Equal(t, 1, info.Waiters)
	_, err = newSession(t, ctx, c.Node(3)).TryAcquire(ctx, "job")
	require.ErrorIs(t, err, fencelock.ErrLocked, "nobody gets a delayed lock")

	r := <-res
	require.NoError(t, r.err)
	require.GreaterOrEqual(t, time.Since(start), delay, "granted before the delay ran out")
	require.Greater(t, r.l.Token(), l.Token())
	info = inspect(t, ctx, c.Node(1), "job")
	require.False(t, info.Delayed)
	require.Equal(t, waiter.ID(), info.SessionID)
	require.NoError(t, holder.Err(), "a revoke ends the grant, not the session")

	// Elections have no lock-delay: the next candidate leads at once.
	lead, err := holder.Campaign(ctx, "E", "a")
	require.NoError(t, err)
	require.NoError(t, c.Node(3).RevokeLeadership(ctx, "E"))
	<-lead.Done()
	next, err := waiter.TryCampaign(ctx, "E", "b")
	require.NoError(t, err)
	require.NoError(t, next.Resign(ctx))
}

// An operator's Revoke frees a held lock: the holder, on another replica,
// sees Done close with ErrRevoked; the waiter is granted with a larger token;
// a revocation naming the old token afterwards changes nothing.
func TestRevokeHandsTheLockOn(t *testing.T) {
	c, ctx := newCluster(t, 3)
	holder, l := holding(t, ctx, c.Node(1), "stuck")
	waiter := newSession(t, ctx, c.Node(2))
	granted := acquireAsync(ctx, waiter, "stuck")
	waitUntil(t, ctx, "the waiter is queued", func() bool { return inspect(t, ctx, c.Node(3), "stuck").Waiters == 1 })

	require.NoError(t, c.Node(3).RevokeGrant(ctx, "stuck", l.Token()))
	<-l.Done()
	require.ErrorIs(t, l.Err(), fencelock.ErrRevoked)
	next := (<-granted).l
	require.NotNil(t, next)
	require.Greater(t, next.Token(), l.Token())
	require.ErrorIs(t, c.Node(3).RevokeGrant(ctx, "stuck", l.Token()), fencelock.ErrNotHeld, "the old grant is gone")
	require.NoError(t, c.Node(3).Revoke(ctx, "stuck"), "Revoke frees whatever grant is current")
	<-next.Done()
	require.ErrorIs(t, next.Err(), fencelock.ErrRevoked)
	require.NoError(t, holder.Err(), "the holder's session lives on")
	require.ErrorIs(t, c.Node(3).Revoke(ctx, ""), fencelock.ErrInvalidName)
}

func TestRevokeLeadership(t *testing.T) {
	c, ctx := newCluster(t, 1)
	lead, err := newSession(t, ctx, c.Node(1)).Campaign(ctx, "primary", "a")
	require.NoError(t, err)
	require.NoError(t, c.Node(1).RevokeLeadership(ctx, "primary"))
	<-lead.Done()
	require.ErrorIs(t, lead.Err(), fencelock.ErrRevoked)
	require.ErrorIs(t, c.Node(1).RevokeLeadership(ctx, "primary"), fencelock.ErrNotLeader)
}

// EndSession ends someone else's session: its locks pass on and its
// holder's Done closes with ErrRevoked.
func TestEndSession(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s, l := holding(t, ctx, c.Node(1), "x")
	require.NoError(t, c.Node(2).EndSession(ctx, s.ID()))
	<-s.Done()
	require.ErrorIs(t, s.Err(), fencelock.ErrRevoked)
	<-l.Done()
	require.False(t, inspect(t, ctx, c.Node(2), "x").Held)
	require.ErrorIs(t, c.Node(2).EndSession(ctx, s.ID()), fencelock.ErrSessionExpired)
}
