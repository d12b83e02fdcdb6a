package integration_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/fencelocktest/logtap"
)

// At info level an application sees fencelock's own structured records,
// each naming its replica, and no raft chatter: not through elections, a
// replica's crash and restart, snapshots and catch-up.
func TestNoRaftChatterAtInfo(t *testing.T) {
	rec := logtap.New(slog.LevelInfo)
	logger := rec.Logger()
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithConfig(func(cfg *fencelock.Config) {
		cfg.Logger = logger
		cfg.SnapshotEntries, cfg.CompactionOverhead = 10, 5
	}))
	ctx := testCtx(t)
	leader := c.Leader(ctx)
	follower := leader%3 + 1
	s := newSession(t, ctx, c.Node(leader))
	c.Stop(follower)
	for range 30 {
		l, err := s.Acquire(ctx, "x")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	n := c.Restart(follower)
	_, err := n.Members(ctx)
	require.NoError(t, err)
	c.Stop(leader) // an election
	c.Leader(ctx)
	stopAll(c)

	var leaderChanges int
	for _, r := range rec.Records() {
		require.False(t, strings.HasPrefix(r.Attrs["component"], "dragonboat/"),
			"raft chatter at %v: %s %v", r.Level, r.Message, r.Attrs)
		require.True(t, strings.HasPrefix(r.Message, "fencelock"), "%q", r.Message)
		require.NotEmpty(t, r.Attrs["replica"], "%q names its replica", r.Message)
		if strings.Contains(r.Message, "leader changed") {
			leaderChanges++
		}
	}
	require.GreaterOrEqual(t, leaderChanges, 2, "leader changes are logged at info")
}
