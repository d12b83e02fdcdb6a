package fencelock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/testhook"
)

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
