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
		testhook.ObserveApplied(cfg, func(a testhook.Applied) {
			if a.Group != "g" || !dropping.Load() {
				return
			}
			mu.Lock()
			defer mu.Unlock()
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
		select {
		case got := <-ch:
			if got.err == nil {
				t.Errorf("queued acquire %d was granted x@g in the dying group, token %d, and not told ErrGroupDropped", i+1, got.l.Token())
				continue
			}
			require.ErrorIs(t, got.err, ErrGroupDropped, "queued acquire %d", i+1)
		case <-time.After(20 * time.Second):
			t.Fatalf("queued acquire %d still waits after the drop", i+1)
		}
	}
	select {
	case got := <-cand:
		if got.err == nil {
			t.Errorf("the queued candidate was elected in the dying group, term %d, and not told ErrGroupDropped", got.l.Token())
		} else {
			require.ErrorIs(t, got.err, ErrGroupDropped, "the queued candidacy")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the queued candidacy still waits after the drop")
	}
	for what, done := range map[string]<-chan struct{}{"x@g": l.Done(), "e@g": lead.Done()} {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
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
		testhook.ObserveApplied(cfg, func(a testhook.Applied) {
			if a.Group != "g" || !dropping.Load() {
				return
			}
			mu.Lock()
			defer mu.Unlock()
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

	select {
	case got := <-waiting:
		if got.err == nil {
			t.Errorf("the queued acquire was granted x@g in the dying group, token %d", got.l.Token())
		} else {
			require.ErrorIs(t, got.err, ErrGroupDropped, "the queued acquire")
		}
	case <-time.After(15 * time.Second):
		t.Error("the queued acquire still waits: the table drop never applied, and nothing else ends it")
	}

	late1 := newSession(t, ctx, c.node(3))
	lctx, stop := context.WithTimeout(ctx, 15*time.Second)
	defer stop()
	l, err := late1.Acquire(lctx, "y@g")
	if err == nil {
		t.Errorf("an acquire made after the drop began was granted y@g in the dying group, token %d", l.Token())
	} else {
		require.ErrorIs(t, err, ErrGroupDropped, "an acquire made after the drop began")
	}
	lead, err := late1.Campaign(lctx, "e@g", "late")
	if err == nil {
		t.Errorf("a campaign made after the drop began was elected in the dying group, term %d", lead.Token())
	} else {
		require.ErrorIs(t, err, ErrGroupDropped, "a campaign made after the drop began")
	}

	mu.Lock()
	defer mu.Unlock()
	require.True(t, began[2] || began[3], "replicas 2 and 3 applied the drop's first command in g")
	require.Empty(t, late, "grants applied in g once its drop began")
	for _, s := range []*Session{holder, queued, late1} {
		require.NoError(t, s.Err(), "a session lives on: only its calls in g ended")
	}
}
