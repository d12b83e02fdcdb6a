package fencelock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/replica"
)

// A Dir made before the hosts stepped every group on one worker into one
// log partition (Dragonboat's 16 and 16, which it records in the Dir and
// refuses to open with others) still opens, keeps those counts and its
// locks, in every group; a new Dir gets one worker and one partition.
func TestDirOfEarlierEngineSettingsStillOpens(t *testing.T) {
	restore := replica.TestingNewDirShards(16, 16)
	c := newCluster(t, 3, withGroups(GroupConfig{Name: "g", Voters: []uint64{1, 2, 3}}))
	restore()
	ctx := testCtx(t)
	s := newSession(t, ctx, c.node(1), WithTTL(5*time.Second))
	x, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	y, err := s.Acquire(ctx, "y@g")
	require.NoError(t, err)
	// A named group's view shows the session's part there.
	ids := map[string]uint64{"x": s.ID()}
	var ok bool
	ids["y@g"], ok = s.IDIn("g")
	require.True(t, ok)

	c.closeAll()
	c.startAll()
	for id := uint64(1); id <= 3; id++ {
		e, l, ok := replica.TestingRecordedShards(c.config(id).Dir)
		require.True(t, ok)
		require.Equal(t, [2]uint64{16, 16}, [2]uint64{e, l}, "replica %d's Dir keeps the counts it was made with", id)
	}
	for _, name := range []string{"x", "y@g"} {
		info := inspect(t, ctx, c.node(2), name)
		require.True(t, info.Held, "%s is still held after the restart", name)
		require.Equal(t, ids[name], info.PartID)
	}
	s2 := newSession(t, ctx, c.node(3))
	l, err := s2.Acquire(ctx, "z@g")
	require.NoError(t, err)
	require.Greater(t, l.Token(), y.Token(), "g's tokens go on rising")
	l, err = s2.Acquire(ctx, "z")
	require.NoError(t, err)
	require.Greater(t, l.Token(), x.Token())

	n := newCluster(t, 3, withGroups(GroupConfig{Name: "g", Voters: []uint64{1, 2, 3}}))
	e, lg, ok := replica.TestingRecordedShards(n.config(1).Dir)
	require.True(t, ok)
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{e, lg}, "a new Dir: one step worker, one log partition")
}
