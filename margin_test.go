package fencelock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// The safety margin is what lets clocks run at different rates: a holder
// whose clock runs 5% slow, timed by a leader whose clock runs 5% fast
// (rates 10% apart, inside the default margin's promise of TTL/5 = 20%),
// still stops before the group can grant its lock to another session. Its
// replica is cut off, so its last keep-alive is the one both clocks time:
// the holder gives up at (TTL − margin)/0.95 after its send by real time,
// the leader expires the session no sooner than TTL/1.05 after applying
// it. Without the margin (lease = last send + TTL) the holder would stop
// at TTL/0.95, after the grant (FENCELOCK_SEEDED_BUG=margin-dropped, with
// the fencelock_seeded tag, plants that).
func TestSlowHolderClockStopsFirst(t *testing.T) {
	var j clock.Jumping
	rates := map[uint64]float64{1: 0.95, 2: 1.05, 3: 1.05}
	cl := newCluster(t, 3, func(cfg *Config) {
		c, err := clock.NewRated(&j, rates[cfg.ReplicaID])
		require.NoError(t, err)
		testhook.UseClock(cfg, c)
	})
	ctx := testCtx(t)
	const ttl = 2 * time.Second

	// The leader, on a fast clock, times the holder's session.
	waitUntil(t, ctx, "replica 2 leads", func() bool {
		if cl.leader(ctx) == 2 {
			return true
		}
		_ = cl.node(2).TransferLeadership(ctx, "", 2) // the next look tells
		return false
	})
	holder := newSession(t, ctx, cl.node(1), WithTTL(ttl))
	require.Equal(t, ttl/5, holder.SafetyMargin())
	l, err := holder.Acquire(ctx, "skewed")
	require.NoError(t, err)
	waiter := newSession(t, ctx, cl.node(2), WithTTL(ttl))
	got := acquireAsync(ctx, waiter, "skewed")
	waitWaiters(t, ctx, cl.node(2), "skewed", 1)

	// Cut it off just after a keep-alive was acknowledged, so that none is
	// in flight: one the leader applied but the holder never heard back
	// about would start the leader's timer later than the holder's.
	acked := testhook.LastKeepAlive(holder)
	waitUntil(t, ctx, "a keep-alive is acknowledged", func() bool { return testhook.LastKeepAlive(holder).After(acked) })
	cut := time.Now()
	cl.net.Isolate(cl.net.Addr(1))
	r := <-got
	granted := time.Since(cut)
	require.NoError(t, r.err)
	// Done is checked first, before anything else can run late: Done also
	// looks at the deadline by the holder's clock.
	stopped := closed(l.Done())
	require.True(t, cl.node(2).Status().IsLeader, "the fast leader timed the expiry")
	require.True(t, stopped, "the group granted %q %v after the holder was cut off, while the holder (clock 5%% slow) still held it: Done open, Err %v",
		"skewed", granted.Round(time.Millisecond), l.Err())
	require.ErrorIs(t, l.Err(), ErrSessionExpired)
	require.Greater(t, r.l.Token(), l.Token())
	require.NoError(t, r.l.Release(ctx))
}
