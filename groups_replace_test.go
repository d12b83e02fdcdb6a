package fencelock

import (
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest/logtap"
)

// Issue 36, part 2: five replicas, groups a (voters 1,2,3) and b (3,4,5);
// replica 3 stops for good, and a new replica 6 takes its place in every
// group with one call (ReplaceReplica) while clients hold locks in both
// groups and others take and give back locks in each group throughout: no
// lock is lost, and every group grants all along.
func TestReplaceReplicaInEveryGroup(t *testing.T) {
	c := newCluster(t, 5, withGroups(GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}, GroupConfig{Name: "b", Voters: []uint64{3, 4, 5}}))
	ctx := testCtx(t)
	c.waitStatus(ctx, "every host runs every group", func(_ uint64, st Status) bool { return len(st.Groups) == 3 && allLeaders(st) })
	c.waitTable(ctx)

	// Locks held throughout, in each group, by sessions on replicas that
	// stay; a TTL long enough for the elections on a loaded machine.
	const ttl = 10 * time.Second
	held := map[string]*Lock{}
	for name, id := range map[string]uint64{"held@a": 2, "held@b": 5, "held": 1} {
		s := newSession(t, ctx, c.node(id), WithTTL(ttl))
		l, err := s.Acquire(ctx, name)
		require.NoError(t, err, name)
		held[name] = l
	}
	// Locks taken and given back all along, in each group.
	granters := map[string]*granter{}
	for name, id := range map[string]uint64{"k@a": 1, "k@b": 4, "k": 2} {
		granters[name] = startGranter(t, ctx, newSession(t, ctx, c.node(id), WithTTL(ttl)), name)
	}
	finished := false
	finish := func() {
		if !finished {
			finished = true
			for _, g := range granters {
				g.finish()
			}
		}
	}
	defer finish()
	for _, g := range granters {
		g.waitMore(ctx, 10)
	}

	c.crash(3) // gone for good
	for _, g := range granters {
		g.waitMore(ctx, 10) // a and b go on with two of three voters
	}

	cfg6 := joinConfig(t, c, 6)
	require.NoError(t, c.node(1).AddNonVoting(ctx, 6, cfg6.Addr))
	n6 := startJoined(t, c, cfg6)
	before := map[string]int{}
	for name, g := range granters {
		before[name] = g.count()
	}
	start := time.Now()
	require.NoError(t, c.node(4).ReplaceReplica(ctx, 3, 6))
	took := time.Since(start)
	for name, g := range granters {
		g.waitMore(ctx, 10)
		t.Logf("%s: %d grants during the move, longest gap %v", name, g.count()-before[name], g.gap().Round(time.Millisecond))
		// Available throughout: a generous bound, for a loaded machine,
		// on the longest wait between two grants.
		require.Less(t, g.gap(), 10*time.Second, name)
	}
	t.Logf("ReplaceReplica took %v", took.Round(time.Millisecond))
	finish()

	// Every group votes on 6 instead of 3.
	for group, want := range map[string][]uint64{"": {1, 2, 4, 5, 6}, "a": {1, 2, 6}, "b": {4, 5, 6}} {
		m, err := c.node(1).MembersOf(ctx, group)
		require.NoError(t, err)
		require.Equal(t, want, slices.Sorted(maps.Keys(m.Voters)), "group %q", group)
		require.Contains(t, m.Removed, uint64(3), "group %q", group)
	}
	groups, err := c.node(5).Groups(ctx)
	require.NoError(t, err)
	require.Equal(t, []GroupInfo{
		{Name: "a", Voters: []uint64{1, 2, 6}, Removed: []uint64{3}, ShardID: groups[0].ShardID},
		{Name: "b", Voters: []uint64{4, 5, 6}, Removed: []uint64{3}, ShardID: groups[1].ShardID},
	}, groups)

	// No lock was lost: each is held by its holder, with its token, at the
	// group.
	for name, l := range held {
		select {
		case <-l.Done():
			t.Fatalf("%s lost: %v", name, l.Err())
		default:
		}
		info, err := c.node(1).Inspect(ctx, name)
		require.NoError(t, err)
		require.True(t, info.Held, name)
		require.Equal(t, l.Token(), info.Token, name)
	}

	// 6 really votes: with 1 gone as well, a still commits (voters 2 and
	// 6 of 1,2,6), and so does b (4,5,6 untouched by 1).
	g6, _ := group(n6.Status(), "a")
	require.False(t, g6.NonVoting, "6 votes in a")
	c.crash(1)
	s := newSession(t, ctx, c.node(2), WithTTL(ttl))
	for _, name := range []string{"after@a", "after@b", "after"} {
		l, err := s.Acquire(ctx, name)
		require.NoError(t, err, name)
		require.NoError(t, l.Release(ctx))
	}
}

// SetVoters moving a group off a live replica that leads it: the leader
// hands the group over before it leaves, the move keeps the locks, and the
// replica it left stops running the group for good (its part there ends
// with ErrGroupMoved, and so do calls naming the group there), even across
// a restart; other groups on it are untouched.
func TestSetVotersOffLiveLeader(t *testing.T) {
	tap := logtap.New(slog.LevelDebug)
	c := newCluster(t, 4, func(cfg *Config) {
		cfg.Logger = tap.Logger()
		cfg.Groups = []GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
	})
	ctx := testCtx(t)
	c.waitStatus(ctx, "every host runs a", func(_ uint64, st Status) bool { return len(st.Groups) == 2 && allLeaders(st) })
	c.waitTable(ctx)
	c.pauseBalancers() // 3 keeps a's leadership until the move
	require.NoError(t, c.node(3).TransferLeadership(ctx, "a", 3))
	s1 := newSession(t, ctx, c.node(1))
	kept, err := s1.Acquire(ctx, "kept@a")
	require.NoError(t, err)
	s3 := newSession(t, ctx, c.node(3))
	there, err := s3.Acquire(ctx, "there@a")
	require.NoError(t, err)

	require.NoError(t, c.node(3).SetVoters(ctx, "a", []uint64{1, 2, 4}))
	t.Logf("%s", tap.Wait(t, ctx, "group handed over before leaving its voters"))
	t.Logf("%s", tap.Wait(t, ctx, "voter removed, as the group table says", "member=3"))
	m, err := c.node(2).MembersOf(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 4}, slices.Sorted(maps.Keys(m.Voters)))
	require.Contains(t, m.Removed, uint64(3))
	require.NoError(t, kept.Err())
	select {
	case <-there.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a grant on the replica the group left still held")
	}
	require.ErrorIs(t, there.Err(), ErrGroupMoved)
	require.NoError(t, s3.Err(), "the session lives on")
	waitUntil(t, ctx, "3 no longer runs a", func() bool { return c.node(3).host.Group("a") == nil })
	_, err = s3.TryAcquire(ctx, "other@a")
	require.ErrorIs(t, err, ErrGroupMoved, "a call naming the group says where it went")
	_, err = s3.Acquire(ctx, "default-still")
	require.NoError(t, err)

	c.stop(3)
	n3 := c.start(3)
	require.Equal(t, []string{""}, n3.host.Groups(), "a restart does not bring the group back")
	require.ErrorIs(t, c.node(1).SetVoters(ctx, "a", []uint64{1, 2, 3}), ErrInvalidVoters, "3 was removed from a for good")
	require.NoError(t, c.node(1).SetVoters(ctx, "a", []uint64{1, 2, 4}), "idempotent")
}
