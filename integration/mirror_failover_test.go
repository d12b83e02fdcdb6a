package integration_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

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
