package integration_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// DropGroup refuses a group that holds a lock; with ForceDrop it revokes
// the locks first (their holders see ErrRevoked), every replica stops the
// group, and a group created again under the name is a new group.
func TestDropGroupOnline(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithConfig(withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}})))
	ctx := testCtx(t)
	waitStatus(t, ctx, c, "every host runs a", func(_ uint64, st fencelock.Status) bool { return len(st.Groups) == 2 && allLeaders(st) })
	s, err := c.Node(2).NewSession(ctx)
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "x@a")
	require.NoError(t, err)
	old := l.Fence().Group

	require.ErrorIs(t, c.Node(1).DropGroup(ctx, "a"), fencelock.ErrGroupHoldsLocks)
	require.NoError(t, l.Err(), "a refused drop changes nothing")
	require.NoError(t, c.Node(1).DropGroup(ctx, "a", fencelock.ForceDrop()))
	select {
	case <-l.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the lock of a dropped group still held")
	}
	require.True(t, errors.Is(l.Err(), fencelock.ErrRevoked) || errors.Is(l.Err(), fencelock.ErrGroupDropped), "%v", l.Err())
	require.NoError(t, s.Err(), "the session lives on: only its part in a ended")
	waitStatus(t, ctx, c, "no replica runs a", func(_ uint64, st fencelock.Status) bool { return len(st.Groups) == 1 })
	_, err = s.TryAcquire(ctx, "x@a")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)

	require.NoError(t, c.Node(3).CreateGroup(ctx, fencelock.GroupConfig{Name: "a", Voters: []uint64{1}}))
	var l2 *fencelock.Lock
	require.Eventually(t, func() bool {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		l2, err = s.TryAcquire(actx, "x@a")
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, "%v", err)
	require.NotEqual(t, old, l2.Fence().Group, "a new group, with a new group ID")
	groups, err := c.Node(1).Groups(ctx)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, []uint64{1}, groups[0].Voters)
	require.NotEqual(t, uint64(0), groups[0].ShardID)
	require.False(t, slices.Contains([]uint64{0, 1}, groups[0].ShardID))
}

// Issue 36's "Done when": a group is added to a running three-replica
// deployment by one call, with no restart; it grants within seconds on
// every replica; and readiness never waits for it, not even when its voters
// cannot elect a leader.
func TestCreateGroupOnline(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	c.Leader(ctx)

	// Ready polled throughout on 1 and 2 (3 is stopped later): it must
	// never fail for a new group.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var readyErr error
	var readyMu sync.Mutex
	for id := uint64(1); id <= 2; id++ {
		n := c.Node(id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := n.Ready(rctx)
				cancel()
				if err != nil {
					readyMu.Lock()
					readyErr = errors.Join(readyErr, err)
					readyMu.Unlock()
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	start := time.Now()
	require.NoError(t, c.Node(1).CreateGroup(ctx, fencelock.GroupConfig{Name: "billing", Voters: []uint64{1, 2, 3}}))
	require.True(t, reaches(c.Node(1).Status(), "billing"), "the caller's replica runs the group when CreateGroup returns")
	// Every replica grants in the new group within seconds.
	for id := uint64(1); id <= 3; id++ {
		s, err := c.Node(id).NewSession(ctx)
		require.NoError(t, err)
		var l *fencelock.Lock
		require.Eventually(t, func() bool {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			l, err = s.TryAcquire(actx, "job@billing")
			return err == nil
		}, 20*time.Second, 20*time.Millisecond, "replica %d: %v", id, err)
		require.NoError(t, l.Release(ctx))
		require.NoError(t, s.Close(ctx))
	}
	t.Logf("the new group granted on every replica %v after the call", time.Since(start).Round(time.Millisecond))
	groups, err := c.Node(2).Groups(ctx)
	require.NoError(t, err)
	require.Len(t, groups, 1)
	require.Equal(t, "billing", groups[0].Name)
	require.Equal(t, []uint64{1, 2, 3}, groups[0].Voters)

	// A group whose only voter is down never elects a leader: readiness
	// does not wait for it either.
	c.Stop(3)
	require.NoError(t, c.Node(1).CreateGroup(ctx, fencelock.GroupConfig{Name: "stuck", Voters: []uint64{3}}))
	time.Sleep(time.Second) // several readiness polls with "stuck" leaderless
	readyMu.Lock()
	require.NoError(t, readyErr, "readiness never failed")
	readyMu.Unlock()

	// Refusals.
	require.ErrorIs(t, c.Node(1).CreateGroup(ctx, fencelock.GroupConfig{Name: "billing", Voters: []uint64{1}}), fencelock.ErrGroupExists)
	require.ErrorIs(t, c.Node(1).CreateGroup(ctx, fencelock.GroupConfig{Name: "Bad", Voters: []uint64{1}}), fencelock.ErrInvalidGroupName)
	for _, voters := range [][]uint64{nil, {1, 2}, {1, 1, 2}, {1, 2, 9}, {0}} {
		require.ErrorIs(t, c.Node(1).CreateGroup(ctx, fencelock.GroupConfig{Name: "other", Voters: voters}), fencelock.ErrInvalidVoters, "%v", voters)
	}
	require.ErrorIs(t, c.Node(1).SetVoters(ctx, "nope", []uint64{1}), fencelock.ErrUnknownGroup)
	require.ErrorIs(t, c.Node(1).DropGroup(ctx, "nope"), fencelock.ErrUnknownGroup)
	groups, err = c.Node(1).Groups(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"billing", "stuck"}, []string{groups[0].Name, groups[1].Name})
}

// reaches reports whether the replica whose Status st is runs group name,
// or keeps a mirror of it.
func reaches(st fencelock.Status, name string) bool {
	for _, g := range append(st.Groups, st.Mirrors...) {
		if g.Name == name {
			return true
		}
	}
	return false
}
