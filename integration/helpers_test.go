package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// The helpers below are the root's test helpers of the same names, written
// against the public API and the kit.

// quiet keeps Dragonboat's noise out of the output of the tests that start
// a Node themselves.
var quiet = slog.New(slog.DiscardHandler)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newCluster starts a cluster of n replicas and gives it with a testCtx:
// the start of most tests here. The cluster comes first so that its
// cleanup runs after the context's cancel, as when a test calls the two
// itself.
func newCluster(t *testing.T, n int, opts ...fencelocktest.Option) (*fencelocktest.Cluster, context.Context) {
	t.Helper()
	return fencelocktest.NewCluster(t, n, opts...), testCtx(t)
}

// running returns c's running replicas by ID, as Node gives them.
func running(c *fencelocktest.Cluster) map[uint64]*fencelock.Node {
	nodes := map[uint64]*fencelock.Node{}
	for id := range c.Members() {
		if n := c.Node(id); n != nil {
			nodes[id] = n
		}
	}
	return nodes
}

// stopAll stops every replica of c (Stop), before the test's cleanup would.
func stopAll(c *fencelocktest.Cluster) {
	for id := range c.Members() {
		c.Stop(id)
	}
}

// waitUntil polls a condition on the group's state, for which no channel
// exists, until it holds or ctx ends.
func waitUntil(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitStatus polls every running replica's Status until ok holds for all
// of them, or fails the test when ctx ends. Status is a local read without
// a change notification, so it is polled, as Cluster.Leader does.
func waitStatus(t testing.TB, ctx context.Context, c *fencelocktest.Cluster, what string, ok func(id uint64, st fencelock.Status) bool) {
	t.Helper()
	for {
		all := true
		var last string
		for id, n := range running(c) {
			st := n.Status()
			if !ok(id, st) {
				all = false
				last = fmt.Sprintf("replica %d: %+v", id, st.Groups)
				break
			}
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v; last: %s", what, ctx.Err(), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// withGroups is the cluster option that sets Groups.
func withGroups(groups ...fencelock.GroupConfig) fencelocktest.Option {
	return fencelocktest.WithConfig(func(c *fencelock.Config) { c.Groups = groups })
}

// group returns the named group's status in st.
func group(st fencelock.Status, name string) (fencelock.GroupStatus, bool) {
	for _, g := range st.Groups {
		if g.Name == name {
			return g, true
		}
	}
	return fencelock.GroupStatus{}, false
}

// allLeaders reports whether every group st shows has a leader and an ID
// known here (a shard that has not applied its group's first entry yet
// shows ID 0).
func allLeaders(st fencelock.Status) bool {
	for _, g := range st.Groups {
		if g.LeaderID == 0 || g.GroupID == 0 {
			return false
		}
	}
	return true
}

// mapped returns f of each of xs, in order (nil for none): one field of
// every row of a view.
func mapped[T, U any](xs []T, f func(T) U) []U {
	var out []U
	for _, x := range xs {
		out = append(out, f(x))
	}
	return out
}

func inspect(t testing.TB, ctx context.Context, n *fencelock.Node, name string) fencelock.LockInfo {
	t.Helper()
	info, err := n.Inspect(ctx, name)
	require.NoError(t, err)
	return info
}

// waitWaiters waits until lock name has n queued requests.
func waitWaiters(t testing.TB, ctx context.Context, n *fencelock.Node, name string, waiters int) {
	t.Helper()
	waitUntil(t, ctx, "the queue is long enough", func() bool { return inspect(t, ctx, n, name).Waiters == waiters })
}

func newSession(t testing.TB, ctx context.Context, n *fencelock.Node, opts ...fencelock.SessionOption) *fencelock.Session {
	t.Helper()
	s, err := n.NewSession(ctx, opts...)
	require.NoError(t, err)
	return s
}

// holding opens a session on n that acquires name, and returns both.
func holding(t testing.TB, ctx context.Context, n *fencelock.Node, name string) (*fencelock.Session, *fencelock.Lock) {
	t.Helper()
	s := newSession(t, ctx, n)
	l, err := s.Acquire(ctx, name)
	require.NoError(t, err)
	return s, l
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

type acquired struct {
	l   *fencelock.Lock
	err error
}

// acquireAsync starts an Acquire and returns where its result arrives.
func acquireAsync(ctx context.Context, s *fencelock.Session, name string) <-chan acquired {
	return async(func() (*fencelock.Lock, error) { return s.Acquire(ctx, name) })
}

// async starts acquire, any of a session's calls that wait for a grant,
// and returns where its result arrives.
func async(acquire func() (*fencelock.Lock, error)) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := acquire()
		ch <- acquired{l, err}
	}()
	return ch
}

func assertNoError(t testing.TB, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// defaultSessionName is the name of a session opened without
// WithSessionName: "host:pid" of this process, as WithSessionName
// documents, cut to MaxSessionNameLen.
func defaultSessionName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	name := fmt.Sprintf("%s:%d", host, os.Getpid())
	if len(name) > fencelock.MaxSessionNameLen {
		name = strings.ToValidUTF8(name[:fencelock.MaxSessionNameLen], "")
	}
	return name
}

// The views' exact comparisons written before sessions had names compare
// what they always did: these check that the names and times are there
// (the default name, a grant time), then clear them.

func unnamed(t testing.TB, info fencelock.LockInfo) fencelock.LockInfo {
	t.Helper()
	if info.Held {
		require.Equal(t, defaultSessionName(), info.SessionName)
		require.False(t, info.GrantedAt.IsZero(), "no grant time")
	}
	info.SessionName, info.GrantedAt = "", time.Time{}
	if info.Holders != nil {
		hs := make([]fencelock.Holder, len(info.Holders))
		for i, h := range info.Holders {
			require.Equal(t, defaultSessionName(), h.Name)
			require.False(t, h.GrantedAt.IsZero(), "no grant time")
			h.Name, h.GrantedAt = "", time.Time{}
			hs[i] = h
		}
		info.Holders = hs
	}
	return info
}

func unnamedLeader(t testing.TB, l fencelock.LeaderInfo) fencelock.LeaderInfo {
	t.Helper()
	if l.Token != 0 {
		require.NotEmpty(t, l.SessionName)
		require.False(t, l.ElectedAt.IsZero(), "no election time")
	}
	l.SessionName, l.ElectedAt = "", time.Time{}
	return l
}

// next receives the next observation; the channel must stay open.
func next(t testing.TB, ctx context.Context, ch <-chan fencelock.LeaderInfo) fencelock.LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-ch:
		require.True(t, ok, "the observer's channel closed")
		return unnamedLeader(t, info) // the exact comparisons predate names
	case <-ctx.Done():
		t.Fatal("no observation")
	}
	return fencelock.LeaderInfo{}
}

// restartAll stops every replica of c, then starts each again on its Dir:
// the whole group restarts.
func restartAll(c *fencelocktest.Cluster) {
	stopAll(c)
	for id := range c.Members() {
		c.Restart(id)
	}
}
