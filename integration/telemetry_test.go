package integration_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/fencelocktest/logtap"
)

// Every Acquire is one span, a child of the caller's, that names the lock,
// its mode and group, the result, the token, the place at entry and the
// time waited; a waiter's recorded wait covers the time from its call to
// the release that let it in, and its "granted" event counts the waiters
// that were ahead of it. Each raft proposal is a child span.
func TestTracingAcquire(t *testing.T) {
	c, exp, tp := tracedCluster(t)
	ctx := testCtx(t)
	ctx, job := tp.Tracer("test").Start(ctx, "job")
	defer job.End()
	holder := newSession(t, ctx, c.Node(1))
	first, second := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(1))

	l, err := holder.Acquire(ctx, "report@billing")
	require.NoError(t, err)
	_, err = first.TryAcquire(ctx, "report@billing")
	require.ErrorIs(t, err, fencelock.ErrLocked)

	type result struct {
		l       *fencelock.Lock
		err     error
		started time.Time
	}
	wait := func(s *fencelock.Session, shared bool) (*positions, chan result) {
		pos, out := newPositions(), make(chan result, 1)
		go func() {
			started := time.Now()
			acquire := s.Acquire
			if shared {
				acquire = s.AcquireShared
			}
			l, err := acquire(ctx, "report@billing", fencelock.WithQueuePosition(pos.report))
			out <- result{l, err, started}
		}()
		return pos, out
	}
	pos1, got1 := wait(first, false)
	pos1.await(t, ctx, 1)
	queued1 := time.Now() // the first waiter's call began before this
	pos2, got2 := wait(second, true)
	pos2.await(t, ctx, 2)
	queued2 := time.Now()
	releasing := time.Now() // the first waiter is granted after this
	require.NoError(t, l.Release(ctx))
	r1 := <-got1
	returned1 := time.Now()
	require.NoError(t, r1.err)
	releasing1 := time.Now()
	require.NoError(t, r1.l.Release(ctx))
	r2 := <-got2
	returned2 := time.Now()
	require.NoError(t, r2.err)
	require.NoError(t, r2.l.Release(ctx))

	acquires := spansOf(exp, "fencelock.Acquire")
	require.Len(t, acquires, 2, "the holder's and the first waiter's")
	tries := spansOf(exp, "fencelock.TryAcquire")
	require.Len(t, tries, 1)
	shared := spansOf(exp, "fencelock.AcquireShared")
	require.Len(t, shared, 1)
	for _, s := range append(append(acquires, tries...), shared...) {
		require.Equal(t, job.SpanContext().SpanID(), s.Parent.SpanID(), "%s: a child of the caller's span", s.Name)
		require.Equal(t, job.SpanContext().TraceID(), s.SpanContext.TraceID())
		a := attrs(s)
		require.Equal(t, "report@billing", a["fencelock.name"].AsString())
		require.Equal(t, "billing", a["fencelock.group"].AsString())
		require.NotEmpty(t, childrenOf(exp, s, "fencelock.propose"), "%s: its proposal is a child span", s.Name)
	}

	// The holder: granted at once.
	a := attrs(acquires[0])
	require.Equal(t, "exclusive", a["fencelock.mode"].AsString())
	require.Equal(t, "granted", a["fencelock.result"].AsString())
	require.Equal(t, int64(l.Token()), a["fencelock.token"].AsInt64())
	require.Equal(t, int64(0), a["fencelock.queue_position"].AsInt64())
	require.True(t, a["fencelock.wait"].AsBool())
	require.Contains(t, a, attribute.Key("fencelock.wait_ns"))

	// The Try: refused, not an error of the span.
	a = attrs(tries[0])
	require.Equal(t, "locked", a["fencelock.result"].AsString())
	require.False(t, a["fencelock.wait"].AsBool())
	require.NotContains(t, a, attribute.Key("fencelock.token"))

	// The first waiter: first in line, blocked until the release.
	a = attrs(acquires[1])
	require.Equal(t, "granted", a["fencelock.result"].AsString())
	require.Equal(t, int64(r1.l.Token()), a["fencelock.token"].AsInt64())
	require.Equal(t, int64(1), a["fencelock.queue_position"].AsInt64())
	waited := time.Duration(a["fencelock.wait_ns"].AsInt64())
	require.GreaterOrEqual(t, waited, releasing.Sub(queued1), "the call began before it queued, and was granted after the release began")
	require.LessOrEqual(t, waited, returned1.Sub(r1.started), "and within the call")
	require.GreaterOrEqual(t, acquires[1].EndTime.Sub(acquires[1].StartTime), waited)
	requireGrantedEvent(t, acquires[1], 0)

	// The shared waiter: second in line, one waiter ahead of it.
	a = attrs(shared[0])
	require.Equal(t, "shared", a["fencelock.mode"].AsString())
	require.Equal(t, int64(2), a["fencelock.queue_position"].AsInt64())
	waited = time.Duration(a["fencelock.wait_ns"].AsInt64())
	require.GreaterOrEqual(t, waited, releasing1.Sub(queued2))
	require.LessOrEqual(t, waited, returned2.Sub(r2.started))
	requireGrantedEvent(t, shared[0], 1)

	// Release: a span per call, with the token given back and the hold.
	releases := spansOf(exp, "fencelock.Release")
	require.Len(t, releases, 3)
	a = attrs(releases[0])
	require.Equal(t, int64(l.Token()), a["fencelock.token"].AsInt64())
	require.Equal(t, "ok", a["fencelock.result"].AsString())
	require.GreaterOrEqual(t, time.Duration(a["fencelock.held_ns"].AsInt64()), releasing.Sub(queued1),
		"held at least while the first waiter queued")
	require.NotEmpty(t, childrenOf(exp, releases[0], "fencelock.propose"))
}

// Campaign, TryCampaign, Resign, semaphores, a call that times out and a
// release of a grant no longer current each have their span and result.
func TestTracingOtherCalls(t *testing.T) {
	c, exp, _ := tracedCluster(t)
	ctx := testCtx(t)
	s, other := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(1))

	lead, err := s.Campaign(ctx, "primary", "me")
	require.NoError(t, err)
	_, err = other.TryCampaign(ctx, "primary", "them")
	require.ErrorIs(t, err, fencelock.ErrElectionTaken)
	require.NoError(t, lead.Resign(ctx))

	p, err := s.TryAcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "held")
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	started := time.Now()
	_, err = other.Acquire(short, "held")
	returned := time.Since(started)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, l.Release(ctx))
	require.ErrorIs(t, l.Release(ctx), fencelock.ErrNotHeld)
	require.NoError(t, p.Release(ctx))

	one := func(name string) map[attribute.Key]attribute.Value {
		t.Helper()
		got := spansOf(exp, name)
		require.Len(t, got, 1, name)
		require.False(t, got[0].Parent.IsValid(), "%s: a root span (the caller's ctx had none)", name)
		return attrs(got[0])
	}
	a := one("fencelock.Campaign")
	require.Equal(t, "election", a["fencelock.mode"].AsString())
	require.Equal(t, "granted", a["fencelock.result"].AsString())
	require.Equal(t, int64(lead.Token()), a["fencelock.token"].AsInt64())
	require.Equal(t, "", a["fencelock.group"].AsString())
	require.Equal(t, "locked", one("fencelock.TryCampaign")["fencelock.result"].AsString())
	a = one("fencelock.Resign")
	require.Equal(t, "ok", a["fencelock.result"].AsString())
	require.Equal(t, int64(lead.Token()), a["fencelock.token"].AsInt64())
	a = one("fencelock.TryAcquireSemaphore")
	require.Equal(t, "semaphore", a["fencelock.mode"].AsString())
	require.Equal(t, int64(2), a["fencelock.permits"].AsInt64())
	var timedOut int
	for _, sp := range spansOf(exp, "fencelock.Acquire") {
		if attrs(sp)["fencelock.result"].AsString() == "timeout" {
			timedOut++
			// The call's clock starts a little after the deadline was set.
			waited := time.Duration(attrs(sp)["fencelock.wait_ns"].AsInt64())
			require.GreaterOrEqual(t, waited, 45*time.Millisecond)
			require.LessOrEqual(t, waited, returned)
		}
	}
	require.Equal(t, 1, timedOut)
	var results []string
	for _, sp := range spansOf(exp, "fencelock.Release") {
		results = append(results, attrs(sp)["fencelock.result"].AsString())
	}
	require.Equal(t, []string{"ok", "not_held", "ok"}, results)
}

// tracedCluster starts a 1-replica node with a group named billing, whose
// spans go to an in-memory exporter.
func tracedCluster(t *testing.T) (*fencelocktest.Cluster, *tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := fencelocktest.NewCluster(t, 1, fencelocktest.WithConfig(func(cfg *fencelock.Config) {
		cfg.TracerProvider = tp
		cfg.Groups = []fencelock.GroupConfig{{Name: "billing", Voters: []uint64{1}}}
	}))
	return c, exp, tp
}

// spansOf returns the ended spans named name, in the order they ended.
func spansOf(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// attrs returns a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		out[kv.Key] = kv.Value
	}
	return out
}

// childrenOf returns the spans whose parent is s, named name.
func childrenOf(exp *tracetest.InMemoryExporter, s tracetest.SpanStub, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, c := range spansOf(exp, name) {
		if c.Parent.SpanID() == s.SpanContext.SpanID() {
			out = append(out, c)
		}
	}
	return out
}

// requireGrantedEvent checks that s has a "granted" event counting ahead
// waiters before it at entry.
func requireGrantedEvent(t *testing.T, s tracetest.SpanStub, ahead int64) {
	t.Helper()
	for _, e := range s.Events {
		if e.Name == "granted" {
			for _, kv := range e.Attributes {
				if kv.Key == "fencelock.waiters_ahead" {
					require.Equal(t, ahead, kv.Value.AsInt64())
					return
				}
			}
		}
	}
	t.Fatalf("%s: no granted event with waiters_ahead in %v", s.Name, s.Events)
}

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
