package integration_test

import (
	"context"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// A wrong port for a peer in one replica's map used to panic that replica.
func TestWrongPeerPortCrashesNobody(t *testing.T) {
	tap := newLogTap()
	ctx := testCtx(t)
	wrong := fencelocktest.FreePort(t)
	right, nodes := misconfigured(t, tap, func(m map[uint64]string) map[uint64]string { m[1] = wrong; return m })
	tap.wait(t, ctx, "belongs to another group", "1 is "+right[1]+" there, "+wrong+" here")
	groupWorks(t, ctx, nodes, "port")
}

// A replica given a Members map of its own alone used to bootstrap a group
// of its own silently, granting the same names. It still is a group (a
// one-replica group is a valid configuration), but the real group's
// replicas refuse it, and the difference is logged on both sides.
func TestLoneMembersMapIsReported(t *testing.T) {
	tap := newLogTap()
	ctx := testCtx(t)
	_, nodes := misconfigured(t, tap, func(m map[uint64]string) map[uint64]string {
		return map[uint64]string{3: m[3]}
	})
	tap.wait(t, ctx, "refused the replica connecting", "belongs to another group", "1 only there (", "2 only there (")
	tap.wait(t, ctx, "refused this one", "belongs to another group", "1 only there (", "2 only there (")
	groupWorks(t, ctx, nodes, "lone")
}

// The same Dir started twice in one process used to panic inside pebble.
func TestSameDirTwiceInOneProcess(t *testing.T) {
	members := map[uint64]string{1: fencelocktest.FreePort(t)}
	dir := t.TempDir()
	n, err := fencelock.Start(context.Background(), fencelock.Config{ReplicaID: 1, Members: members, Dir: dir, Logger: quiet})
	require.NoError(t, err)
	_, err = fencelock.Start(context.Background(), fencelock.Config{ReplicaID: 1, Members: members, Dir: dir + "/.", Logger: quiet})
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)
	require.ErrorContains(t, err, "in use")
	n.Close()
	n, err = fencelock.Start(context.Background(), fencelock.Config{ReplicaID: 1, Members: members, Dir: dir, Logger: quiet})
	require.NoError(t, err, "Close frees the Dir")
	n.Close()
}

// A replica without a quorum says so, naming the voters it cannot reach,
// instead of waiting in silence.
func TestNoQuorumIsLogged(t *testing.T) {
	tap := newLogTap()
	members := map[uint64]string{1: fencelocktest.FreePort(t), 2: fencelocktest.FreePort(t), 3: fencelocktest.FreePort(t)}
	n, err := fencelock.Start(context.Background(), fencelock.Config{ReplicaID: 1, Members: members, Dir: t.TempDir(), Logger: tap.logger()})
	require.NoError(t, err)
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	line := tap.wait(t, ctx, "no raft leader", "reaches 0 of the other 2 voters", "quorum needs 2 of 3")
	require.Contains(t, line, "2="+members[2])
}

// A call whose context was over before it began never asked the group: it
// returns the context's error alone, not ErrUnavailable.
func TestCallWithContextAlreadyOver(t *testing.T) {
	c := fencelocktest.NewCluster(t, 1)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.Node(1))
	done, cancel := context.WithCancel(ctx)
	cancel()
	_, err := s.Acquire(done, "x")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, fencelock.ErrUnavailable)
	_, err = c.Node(1).Inspect(done, "x")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, fencelock.ErrUnavailable)
}

// A replica whose Dir belongs to an earlier incarnation of the group (the
// others were wiped and bootstrapped again with the same Members) is refused:
// its tokens are not comparable with the new incarnation's.
func TestStaleIncarnationIsRefused(t *testing.T) {
	tap := newLogTap()
	ctx := testCtx(t)
	members := map[uint64]string{1: fencelocktest.FreePort(t), 2: fencelocktest.FreePort(t), 3: fencelocktest.FreePort(t)}
	base := t.TempDir()
	dir := func(id uint64, gen string) string { return filepath.Join(base, gen+string(rune('0'+id))) }
	start := func(id uint64, gen string) *fencelock.Node {
		n, err := fencelock.Start(context.Background(), fencelock.Config{ReplicaID: id, Members: members, Dir: dir(id, gen), Logger: tap.logger()})
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		return n
	}
	// Incarnation A runs with all three and chooses its ID; then 1 and 2
	// are wiped and bootstrapped again (incarnation B), and 3 comes back on
	// its old Dir.
	a := []*fencelock.Node{start(1, "a"), start(2, "a"), start(3, "a")}
	waitUntil(t, ctx, "incarnation A has an ID", func() bool { return a[2].Status().GroupID != 0 })
	oldID := a[2].Status().GroupID
	for _, n := range a {
		n.Close()
	}
	b1, b2 := start(1, "b"), start(2, "b")
	waitUntil(t, ctx, "incarnation B has an ID", func() bool { return b1.Status().GroupID != 0 })
	require.NotEqual(t, oldID, b1.Status().GroupID)
	start(3, "a") // restarted on its old Dir
	tap.wait(t, ctx, "another incarnation of this group")
	for _, n := range []*fencelock.Node{b1, b2} {
		s := newSession(t, ctx, n)
		l, err := s.Acquire(ctx, "after")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
}

// logTap is a logger that keeps every message, so a test can wait for the
// warning a mistake must produce. Dragonboat's logs reach the logger of the
// last replica started in the process, so the replicas of one test share it.
type logTap struct {
	mu    sync.Mutex
	lines []string
	added chan struct{} // signalled on every new line
}

func newLogTap() *logTap { return &logTap{added: make(chan struct{}, 1)} }

func (l *logTap) logger() *slog.Logger { return slog.New(tapHandler{l, nil}) }

type tapHandler struct {
	l     *logTap
	attrs []slog.Attr
}

func (h tapHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h tapHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return tapHandler{h.l, append(append([]slog.Attr(nil), h.attrs...), a...)}
}

func (h tapHandler) WithGroup(string) slog.Handler { return h }

func (h tapHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.l.mu.Lock()
	h.l.lines = append(h.l.lines, b.String())
	h.l.mu.Unlock()
	select {
	case h.l.added <- struct{}{}:
	default:
	}
	return nil
}

// wait returns the first line that contains every one of parts, waiting
// for it until ctx ends.
func (l *logTap) wait(t *testing.T, ctx context.Context, parts ...string) string {
	t.Helper()
	for {
		l.mu.Lock()
		for _, line := range l.lines {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				l.mu.Unlock()
				return line
			}
		}
		l.mu.Unlock()
		select {
		case <-l.added:
		case <-ctx.Done():
			t.Fatalf("no log line with %q: %v", parts, ctx.Err())
		}
	}
}

// misconfigured starts replicas 1 and 2 of a three-replica group with the
// right Members, and replica 3 with members3; all log to tap. It returns the
// right Members and the three nodes.
func misconfigured(t *testing.T, tap *logTap, members3 func(right map[uint64]string) map[uint64]string) (map[uint64]string, [3]*fencelock.Node) {
	t.Helper()
	right := map[uint64]string{1: fencelocktest.FreePort(t), 2: fencelocktest.FreePort(t), 3: fencelocktest.FreePort(t)}
	base := t.TempDir()
	var nodes [3]*fencelock.Node
	for id := uint64(1); id <= 3; id++ {
		members := right
		if id == 3 {
			members = members3(maps.Clone(right))
		}
		n, err := fencelock.Start(context.Background(), fencelock.Config{ReplicaID: id, Members: members,
			Dir: filepath.Join(base, string(rune('0'+id))), Logger: tap.logger()})
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		nodes[id-1] = n
	}
	return right, nodes
}

// groupWorks checks that replicas 1 and 2 still form the group: a lock is
// granted through either.
func groupWorks(t *testing.T, ctx context.Context, nodes [3]*fencelock.Node, name string) {
	t.Helper()
	for _, n := range nodes[:2] {
		s := newSession(t, ctx, n)
		l, err := s.Acquire(ctx, name)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.NoError(t, s.Close(ctx))
	}
}
