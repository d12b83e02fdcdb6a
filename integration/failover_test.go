package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// A holder whose replica goes away (its process crashed) keeps the lock
// until the group expires its session, one TTL after the leader last heard
// from it; then the waiter gets it with a larger token.
func TestHolderReplicaCrashPassesLockAfterTTL(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	leader := c.Leader(ctx)
	crash := leader%3 + 1 // a follower: the leader keeps its timers
	survivor := crash%3 + 1
	const ttl = 2 * time.Second

	holder := newSession(t, ctx, c.Node(crash), fencelock.WithTTL(ttl))
	l, err := holder.Acquire(ctx, "job")
	require.NoError(t, err)
	waiter := newSession(t, ctx, c.Node(survivor))
	res := acquireAsync(ctx, waiter, "job")
	waitWaiters(t, ctx, c.Node(survivor), "job", 1)

	// A keep-alive sent now is applied by the leader after now, and the
	// leader expires the session no sooner than TTL after applying it.
	renewed := time.Now()
	require.NoError(t, holder.KeepAlive(ctx))
	c.Crash(crash)
	r := <-res
	require.NoError(t, r.err)
	require.GreaterOrEqual(t, time.Since(renewed), ttl, "the lock passed before the TTL ran out")
	require.Greater(t, r.l.Token(), l.Token())
	info := inspect(t, ctx, c.Node(survivor), "job")
	require.Equal(t, waiter.ID(), info.SessionID)
}

// Losing the leader's replica keeps held locks held, and the group keeps
// granting with rising tokens under the new leader.
func TestLeaderLossKeepsLocksAndTokensRise(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	old := c.Leader(ctx)
	f1 := old%3 + 1
	f2 := f1%3 + 1
	s := newSession(t, ctx, c.Node(f1))
	held, err := s.Acquire(ctx, "held")
	require.NoError(t, err)
	before := inspect(t, ctx, c.Node(f2), "held")

	c.Crash(old)
	newLeader := c.Leader(ctx)
	require.NotEqual(t, old, newLeader)
	require.Equal(t, before, inspect(t, ctx, c.Node(f2), "held"), "the lock survived the failover")
	require.False(t, closed(held.Done()), "the holder's session survived the failover")

	s2 := newSession(t, ctx, c.Node(f2))
	fresh, err := s2.Acquire(ctx, "fresh")
	require.NoError(t, err)
	require.Greater(t, fresh.Token(), held.Token())
	_, err = s2.TryAcquire(ctx, "held")
	require.ErrorIs(t, err, fencelock.ErrLocked)
	require.NoError(t, held.Release(ctx))
	again, err := s2.Acquire(ctx, "held")
	require.NoError(t, err)
	require.Greater(t, again.Token(), fresh.Token())
}

// Without a quorum nothing is granted: calls fail with an error that is both
// ErrUnavailable and the context's error. Once the quorum is back, the group
// works again and the abandoned request left nothing behind.
func TestNoQuorumRefusesInsteadOfGranting(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	leader := c.Leader(ctx)
	keep := leader%3 + 1
	s := newSession(t, ctx, c.Node(keep), fencelock.WithTTL(5*time.Second))
	for id := uint64(1); id <= 3; id++ {
		if id != keep {
			c.Crash(id)
		}
	}

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := s.Acquire(short, "cp")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	short, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Node(keep).Inspect(short, "cp")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	short, cancel = context.WithCancel(ctx)
	cancel()
	_, err = c.Node(keep).NewSession(short)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, fencelock.ErrUnavailable, "over before it began: the group was never asked")

	for id := uint64(1); id <= 3; id++ {
		if id != keep {
			c.Restart(id)
		}
	}
	s2 := newSession(t, ctx, c.Node(keep))
	l, err := s2.Acquire(ctx, "other")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	waitUntil(t, ctx, "the abandoned acquire is withdrawn", func() bool {
		info := inspect(t, ctx, c.Node(keep), "cp")
		return !info.Held && info.Waiters == 0
	})
}

// Tokens never reset: after every replica restarts on its dir, the next
// grant's token is larger than every token before, and held locks are still
// held (until their sessions, whose holders are gone, expire).
func TestFullRestartKeepsStateAndTokensRise(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.Node(1), fencelock.WithTTL(3*time.Second))
	var last uint64
	for _, name := range []string{"a", "b", "c"} {
		l, err := s.Acquire(ctx, name)
		require.NoError(t, err)
		last = max(last, l.Token())
		if name != "c" {
			require.NoError(t, l.Release(ctx))
		}
	}
	restartAll(c)

	info := inspect(t, ctx, c.Node(2), "c")
	require.True(t, info.Held, "the held lock survived the restart")
	require.Equal(t, s.ID(), info.SessionID)

	s2 := newSession(t, ctx, c.Node(3))
	l, err := s2.Acquire(ctx, "a")
	require.NoError(t, err)
	require.Greater(t, l.Token(), last)
	// The old session's holder is gone; the group expires it after its TTL.
	lc, err := s2.Acquire(ctx, "c")
	require.NoError(t, err)
	require.Greater(t, lc.Token(), l.Token())
}
