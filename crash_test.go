package fencelock

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/logstore"
	"github.com/fencelock/fencelock/internal/testhook"
)

// crash stops replica id as the death of its process would: unlike Close,
// the commit index its log store defers is lost (testhook.Crash).
func (c *testCluster) crash(id uint64) {
	if n := c.nodes[id]; n != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.lost += testhook.Crash(ctx, n)
		delete(c.nodes, id)
	}
}

// diskCommit opens the raft log store a stopped replica left in dir and
// returns the commit index on disk.
func diskCommit(t *testing.T, dir string, id uint64) uint64 {
	t.Helper()
	found, err := filepath.Glob(filepath.Join(dir, "*", "*", "logdb-0"))
	require.NoError(t, err)
	require.Len(t, found, 1, "one log store in %s", dir)
	ldir := filepath.Dir(found[0])
	cfg := config.NodeHostConfig{NodeHostDir: dir, Expert: config.ExpertConfig{LogDB: config.GetTinyMemLogDBConfig()}}
	require.NoError(t, cfg.Prepare())
	db, err := logstore.Factory{}.Create(cfg, func(config.LogDBInfo) {}, []string{ldir}, []string{ldir})
	require.NoError(t, err)
	defer db.Close()
	rs, err := db.ReadRaftState(1, id, 0)
	require.NoError(t, err)
	return rs.State.Commit
}

// A crash loses the commit index a follower's log store defers, and a clean
// Close does not; the crashed replica restarts from the older commit index
// and catches up with the group.
func TestCrashLosesTheDeferredCommitIndexAndCloseKeepsIt(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := c.leader(ctx)
	var followers []uint64
	for id := range c.nodes {
		if id != leader {
			followers = append(followers, id)
		}
	}
	// Entries, each committed on the followers by a later message that
	// carries nothing but the commit index: the save that the store defers.
	s, err := c.node(leader).NewSession(ctx)
	require.NoError(t, err)
	for i := range 5 {
		l, err := s.TryAcquire(ctx, fmt.Sprint("crash/", i))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	require.NoError(t, s.Close(ctx))
	// Nothing is proposed any more: wait until the followers applied all.
	target := c.node(leader).Status().AppliedIndex
	for _, id := range followers {
		for c.node(id).Status().AppliedIndex < target {
			select {
			case <-ctx.Done():
				t.Fatalf("replica %d applied %d, not %d", id, c.node(id).Status().AppliedIndex, target)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	require.Equal(t, target, c.node(leader).Status().AppliedIndex, "nothing was proposed meanwhile")

	crashed, closed := followers[0], followers[1]
	applied := c.node(crashed).Status().AppliedIndex
	c.crash(crashed)
	require.Equal(t, uint64(1), c.lost, "the crash dropped the replica's deferred state")
	require.Less(t, diskCommit(t, c.dirs[crashed], crashed), applied,
		"the crash lost the commit index of entries the replica had applied")

	applied = c.node(closed).Status().AppliedIndex
	c.stop(closed)
	require.GreaterOrEqual(t, diskCommit(t, c.dirs[closed], closed), applied, "Close wrote the deferred commit index")

	// The crashed replica restarts on its Dir and applies everything again.
	n := c.start(crashed)
	for n.Status().AppliedIndex < target {
		select {
		case <-ctx.Done():
			t.Fatalf("the restarted replica applied %d, not %d", n.Status().AppliedIndex, target)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
