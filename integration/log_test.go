package integration_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// At info level an application sees fencelock's own structured records,
// each naming its replica, and no raft chatter: not through elections, a
// replica's crash and restart, snapshots and catch-up.
func TestNoRaftChatterAtInfo(t *testing.T) {
	rec := newRecorder()
	logger := slog.New(rec)
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
	for _, r := range rec.all() {
		require.False(t, strings.HasPrefix(r.attrs["component"], "dragonboat/"),
			"raft chatter at %v: %s %v", r.level, r.msg, r.attrs)
		require.True(t, strings.HasPrefix(r.msg, "fencelock"), "%q", r.msg)
		require.NotEmpty(t, r.attrs["replica"], "%q names its replica", r.msg)
		if strings.Contains(r.msg, "leader changed") {
			leaderChanges++
		}
	}
	require.GreaterOrEqual(t, leaderChanges, 2, "leader changes are logged at info")
}

// recorder is a slog.Handler that keeps every record at Info or above, with
// the attributes of its logger.
type recorder struct {
	mu      *sync.Mutex
	records *[]logged
	attrs   []slog.Attr
}

type logged struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func newRecorder() recorder { return recorder{mu: new(sync.Mutex), records: new([]logged)} }

func (r recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (r recorder) Handle(_ context.Context, rec slog.Record) error {
	l := logged{level: rec.Level, msg: rec.Message, attrs: map[string]string{}}
	for _, a := range r.attrs {
		l.attrs[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool {
		l.attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	*r.records = append(*r.records, l)
	r.mu.Unlock()
	return nil
}

func (r recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return recorder{mu: r.mu, records: r.records, attrs: append(append([]slog.Attr(nil), r.attrs...), as...)}
}

func (r recorder) WithGroup(string) slog.Handler { return r }

func (r recorder) all() []logged {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]logged(nil), *r.records...)
}
