package fencelock

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

// A holder whose replica goes away (its process crashed) keeps the lock
// until the group expires its session, one TTL after the leader last heard
// from it; then the waiter gets it with a larger token.
func TestHolderReplicaCrashPassesLockAfterTTL(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := c.leader(ctx)
	crash := leader%3 + 1 // a follower: the leader keeps its timers
	survivor := crash%3 + 1
	const ttl = 2 * time.Second

	holder := newSession(t, ctx, c.node(crash), WithTTL(ttl))
	l, err := holder.Acquire(ctx, "job")
	require.NoError(t, err)
	waiter := newSession(t, ctx, c.node(survivor))
	res := acquireAsync(ctx, waiter, "job")
	waitWaiters(t, ctx, c.node(survivor), "job", 1)

	// A keep-alive sent now is applied by the leader after now, and the
	// leader expires the session no sooner than TTL after applying it.
	renewed := time.Now()
	require.NoError(t, holder.KeepAlive(ctx))
	c.crash(crash)
	r := <-res
	require.NoError(t, r.err)
	require.GreaterOrEqual(t, time.Since(renewed), ttl, "the lock passed before the TTL ran out")
	require.Greater(t, r.l.Token(), l.Token())
	info := inspect(t, ctx, c.node(survivor), "job")
	require.Equal(t, waiter.ID(), info.SessionID)
}

// A paused holder (its process frozen past the TTL, its node alive) finds
// Lock.Done closed by its own clock, its late Release changes nothing, and
// its late write is refused by the resource.
func TestPausedHolderIsFencedOff(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const ttl = time.Second
	a := newSession(t, ctx, c.node(2), WithTTL(ttl))
	b := newSession(t, ctx, c.node(3))
	storage := NewFencer()

	la, err := a.Acquire(ctx, "file")
	require.NoError(t, err)
	require.NoError(t, storage.Admit("file", la.Token()))
	// The order is taken where the grant happens: when b's Acquire returns,
	// had the holder's session closed Done by itself? (Its raw channel:
	// Done() would check the deadline itself.)
	type granted struct {
		acquired
		holderStopped bool
	}
	res := make(chan granted, 1)
	go func() {
		l, err := b.Acquire(ctx, "file")
		res <- granted{acquired{l, err}, closed(a.s.Testing().Done())}
	}()
	waitWaiters(t, ctx, c.node(1), "file", 1)

	// The holder's replica is cut off too, so that the holder cannot
	// learn of its expiry from the group: its own deadline must stop it.
	testhook.Freeze(a)
	defer testhook.Thaw(a)
	c.net.Isolate(c.members[2])
	r := <-res
	require.NoError(t, r.err)
	require.True(t, r.holderStopped, "the group passed the lock on while the holder still believed it held it")
	require.ErrorIs(t, la.Err(), ErrSessionExpired)
	require.ErrorIs(t, a.Err(), ErrSessionExpired)
	require.Greater(t, r.l.Token(), la.Token())
	c.net.Heal()
	require.NoError(t, storage.Admit("file", r.l.Token()))

	testhook.Thaw(a)
	require.ErrorIs(t, storage.Do("file", la.Token(), func() error {
		t.Error("the stale holder's write ran")
		return nil
	}), ErrStaleToken)
	require.ErrorIs(t, la.Release(ctx), ErrNotHeld)
	require.Equal(t, b.ID(), inspect(t, ctx, c.node(1), "file").SessionID, "the late release freed nothing")
}

// Losing the leader's replica keeps held locks held, and the group keeps
// granting with rising tokens under the new leader.
func TestLeaderLossKeepsLocksAndTokensRise(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	old := c.leader(ctx)
	f1 := old%3 + 1
	f2 := f1%3 + 1
	s := newSession(t, ctx, c.node(f1))
	held, err := s.Acquire(ctx, "held")
	require.NoError(t, err)
	before := inspect(t, ctx, c.node(f2), "held")

	c.crash(old)
	newLeader := c.leader(ctx)
	require.NotEqual(t, old, newLeader)
	require.Equal(t, before, inspect(t, ctx, c.node(f2), "held"), "the lock survived the failover")
	require.False(t, closed(held.Done()), "the holder's session survived the failover")

	s2 := newSession(t, ctx, c.node(f2))
	fresh, err := s2.Acquire(ctx, "fresh")
	require.NoError(t, err)
	require.Greater(t, fresh.Token(), held.Token())
	_, err = s2.TryAcquire(ctx, "held")
	require.ErrorIs(t, err, ErrLocked)
	require.NoError(t, held.Release(ctx))
	again, err := s2.Acquire(ctx, "held")
	require.NoError(t, err)
	require.Greater(t, again.Token(), fresh.Token())
}

// Without a quorum nothing is granted: calls fail with an error that is both
// ErrUnavailable and the context's error. Once the quorum is back, the group
// works again and the abandoned request left nothing behind.
func TestNoQuorumRefusesInsteadOfGranting(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := c.leader(ctx)
	keep := leader%3 + 1
	s := newSession(t, ctx, c.node(keep), WithTTL(5*time.Second))
	for id := uint64(1); id <= 3; id++ {
		if id != keep {
			c.crash(id)
		}
	}

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := s.Acquire(short, "cp")
	cancel()
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.node(keep).Inspect(short, "cp")
	cancel()
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	short, cancel = context.WithCancel(ctx)
	cancel()
	_, err = c.node(keep).NewSession(short)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrUnavailable, "over before it began: the group was never asked")

	for id := uint64(1); id <= 3; id++ {
		if id != keep {
			c.start(id)
		}
	}
	s2 := newSession(t, ctx, c.node(keep))
	l, err := s2.Acquire(ctx, "other")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	waitUntil(t, ctx, "the abandoned acquire is withdrawn", func() bool {
		info := inspect(t, ctx, c.node(keep), "cp")
		return !info.Held && info.Waiters == 0
	})
}

// Tokens never reset: after every replica restarts on its dir, the next
// grant's token is larger than every token before, and held locks are still
// held (until their sessions, whose holders are gone, expire).
func TestFullRestartKeepsStateAndTokensRise(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.node(1), WithTTL(3*time.Second))
	var last uint64
	for _, name := range []string{"a", "b", "c"} {
		l, err := s.Acquire(ctx, name)
		require.NoError(t, err)
		last = max(last, l.Token())
		if name != "c" {
			require.NoError(t, l.Release(ctx))
		}
	}
	c.closeAll()
	c.startAll()

	info := inspect(t, ctx, c.node(2), "c")
	require.True(t, info.Held, "the held lock survived the restart")
	require.Equal(t, s.ID(), info.SessionID)

	s2 := newSession(t, ctx, c.node(3))
	l, err := s2.Acquire(ctx, "a")
	require.NoError(t, err)
	require.Greater(t, l.Token(), last)
	// The old session's holder is gone; the group expires it after its TTL.
	lc, err := s2.Acquire(ctx, "c")
	require.NoError(t, err)
	require.Greater(t, lc.Token(), l.Token())
}

// A replica that was down while the log was compacted past it catches up from
// a snapshot, and serves reads and sessions with the same state.
func TestRestartedReplicaCatchesUpFromSnapshot(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries, cfg.CompactionOverhead = 20, 5 })
	ctx := testCtx(t)
	leader := c.leader(ctx)
	lagging := leader%3 + 1
	other := lagging%3 + 1
	s0 := newSession(t, ctx, c.node(lagging))
	require.NoError(t, s0.Close(ctx))
	stoppedAt := c.node(lagging).Status().AppliedIndex
	c.crash(lagging)

	s := newSession(t, ctx, c.node(other))
	var held *Lock
	for i := range 60 {
		l, err := s.Acquire(ctx, "k")
		require.NoError(t, err)
		if i == 59 {
			held = l
			break
		}
		require.NoError(t, l.Release(ctx))
	}
	n := c.start(lagging)
	waitUntil(t, ctx, "the restarted replica catches up", func() bool {
		return n.Status().AppliedIndex >= c.node(other).Status().AppliedIndex
	})
	require.Greater(t, n.r.RestoredIndex(), stoppedAt+20, "the replica caught up from a snapshot")
	local, err := n.r.StaleRead(fsm.Query(func(st *fsm.State) any { return st.Lock("k") }))
	require.NoError(t, err)
	require.Equal(t, held.Token(), local.(fsm.LockInfo).Token, "its local state has the latest grant")

	s3 := newSession(t, ctx, n)
	res := acquireAsync(ctx, s3, "k")
	waitWaiters(t, ctx, n, "k", 1)
	require.NoError(t, held.Release(ctx))
	r := <-res
	require.NoError(t, r.err, "a waiter on the caught-up replica is woken by its own apply")
	require.Greater(t, r.l.Token(), held.Token())
}

// An expiry decided by a deposed leader (its proposal forwarded, retried or
// delayed past the election) never applies in its successor's term: it names
// the old leader's marker. It names a keep-alive no later one can overrule,
// so only the marker can refuse it.
func TestDeposedLeadersExpiryIsRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	old := c.leader(ctx)
	f1 := old%3 + 1
	s := newSession(t, ctx, c.node(f1))
	mark := func() uint64 {
		v, err := c.node(f1).r.Read(ctx, func(st *fsm.State) any { return st.LeaderMark() })
		require.NoError(t, err)
		return v.(uint64)
	}
	require.Eventually(t, func() bool { return mark() != 0 }, 30*time.Second, 10*time.Millisecond,
		"the leader commits its marker")
	oldMark := mark()

	c.crash(old)
	require.NotEqual(t, old, c.leader(ctx))
	require.Eventually(t, func() bool { return mark() != oldMark }, 30*time.Second, 10*time.Millisecond,
		"the new leader commits its own marker")

	res, err := c.node(f1).r.Propose(ctx, fsm.Command{Kind: fsm.KindExpire, Session: s.ID(), Target: math.MaxUint64, Mark: oldMark})
	require.NoError(t, err)
	require.Equal(t, fsm.NotApplied, res.Status)
	require.NoError(t, s.Err(), "the session lives on")
	_, err = s.Acquire(ctx, "after")
	require.NoError(t, err)
}
