package fencelock

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// joinConfig is the Config of a replica that joins c's group at a fresh
// address and dir, as a new host would start it.
func joinConfig(t testing.TB, c *testCluster, id uint64) Config {
	cfg := c.config(id)
	cfg.Members, cfg.Join = nil, true
	cfg.Addr = c.addr(id)
	cfg.Dir = filepath.Join(t.TempDir(), fmt.Sprint(id))
	return cfg
}

// startJoined starts a joining replica and makes c own it, so that it is
// closed with the group.
func startJoined(t testing.TB, c *testCluster, cfg Config) *Node {
	t.Helper()
	n, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	c.nodes[cfg.ReplicaID] = n
	return n
}

// granter acquires and releases one lock in a loop on one session, checking
// that every token is larger than the one before, until stopped. It records
// the longest time between two grants, from its first grant on.
type granter struct {
	t       testing.TB
	mu      sync.Mutex
	grants  int
	last    uint64
	granted time.Time // the last grant's
	longest time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func startGranter(t testing.TB, ctx context.Context, s *Session, name string) *granter {
	g := &granter{t: t, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for {
			select {
			case <-g.stop:
				return
			default:
			}
			l, err := s.Acquire(ctx, name)
			if err != nil {
				t.Errorf("%s: acquire during the change: %v", name, err)
				return
			}
			now := time.Now()
			g.mu.Lock()
			if !g.granted.IsZero() {
				g.longest = max(g.longest, now.Sub(g.granted))
			}
			g.granted = now
			if l.Token() <= g.last {
				t.Errorf("%s: token %d after %d", name, l.Token(), g.last)
			}
			g.last = l.Token()
			g.grants++
			g.mu.Unlock()
			if err := l.Release(ctx); err != nil {
				t.Errorf("%s: release during the change: %v", name, err)
				return
			}
		}
	}()
	return g
}

// gap is the longest time between two grants so far.
func (g *granter) gap() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.longest
}

func (g *granter) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.grants
}

// waitMore waits until the granter made n more grants than now.
func (g *granter) waitMore(ctx context.Context, n int) {
	g.t.Helper()
	target := g.count() + n
	waitUntil(g.t, ctx, fmt.Sprintf("%d more grants", n), func() bool { return g.count() >= target })
}

func (g *granter) finish() {
	close(g.stop)
	<-g.done
}

// A 3-replica group loses a replica for good. A new replica with a fresh ID
// joins, catches up from a snapshot (the log was compacted meanwhile), is
// promoted, and the dead one is removed. The group grants with rising tokens
// throughout, and the new replica really votes: after it restarts, the group
// keeps working with one of the original replicas gone too.
func TestReplaceDeadReplica(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries, cfg.CompactionOverhead = 20, 5 })
	ctx := testCtx(t)
	c.leader(ctx)
	// A TTL long enough for the elections below on a loaded machine.
	g := startGranter(t, ctx, newSession(t, ctx, c.node(2), WithTTL(10*time.Second)), "k")
	defer g.finish()

	c.crash(3) // host 3 is gone for good
	g.waitMore(ctx, 40)

	cfg4 := joinConfig(t, c, 4)
	require.NoError(t, c.node(1).AddNonVoting(ctx, 4, cfg4.Addr))
	n4 := startJoined(t, c, cfg4)
	m, err := n4.Members(ctx) // a linearizable read: returns once n4 caught up
	require.NoError(t, err)
	require.Equal(t, map[uint64]string{4: cfg4.Addr}, m.NonVoting)
	require.Len(t, m.Voters, 3)
	require.Positive(t, n4.r.RestoredIndex(), "the new replica caught up from a snapshot")
	// It may have taken a snapshot of its own since (the granter goes on).
	require.GreaterOrEqual(t, n4.Status().LastSnapshotIndex, n4.r.RestoredIndex())
	require.Positive(t, c.node(2).Status().LastSnapshotIndex, "the voters took snapshots")
	require.True(t, n4.Status().NonVoting)
	g.waitMore(ctx, 5)

	require.NoError(t, c.node(2).AddReplica(ctx, 4, cfg4.Addr), "promote the caught-up replica")
	require.NoError(t, c.node(1).RemoveReplica(ctx, 3))
	m, err = c.node(2).Members(ctx)
	require.NoError(t, err)
	require.Equal(t, map[uint64]string{1: c.members[1], 2: c.members[2], 4: cfg4.Addr}, m.Voters)
	require.Empty(t, m.NonVoting)
	require.Equal(t, []uint64{3}, m.Removed)
	waitUntil(t, ctx, "replica 4 sees itself voting", func() bool {
		st := n4.Status()
		return !st.NonVoting && len(st.Voters) == 3 && st.Voters[4] == cfg4.Addr
	})
	g.waitMore(ctx, 5)

	// The rules, with clear errors and no panic.
	require.ErrorIs(t, c.node(1).AddReplica(ctx, 3, c.addr(13)), ErrIDRemoved, "removed IDs are never reused")
	require.ErrorIs(t, c.node(1).AddNonVoting(ctx, 3, c.addr(13)), ErrIDRemoved)
	require.NoError(t, c.node(1).RemoveReplica(ctx, 3), "removing again is a no-op")
	require.NoError(t, c.node(2).AddReplica(ctx, 4, cfg4.Addr), "adding again is a no-op")
	require.ErrorIs(t, c.node(1).AddNonVoting(ctx, 4, cfg4.Addr), ErrMembership, "a voter cannot become non-voting")
	require.ErrorIs(t, c.node(1).AddReplica(ctx, 5, c.members[1]), ErrMembership, "the address belongs to replica 1")
	require.ErrorIs(t, c.node(1).AddReplica(ctx, 4, c.addr(14)), ErrMembership, "replica 4 lives elsewhere")
	require.ErrorIs(t, c.node(1).RemoveReplica(ctx, 99), ErrMembership, "not a member")
	require.ErrorIs(t, c.node(1).AddReplica(ctx, 0, cfg4.Addr), ErrMembership)
	require.ErrorIs(t, c.node(1).AddReplica(ctx, 6, "no-port"), ErrMembership)
	m2, err := c.node(1).Members(ctx)
	require.NoError(t, err)
	require.Equal(t, m.ConfigChangeIndex, m2.ConfigChangeIndex, "refused changes changed nothing")

	// The promoted replica restarts on its dir and votes: with replica 1
	// gone as well, replicas 2 and 4 are a quorum of {1, 2, 4}.
	n4.Close()
	n4 = startJoined(t, c, cfg4)
	_, err = n4.Members(ctx) // back in touch with the group
	require.NoError(t, err)
	c.crash(1)
	g.waitMore(ctx, 10)
	s4 := newSession(t, ctx, n4)
	l, err := s4.Acquire(ctx, "on-the-new-replica")
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// Only 3 instances vote; 4 more run non-voting replicas, open sessions on
// their own node, and get the same API: one holds a lock, another waits and
// is woken by the grant, the leader expires the session of a crashed one,
// and a removed one is told so.
func TestNonVotingReplicasHoldAndWait(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	c.leader(ctx)
	var nv []*Node
	for id := uint64(4); id <= 7; id++ {
		cfg := joinConfig(t, c, id)
		require.NoError(t, c.node(id%3+1).AddNonVoting(ctx, id, cfg.Addr))
		nv = append(nv, startJoined(t, c, cfg))
	}
	m, err := nv[3].Members(ctx)
	require.NoError(t, err)
	require.Len(t, m.Voters, 3)
	require.Len(t, m.NonVoting, 4)
	for _, n := range nv {
		waitUntil(t, ctx, "the non-voting replica knows its role", func() bool { return n.Status().NonVoting })
		require.Len(t, n.Status().Voters, 3)
	}

	holder := newSession(t, ctx, nv[0], WithTTL(time.Second)) // replica 4
	l, err := holder.Acquire(ctx, "job")
	require.NoError(t, err)
	waiter := newSession(t, ctx, nv[1]) // replica 5
	res := acquireAsync(ctx, waiter, "job")
	waitWaiters(t, ctx, nv[2], "job", 1)
	info := inspect(t, ctx, nv[3], "job")
	require.Equal(t, holder.ID(), info.SessionID)
	require.Equal(t, l.Token(), info.Token)
	page, err := c.node(1).Locks(ctx, "job")
	require.NoError(t, err)
	require.Equal(t, []uint64{waiter.ID()}, info.Queue)
	require.Equal(t, []LockDetail{{LockInfo: info, Owner: 4}}, page.Locks,
		"a voter lists the lock held from a non-voting replica, with its owner")
	sessions, err := nv[2].Sessions(ctx)
	require.NoError(t, err)
	owners := map[uint64]uint64{}
	for _, s := range sessions.Sessions {
		owners[s.ID] = s.Owner
	}
	require.Equal(t, map[uint64]uint64{holder.ID(): 4, waiter.ID(): 5}, owners)

	require.NoError(t, l.Release(ctx))
	r := <-res
	require.NoError(t, r.err, "the waiter on a non-voting replica is woken by its own apply")
	require.Greater(t, r.l.Token(), l.Token())

	// The holder's replica crashes: the leader expires its session, and the
	// next waiter, on another non-voting replica, gets the lock.
	again, err := holder.Acquire(ctx, "job2")
	require.NoError(t, err)
	w2 := newSession(t, ctx, nv[2]) // replica 6
	res2 := acquireAsync(ctx, w2, "job2")
	waitWaiters(t, ctx, nv[3], "job2", 1)
	c.crash(4)
	r2 := <-res2
	require.NoError(t, r2.err)
	require.Greater(t, r2.l.Token(), again.Token())

	// A non-voting replica that is removed while running ends its sessions.
	doomed := newSession(t, ctx, nv[3]) // replica 7
	require.NoError(t, c.node(1).RemoveReplica(ctx, 7))
	<-doomed.Done()
	require.ErrorIs(t, doomed.Err(), ErrRemoved)
	require.True(t, nv[3].Status().Removed)
	_, err = nv[3].NewSession(ctx)
	require.ErrorIs(t, err, ErrRemoved)
	m, err = c.node(2).Members(ctx)
	require.NoError(t, err)
	require.Equal(t, []uint64{7}, m.Removed)
}
