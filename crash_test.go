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
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/testhook"
)

// crash stops replica id as the death of its process would: unlike Close,
// the commit index its log store defers is lost (testhook.Crash).
func (c *testCluster) crash(id uint64) {
	if n := c.nodes[id]; n != nil {
		// A replica in a working group defers a commit index within a
		// heartbeat or two; alone it may never, and dies after the wait.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
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
	engine, logdb := replica.TestingEngineConfigs(dir)
	cfg := config.NodeHostConfig{NodeHostDir: dir, Expert: config.ExpertConfig{Engine: engine, LogDB: logdb}}
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
	// The crash comes when the follower defers a commit index (a message
	// that carries nothing else): the group keeps committing until then.
	crashed, closed := followers[0], followers[1]
	n := c.node(crashed)
	delete(c.nodes, crashed)
	died := make(chan uint64, 1)
	go func() { died <- testhook.Crash(ctx, n) }()
	s, err := c.node(leader).NewSession(ctx)
	require.NoError(t, err)
	var lost uint64
loop:
	for i := 0; ; i++ {
		select {
		case lost = <-died:
			break loop
		default:
		}
		l, err := s.TryAcquire(ctx, fmt.Sprint("crash/", i))
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	require.NoError(t, s.Close(ctx))
	require.Equal(t, uint64(1), lost, "the crash dropped the replica's deferred state")
	target := c.node(leader).Status().AppliedIndex
	require.Less(t, diskCommit(t, c.dirs[crashed], crashed), target,
		"the crash lost a commit index the replica had learned: the one on disk is older")

	// Nothing is proposed any more: the other follower applies all, and
	// its clean Close writes the commit index it defers.
	for c.node(closed).Status().AppliedIndex < target {
		select {
		case <-ctx.Done():
			t.Fatalf("replica %d applied %d, not %d", closed, c.node(closed).Status().AppliedIndex, target)
		case <-time.After(5 * time.Millisecond):
		}
	}
	applied := c.node(closed).Status().AppliedIndex
	c.stop(closed)
	require.GreaterOrEqual(t, diskCommit(t, c.dirs[closed], closed), applied, "Close wrote the deferred commit index")

	// The crashed replica restarts on its Dir and applies everything again.
	n = c.start(crashed)
	for n.Status().AppliedIndex < target {
		select {
		case <-ctx.Done():
			t.Fatalf("the restarted replica applied %d, not %d", n.Status().AppliedIndex, target)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
