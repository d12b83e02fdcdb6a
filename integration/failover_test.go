package integration_test

import (
	"context"
	"slices"
	"sync"
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
	c, ctx := newCluster(t, 3)
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
	c, ctx := newCluster(t, 3)
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
	c, ctx := newCluster(t, 3)
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
	c, ctx := newCluster(t, 3)
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

	s2, l := holding(t, ctx, c.Node(3), "a")
	require.Greater(t, l.Token(), last)
	// The old session's holder is gone; the group expires it after its TTL.
	lc, err := s2.Acquire(ctx, "c")
	require.NoError(t, err)
	require.Greater(t, lc.Token(), l.Token())
}

// callTiming is one acquire or release of the worker: when it started and
// how long it took.
type callTiming struct {
	start time.Time
	took  time.Duration
}

// worker acquires and releases lock name on s until stop closes, recording
// every call; it reports the first error.
func worker(ctx context.Context, s *fencelock.Session, name string, stop <-chan struct{}, calls chan<- callTiming) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		start := time.Now()
		l, err := s.Acquire(ctx, name)
		if err != nil {
			return err
		}
		calls <- callTiming{start, time.Since(start)}
		start = time.Now()
		if err := l.Release(ctx); err != nil {
			return err
		}
		calls <- callTiming{start, time.Since(start)}
	}
}

// The raft leader's replica closes while a worker on another replica
// acquires and releases: Close hands the leadership over first, so no call
// of the worker waits an election timeout (at least 150ms with the
// defaults) for a new leader. Each call stays within 50ms of the slowest
// call the worker made alone (a generous bound on a loaded machine; W11
// measures the figure), and another replica leads when Close returns.
func TestCloseHandsLeadershipOver(t *testing.T) {
	c, ctx := newCluster(t, 3)
	leader := c.Leader(ctx)
	term := c.Node(leader).Status().Term
	w := leader%3 + 1
	s := newSession(t, ctx, c.Node(w))

	// The worker's normal latency, measured alone in the same test.
	stop := make(chan struct{})
	calls := make(chan callTiming, 1<<16)
	done := make(chan error, 1)
	go func() { done <- worker(ctx, s, "handover", stop, calls) }()
	var alone []time.Duration
	for len(alone) < 200 {
		alone = append(alone, (<-calls).took)
	}
	normal := slices.Max(alone)

	closeStart := time.Now()
	require.NoError(t, c.Node(leader).Close())
	closed := time.Since(closeStart)
	// Another replica leads now: it took office before Close returned, and
	// its own report of it is at most an event delivery away; an election
	// after a crash could not start before an election timeout (150ms).
	var led uint64
	require.Eventually(t, func() bool {
		for id, n := range running(c) {
			if id != leader {
				if st := n.Status(); st.IsLeader && st.Term > term {
					led = id
					return true
				}
			}
		}
		return false
	}, 50*time.Millisecond, time.Millisecond, "no replica took the leadership over by the time Close returned")
	t.Logf("leader %d handed over to %d; Close took %v; the worker's slowest call alone %v", leader, led, closed, normal)

	// A few more calls after the close, then stop.
	var during []callTiming
	for after := 0; after < 100; {
		ct := <-calls
		if ct.start.Add(ct.took).After(closeStart) {
			during = append(during, ct)
		}
		if ct.start.After(closeStart) {
			after++
		}
	}
	close(stop)
	require.NoError(t, <-done)
	close(calls)
	for ct := range calls {
		during = append(during, ct)
	}
	var worst time.Duration
	for _, ct := range during {
		worst = max(worst, ct.took)
	}
	t.Logf("%d calls ended after the close began; the slowest took %v", len(during), worst)
	require.LessOrEqual(t, worst, normal+50*time.Millisecond,
		"a call waited more than 50ms beyond the worker's slowest call alone (%v)", normal)
	c.Stop(leader) // Close was called: the cluster forgets the node
}

// Close of a leader whose group has lost its quorum waits a bounded time
// for a handover that cannot happen, then stops; a second Close is a no-op.
func TestCloseWithoutQuorumIsBounded(t *testing.T) {
	c, ctx := newCluster(t, 3)
	leader := c.Leader(ctx)
	for id := range c.Members() {
		if id != leader {
			c.Stop(id)
		}
	}
	n := c.Node(leader)
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { require.NoError(t, n.Close()) })
	}
	wg.Wait()
	// 3 election timeouts and 2 RTTs (470ms) is the bound; the rest is slack
	// for a loaded machine.
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, n.Close())
	_, err := n.NewSession(ctx)
	require.ErrorIs(t, err, fencelock.ErrClosed)
	c.Stop(leader)
}

// A mirror fed by a voter that is cut off from the rest of its group (the
// link between the voter and the mirror's host still up) moves to a voter
// that is not: the group keeps its quorum, so a lock held through the
// mirror is kept for well over a TTL, and calls on the group go on.
func TestMirrorLeavesAVoterCutOffFromItsGroup(t *testing.T) {
	c := fencelocktest.NewCluster(t, 4, fencelocktest.WithConfig(withPlacement(fencelock.PlaceOwnGroups, fencelock.GroupConfig{Name: "g", Voters: []uint64{1, 2, 3}})))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitOwnGroup(t, ctx, c)

	const ttl = 4 * time.Second
	s4 := newSession(t, ctx, c.Node(4), fencelock.WithTTL(ttl))
	l, err := s4.Acquire(ctx, "x@g")
	require.NoError(t, err)
	server := mirrorServer(c.Node(4), "g")
	require.Contains(t, []uint64{1, 2, 3}, server)
	others := slices.DeleteFunc([]uint64{1, 2, 3}, func(id uint64) bool { return id == server })
	cutOff(c, server, others...)
	cut := time.Now()

	require.Eventually(t, func() bool { return slices.Contains(others, mirrorServer(c.Node(4), "g")) }, ttl, 10*time.Millisecond,
		"the mirror leaves %d, cut off from g, within a TTL", server)
	t.Logf("the mirror left replica %d %v after the cut, for replica %d", server, time.Since(cut).Round(time.Millisecond), mirrorServer(c.Node(4), "g"))
	require.Never(t, func() bool { return closed(l.Done()) }, 3*ttl, 50*time.Millisecond,
		"4's lock is kept while g keeps its quorum (cut: %d from %v)", server, others)
	require.Contains(t, others, mirrorServer(c.Node(4), "g"), "the mirror stays off the voter cut off from g")
	y, err := s4.TryAcquire(ctx, "y@g")
	require.NoError(t, err, "calls on g from 4 go on")
	require.NoError(t, y.Release(ctx))
	info, err := c.Node(others[0]).Inspect(ctx, "x@g")
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, l.Token(), info.Token, "g holds 4's lock")
}

// A call on a group reached through a mirror uses the group table the
// host follows: with the default group unreachable from 4 (4 cut from
// every replica), a call naming g fails with why (ErrUnavailable), never
// as an unknown group.
func TestMirroredGroupIsNoUnknownGroupWhenTheTableCannotBeRead(t *testing.T) {
	c := fencelocktest.NewCluster(t, 4, fencelocktest.WithConfig(withPlacement(fencelock.PlaceOwnGroups, fencelock.GroupConfig{Name: "g", Voters: []uint64{1, 2, 3}})))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	waitOwnGroup(t, ctx, c)
	_, err := c.Node(4).Inspect(ctx, "x@g")
	require.NoError(t, err)
	require.NotZero(t, mirrorServer(c.Node(4), "g"))

	c.Network().Isolate(c.Addr(4))
	cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
	_, err = c.Node(4).Inspect(cctx, "x@g")
	ccancel()
	require.Error(t, err)
	require.NotErrorIs(t, err, fencelock.ErrUnknownGroup)
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
}

func withPlacement(p fencelock.Placement, groups ...fencelock.GroupConfig) func(*fencelock.Config) {
	return func(c *fencelock.Config) {
		c.Placement = p
		c.Groups = groups
	}
}

// waitTable waits until every running replica follows the group table.
func waitTable(t *testing.T, ctx context.Context, c *fencelocktest.Cluster) {
	t.Helper()
	waitStatus(t, ctx, c, "every replica follows the group table", func(_ uint64, st fencelock.Status) bool {
		return st.FollowsGroupTable
	})
}

// waitOwnGroup waits until c's group g, voted by replicas 1-3 and placed
// PlaceOwnGroups, runs on its voters only, with a leader everywhere.
func waitOwnGroup(t *testing.T, ctx context.Context, c *fencelocktest.Cluster) {
	t.Helper()
	waitTable(t, ctx, c)
	waitStatus(t, ctx, c, "g runs on its voters only, with a leader", func(id uint64, st fencelock.Status) bool {
		_, has := group(st, "g")
		return has == (id <= 3) && allLeaders(st)
	})
}

// mirrorServer returns the replica that feeds n's mirror of group name, 0
// while none does (or n runs the group, and has no mirror of it).
func mirrorServer(n *fencelock.Node, name string) uint64 {
	for _, g := range n.Status().Mirrors {
		if g.Name == name {
			return g.Mirror
		}
	}
	return 0
}

// cutOff cuts replica id from each of others, both ways, on c's network.
func cutOff(c *fencelocktest.Cluster, id uint64, others ...uint64) {
	for _, o := range others {
		c.Network().Cut(c.Addr(id), c.Addr(o))
		c.Network().Cut(c.Addr(o), c.Addr(id))
	}
}
