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
)

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
