package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// startGroup starts a 3-replica group on loopback ports.
func startGroup(t *testing.T) map[uint64]*fencelock.Node {
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		members[id] = l.Addr().String()
		l.Close()
	}
	dir := t.TempDir()
	nodes := map[uint64]*fencelock.Node{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs error
	for id := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := fencelock.Start(context.Background(), fencelock.Config{ReplicaID: id, Members: members,
				Dir: filepath.Join(dir, fmt.Sprint(id)), Logger: slog.New(slog.DiscardHandler)})
			mu.Lock()
			defer mu.Unlock()
			errs = errors.Join(errs, err)
			if n != nil {
				nodes[id] = n
			}
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	require.NoError(t, errs)
	return nodes
}

// scrape gathers a registry into name{labels} -> value; a histogram gives
// its sample count.
func scrape(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.Metric {
			key := f.GetName()
			for _, l := range m.Label {
				// An empty label is no label to Prometheus: the
				// default group's series keep their names.
				if l.GetName() != "replica" && l.GetValue() != "" {
					key += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.Counter.GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.Gauge.GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return out
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting until %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// startBilling starts a 1-replica node with the default group and a group
// named billing, and waits until it leads both.
func startBilling(t *testing.T, ctx context.Context) *fencelock.Node {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	n, err := fencelock.Start(ctx, fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: addr}, Dir: t.TempDir(),
		Logger: slog.New(slog.DiscardHandler), Groups: []fencelock.GroupConfig{{Name: "billing", Voters: []uint64{1}}}})
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	waitFor(t, ctx, "leaders", func() bool {
		st := n.Status()
		return len(st.Groups) == 2 && st.Groups[0].LeaderID == 1 && st.Groups[1].LeaderID == 1
	})
	return n
}

// testCtx bounds a test's calls: 60s, or less if the test ends first.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// registry is a pedantic registry of the nodes' collectors.
func registry(t *testing.T, nodes ...*fencelock.Node) *prometheus.Registry {
	reg := prometheus.NewPedanticRegistry()
	for _, n := range nodes {
		require.NoError(t, reg.Register(NewCollector(n)))
	}
	return reg
}

// requireLint requires the metrics of reg (those named, or every one) to
// pass Prometheus' lint: names, help and units as its conventions say.
func requireLint(t *testing.T, reg prometheus.Gatherer, names ...string) {
	t.Helper()
	problems, err := testutil.GatherAndLint(reg, names...)
	require.NoError(t, err)
	require.Empty(t, problems, "metric names and help follow Prometheus conventions")
}

// The collector's values move with real operations: grants, releases,
// queues, sessions, expiries, proposals and leader changes.
func TestCollectorFollowsTheGroup(t *testing.T) {
	ctx := testCtx(t)
	nodes := startGroup(t)
	var leader uint64
	waitFor(t, ctx, "a leader", func() bool {
		leader = nodes[1].Status().LeaderID
		return leader != 0 && nodes[2].Status().LeaderID == leader && nodes[3].Status().LeaderID == leader
	})
	follower := leader%3 + 1
	reg := registry(t, nodes[1], nodes[2], nodes[3])
	requireLint(t, reg)
	one := registry(t, nodes[follower])
	before := scrape(t, one)
	require.Equal(t, 1.0, before["fencelock_role{role=voter}"])
	require.Equal(t, 0.0, before["fencelock_role{role=leader}"])
	require.Equal(t, 1.0, before["fencelock_has_leader"])
	require.Equal(t, 3.0, before["fencelock_voters"])
	lead := registry(t, nodes[leader])
	require.Equal(t, 1.0, scrape(t, lead)["fencelock_role{role=leader}"])

	s, err := nodes[follower].NewSession(ctx, fencelock.WithTTL(time.Second))
	require.NoError(t, err)
	for range 5 {
		l, err := s.Acquire(ctx, "a")
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
	}
	held, err := s.Acquire(ctx, "b")
	require.NoError(t, err)
	s2, err := nodes[leader].NewSession(ctx)
	require.NoError(t, err)
	queued := make(chan error, 1)
	go func() {
		l, err := s2.Acquire(ctx, "b")
		if err == nil {
			err = l.Release(ctx)
		}
		queued <- err
	}()
	// Gauges follow this replica's applied state: wait until it applied
	// the queued request.
	var now map[string]float64
	waitFor(t, ctx, "the queued request is applied", func() bool {
		now = scrape(t, one)
		return now["fencelock_lock_waiters"] == 1
	})
	require.Equal(t, 1.0, now["fencelock_locks_held"])
	require.Equal(t, 2.0, now["fencelock_sessions"])
	require.GreaterOrEqual(t, now["fencelock_grants_total"]-before["fencelock_grants_total"], 6.0)
	require.Greater(t, now["fencelock_raft_entries_total"], before["fencelock_raft_entries_total"])
	require.LessOrEqual(t, now["fencelock_keep_alive_entries_total"], now["fencelock_raft_entries_total"])
	require.GreaterOrEqual(t, now["fencelock_releases_total"]-before["fencelock_releases_total"], 5.0)
	require.GreaterOrEqual(t, now["fencelock_proposal_duration_seconds"]-before["fencelock_proposal_duration_seconds"], 12.0,
		"one open, six acquires, five releases at least")
	require.Greater(t, now["fencelock_applied_index"], before["fencelock_applied_index"])

	// The holder pauses (its keep-alives stop): the group expires its
	// session, the waiter is granted, and the replicas count the expiry.
	expiries := now["fencelock_session_expiries_total"]
	testhook.Freeze(s)
	defer testhook.Thaw(s)
	require.NoError(t, <-queued)
	require.Error(t, held.Err())
	waitFor(t, ctx, "the expiry is counted", func() bool {
		return scrape(t, one)["fencelock_session_expiries_total"] == expiries+1
	})

	// The leader goes: the follower counts a leader change, and knows the
	// new leader.
	changes := scrape(t, one)["fencelock_leader_changes_total"]
	require.GreaterOrEqual(t, changes, 1.0, "the first leader counts")
	require.NoError(t, nodes[leader].Close())
	waitFor(t, ctx, "a new leader", func() bool {
		m := scrape(t, one)
		return m["fencelock_leader_changes_total"] == changes+1 && m["fencelock_has_leader"] == 1
	})
}

// Every group the replica runs has its series, labelled by group; the
// default group's carry an empty group label, which Prometheus stores as
// none.
func TestCollectorLabelsByGroup(t *testing.T) {
	ctx := testCtx(t)
	n := startBilling(t, ctx)
	reg := registry(t, n)
	requireLint(t, reg)
	got := scrape(t, reg)
	require.Equal(t, 1.0, got["fencelock_role{role=leader}"], "the default group")
	require.Equal(t, 1.0, got["fencelock_role{group=billing}{role=leader}"])
	require.Equal(t, 1.0, got["fencelock_has_leader{group=billing}"])
	require.Equal(t, 1.0, got["fencelock_voters{group=billing}"])
	require.Contains(t, got, "fencelock_peer_connection_failures_total")
	require.NotContains(t, got, "fencelock_peer_connection_failures_total{group=billing}", "connections are the host's, counted once")
}
