package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
	"github.com/fencelock/fencelock/transport"
)

// Issue 48, item 7: a forced drop of a group where a lock and a leadership
// are held and others queue for both. The queued acquires and the queued
// candidacy end with ErrGroupDropped, never with a grant of the dying group:
// no replica applies a grant in the group once the drop has begun (every
// replica applies the same log, so replica 1's record stands for all).
func TestForceDropGrantsNoWaiter(t *testing.T) {
	var (
		dropping atomic.Bool
		mu       sync.Mutex
		late     []string // grants in g applied by replica 1 once the drop began
	)
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Groups = []GroupConfig{{Name: "g", Voters: []uint64{1, 2, 3}}}
		if cfg.ReplicaID != 1 {
			return
		}
		observeDropping(cfg, "g", &dropping, &mu, func(a testhook.Applied) {
			for _, e := range a.Events {
				if e.Kind == fsm.EventGranted || e.Kind == fsm.EventElected {
					late = append(late, fmt.Sprintf("%s token %d", e.Name, e.Token))
				}
			}
		})
	})
	ctx := testCtx(t)
	c.waitStatus(ctx, "every host runs g", func(_ uint64, st Status) bool { return len(st.Groups) == 2 && allLeaders(st) })

	holder := newSession(t, ctx, c.node(2))
	l, err := holder.Acquire(ctx, "x@g")
	require.NoError(t, err)
	lead, err := holder.Campaign(ctx, "e@g", "holder")
	require.NoError(t, err)

	// Two acquires queue behind x@g, from two other replicas, and a
	// candidacy behind e@g.
	w1, w2, w3 := newSession(t, ctx, c.node(3)), newSession(t, ctx, c.node(1)), newSession(t, ctx, c.node(3))
	a1 := acquireAsync(ctx, w1, "x@g")
	waitWaiters(t, ctx, c.node(1), "x@g", 1)
	a2 := acquireAsync(ctx, w2, "x@g")
	waitWaiters(t, ctx, c.node(1), "x@g", 2)
	cand := campaignAsync(ctx, w3, "e@g", "w3")
	waitUntil(t, ctx, "a candidate queues", func() bool {
		cs, err := c.node(1).Candidates(ctx, "e@g")
		return err == nil && cs.Total == 1
	})

	dropping.Store(true)
	require.NoError(t, c.node(1).DropGroup(ctx, "g", ForceDrop()))

	for i, ch := range []<-chan acquired{a1, a2} {
		got, ok := receiveWithin(ch, 20*time.Second)
		if !ok {
			t.Fatalf("queued acquire %d still waits after the drop", i+1)
		}
		requireDropped(t, fmt.Sprintf("queued acquire %d of x@g", i+1), got.l, got.err)
	}
	got, ok := receiveWithin(cand, 20*time.Second)
	if !ok {
		t.Fatal("the queued candidacy still waits after the drop")
	}
	requireDropped(t, "the queued candidacy for e@g", got.l, got.err)
	for what, done := range map[string]<-chan struct{}{"x@g": l.Done(), "e@g": lead.Done()} {
		if _, ok := receiveWithin(done, 20*time.Second); !ok {
			t.Fatalf("%s still held after the drop", what)
		}
	}
	require.True(t, errors.Is(l.Err(), ErrRevoked) || errors.Is(l.Err(), ErrGroupDropped), "%v", l.Err())
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, late, "grants applied in g once its drop began")
	for _, s := range []*Session{holder, w1, w2, w3} {
		require.NoError(t, s.Err(), "a session lives on: only its part in g ended")
	}
}

// Issue 48, item 6: a drop grants nothing, even in the moment between its
// first command in the dying group and the table's drop, and even if that
// drop never applies. Replica 1 drops g, which it runs with 2 and 3; the
// moment replica 1 applies the drop's first command in g, it is cut off
// from the others, so the table drop it would propose next never applies,
// while 2 and 3 keep the quorum of both groups. Then:
//   - the acquire that was queued in g ends with ErrGroupDropped at once,
//     not when (or if) the table drop applies;
//   - an acquire of a free lock of g, and a campaign, made after that
//     first command, end with ErrGroupDropped, granted nothing;
//   - no replica applies a grant in g after that first command.
func TestDropGrantsNothingInTheDyingGroup(t *testing.T) {
	var (
		dropping atomic.Bool
		cut      sync.Once
		cutDone  = make(chan struct{})
		mu       sync.Mutex
		began    = map[uint64]bool{} // replicas that applied the drop's first command in g
		late     []string            // grants in g applied after it
	)
	var net atomic.Pointer[transport.Network]
	isolate := func() {
		n := net.Load()
		n.Isolate(n.Addr(1))
		close(cutDone)
	}
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Groups = []GroupConfig{{Name: "g", Voters: []uint64{1, 2, 3}}}
		id := cfg.ReplicaID
		observeDropping(cfg, "g", &dropping, &mu, func(a testhook.Applied) {
			for _, e := range a.Events {
				if began[id] && (e.Kind == fsm.EventGranted || e.Kind == fsm.EventElected) {
					late = append(late, fmt.Sprintf("replica %d: %s token %d", id, e.Name, e.Token))
				}
			}
			for _, cmd := range a.Cmds {
				// The drop's first command in g: the seal, or (unsealed)
				// the cancel of the queued request.
				if cmd.Kind == fsm.KindSeal || cmd.Kind == fsm.KindCancel {
					began[id] = true
					if id == 1 {
						cut.Do(isolate) // before the drop's next step
					}
				}
			}
		})
	})
	net.Store(c.net)
	t.Cleanup(c.net.Heal) // before the cluster closes
	ctx := testCtx(t)
	c.waitStatus(ctx, "every host runs g", func(_ uint64, st Status) bool { return len(st.Groups) == 2 && allLeaders(st) })

	holder := newSession(t, ctx, c.node(2))
	_, err := holder.Acquire(ctx, "x@g")
	require.NoError(t, err)
	queued := newSession(t, ctx, c.node(3))
	waiting := acquireAsync(ctx, queued, "x@g")
	waitWaiters(t, ctx, c.node(2), "x@g", 1)

	dropping.Store(true)
	dropCtx, stopDrop := context.WithCancel(ctx)
	dropped := make(chan error, 1)
	go func() { dropped <- c.node(1).DropGroup(dropCtx, "g", ForceDrop()) }()
	t.Cleanup(func() { stopDrop(); <-dropped })
	select {
	case <-cutDone:
	case err := <-dropped:
		t.Fatalf("the drop ended before its first command in g applied on replica 1: %v", err)
	case <-ctx.Done():
		t.Fatal("the drop's first command in g never applied on replica 1")
	}

	if got, ok := receiveWithin(waiting, 15*time.Second); ok {
		requireDropped(t, "the queued acquire of x@g", got.l, got.err)
	} else {
		t.Error("the queued acquire still waits: the table drop never applied, and nothing else ends it")
	}

	late1 := newSession(t, ctx, c.node(3))
	lctx, stop := context.WithTimeout(ctx, 15*time.Second)
	defer stop()
	l, err := late1.Acquire(lctx, "y@g")
	requireDropped(t, "an acquire of y@g made after the drop began", l, err)
	lead, err := late1.Campaign(lctx, "e@g", "late")
	requireDropped(t, "a campaign for e@g made after the drop began", lead, err)

	mu.Lock()
	defer mu.Unlock()
	require.True(t, began[2] || began[3], "replicas 2 and 3 applied the drop's first command in g")
	require.Empty(t, late, "grants applied in g once its drop began")
	for _, s := range []*Session{holder, queued, late1} {
		require.NoError(t, s.Err(), "a session lives on: only its calls in g ended")
	}
}

// observeDropping calls f, under mu, with each batch of commands the
// replica started with cfg applies in group once dropping is set.
func observeDropping(cfg *Config, group string, dropping *atomic.Bool, mu *sync.Mutex, f func(testhook.Applied)) {
	testhook.ObserveApplied(cfg, func(a testhook.Applied) {
		if a.Group != group || !dropping.Load() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f(a)
	})
}

// receiveWithin returns what ch sends within d; ok is false if it sent
// nothing by then.
func receiveWithin[T any](ch <-chan T, d time.Duration) (v T, ok bool) {
	select {
	case v = <-ch:
		return v, true
	case <-time.After(d):
		return v, false
	}
}

// requireDropped checks how a call in a group being dropped (what) ended:
// with ErrGroupDropped, never with a grant of the dying group. granted is
// the call's *Lock or *Leadership, read only if err is nil.
func requireDropped(t *testing.T, what string, granted interface{ Token() uint64 }, err error) {
	t.Helper()
	if err == nil {
		t.Errorf("%s was granted in the dying group, token %d, and not told ErrGroupDropped", what, granted.Token())
		return
	}
	require.ErrorIs(t, err, ErrGroupDropped, what)
}

// viewLoops runs views (Inspect, Locks, Sessions) on n, and linearizable
// and local reads of group's replica (what the views and the sessions'
// watches call), in a loop from many goroutines, until the returned stop is
// called; stop returns every error they saw that is not one of allowed. ok
// counts the calls that succeeded, so that a test knows they are in flight.
//
// Dragonboat's race is between a read that reached the shard before it
// stopped and the destruction of its state machine after it stopped: many
// more goroutines than cores make it likely that one of them is preempted
// inside Dragonboat when the replica stops.
func viewLoops(ctx context.Context, n *Node, group string, allowed ...error) (ok *atomic.Int64, stop func() error) {
	name := "x@" + group
	r := n.host.Group(group)
	q := fsm.Query(func(st *fsm.State) any { return st.Lock(name) })
	ok = new(atomic.Int64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad error
	views := []func() error{
		func() error { _, err := n.Inspect(ctx, name); return err },
		func() error { _, err := n.Locks(ctx, ""); return err },
		func() error { _, err := n.Sessions(ctx); return err },
	}
	for range 8 {
		views = append(views, func() error { _, err := r.Read(ctx, q); return err })
	}
	for range 16 {
		views = append(views, func() error { _, err := r.StaleRead(q); return err })
	}
	for _, view := range views {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				err := view()
				if err == nil {
					ok.Add(1)
					continue
				}
				known := false
				for _, a := range allowed {
					known = known || errors.Is(err, a)
				}
				if !known {
					mu.Lock()
					bad = errors.Join(bad, err)
					mu.Unlock()
				}
				select {
				case <-done:
					return
				case <-time.After(time.Millisecond): // the node is closing: don't spin
				}
			}
		}()
	}
	return ok, func() error {
		close(done)
		wg.Wait()
		return bad
	}
}

// Views in flight while the node closes end with ErrClosed, and Close
// destroys no group's state machine under a read: Dragonboat's read of a
// shard's state machine and its destruction race (the race detector
// reports it) unless the replica lets every call in flight finish first.
func TestViewsDuringClose(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			c := newCluster(t, 1, withGroups(GroupConfig{Name: "a", Voters: []uint64{1}}))
			ctx := testCtx(t)
			c.waitStatus(ctx, "the node runs a", func(_ uint64, st Status) bool { return len(st.Groups) == 2 && allLeaders(st) })
			ok, stop := viewLoops(ctx, c.node(1), "a", ErrClosed)
			require.Eventually(t, func() bool { return ok.Load() >= 20 }, 20*time.Second, time.Millisecond)
			c.stop(1)
			require.NoError(t, stop())
		})
	}
}

// Views in flight on a group while DropGroup stops it end with the drop's
// errors, and the group's state machine is never destroyed under a read.
func TestViewsDuringDropGroup(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := testCtx(t)
	c.leader(ctx)
	n := c.node(1)
	for round := range 3 {
		require.NoError(t, n.CreateGroup(ctx, GroupConfig{Name: "a", Voters: []uint64{1}}), "round %d", round)
		require.Eventually(t, func() bool {
			_, err := n.Inspect(ctx, "x@a")
			return err == nil
		}, 20*time.Second, 5*time.Millisecond, "round %d", round)
		ok, stop := viewLoops(ctx, n, "a", ErrGroupDropped, ErrUnknownGroup)
		require.Eventually(t, func() bool { return ok.Load() >= 20 }, 20*time.Second, time.Millisecond)
		require.NoError(t, n.DropGroup(ctx, "a"), "round %d", round)
		require.NoError(t, stop(), "round %d", round)
	}
}
