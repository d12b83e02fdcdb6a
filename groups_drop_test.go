package fencelock

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
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
