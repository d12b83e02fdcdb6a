package integration_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Seven named groups (and the default one) on three replicas: within 10 s
// each replica leads at most ⌈8/3⌉ = 3 of them, and again after one
// replica restarts.
func TestGroupsLeadersSpread(t *testing.T) {
	var groups []fencelock.GroupConfig
	for i := range 7 {
		groups = append(groups, fencelock.GroupConfig{Name: fmt.Sprintf("g%d", i), Voters: []uint64{1, 2, 3}})
	}
	c := fencelocktest.NewCluster(t, 3, withGroups(groups...))
	spread := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		waitStatus(t, ctx, c, what, func(_ uint64, _ fencelock.Status) bool {
			led := map[uint64]int{}
			for _, n := range running(c) {
				st := n.Status()
				if len(st.Groups) != 8 || !allLeaders(st) {
					return false
				}
				for _, g := range st.Groups {
					if g.IsLeader {
						led[st.ReplicaID]++
					}
				}
			}
			total := 0
			for _, k := range led {
				if k > 3 {
					return false
				}
				total += k
			}
			return total == 8
		})
		t.Logf("%s: leaders spread in %v", what, time.Since(start).Round(time.Millisecond))
	}
	spread("after start")
	c.Stop(2)
	c.Restart(2)
	spread("after replica 2 restarted")
}

// Issue 24's "Done when", through the public API on a transport.Network:
// five replicas, groups a (voters 1,2,3) and b (3,4,5). One session spans
// the groups; a group that loses its quorum ends only the grants held
// there; the other groups keep granting; the group comes back under its ID.
func TestGroupsDoneWhen(t *testing.T) {
	const ttl = 2 * time.Second
	c, ctx := newCluster(t, 5, withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}, fencelock.GroupConfig{Name: "b", Voters: []uint64{3, 4, 5}}))
	waitStatus(t, ctx, c, "every host runs every group", func(_ uint64, st fencelock.Status) bool {
		return len(st.Groups) == 3 && allLeaders(st)
	})
	ids := map[string]uint64{}
	for _, g := range c.Node(1).Status().Groups {
		ids[g.Name] = g.GroupID
	}

	// A session on replica 1 holds a lock in each group, each fenced by
	// its own group.
	s1, err := c.Node(1).NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	seen := map[uint64]string{}
	for _, name := range []string{"x@a", "y@b", "z"} {
		l, err := s1.Acquire(ctx, name)
		require.NoError(t, err, name)
		_, g, _ := fencelock.SplitName(name)
		require.Equal(t, ids[g], l.Fence().Group, "%s is fenced by group %q", name, g)
		require.NotContains(t, seen, l.Fence().Group, "%s and %s share a group", name, seen[l.Fence().Group])
		seen[l.Fence().Group] = name
	}
	_, err = s1.Acquire(ctx, "q@nope")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
	require.NoError(t, s1.Err(), "a refused name ends nothing")

	// A session on replica 3 (a voter of both) holds j@a and k@b.
	s3, err := c.Node(3).NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	j, err := s3.Acquire(ctx, "j@a")
	require.NoError(t, err)
	k, err := s3.Acquire(ctx, "k@b")
	require.NoError(t, err)

	// Stopping 1 and 2 takes a's quorum: j@a's Done closes by the holder's
	// clock, within its TTL (bounded generously for a loaded machine).
	c.Stop(1)
	c.Stop(2)
	stopped := time.Now()
	select {
	case <-j.Done():
		t.Logf("j@a lost %v after a lost its quorum", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(5 * ttl):
		t.Fatalf("j@a still held %v after a lost its quorum", 5*ttl)
	}
	require.ErrorIs(t, j.Err(), fencelock.ErrSessionExpired)

	// k@b is untouched: after more than a TTL without a, it is held by its
	// holder's view and by group b's.
	select {
	case <-k.Done():
		t.Fatalf("k@b ended with a's quorum: %v", k.Err())
	case <-time.After(ttl + ttl/2):
	}
	require.NoError(t, k.Err())
	require.NoError(t, s3.Err(), "the session as a whole lives on")
	info, err := c.Node(4).Inspect(ctx, "k@b")
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, k.Token(), info.Token, "b still holds k@b for its holder")
	select {
	case <-k.Done():
		t.Fatalf("k@b ended: %v", k.Err())
	default:
	}

	// A session on replica 4 takes w@b while a has no quorum ...
	s4, err := c.Node(4).NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	w, err := s4.Acquire(ctx, "w@b")
	require.NoError(t, err)
	require.Equal(t, ids["b"], w.Fence().Group)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = s4.TryAcquire(short, "v@a")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable, "a has no quorum")

	// ... and v@a once 1 and 2 are back, under a's group ID.
	c.Restart(1)
	c.Restart(2)
	v, err := s4.Acquire(ctx, "v@a")
	require.NoError(t, err)
	require.Equal(t, ids["a"], v.Fence().Group, "a came back under its group ID")
	require.NoError(t, w.Err())
	require.NoError(t, k.Err())
}

// DropGroup refuses a group that holds a lock; with ForceDrop it revokes
// the locks first (their holders see ErrRevoked), every replica stops the
// group, and a group created again under the name is a new group.
func TestDropGroupOnline(t *testing.T) {
	c, ctx := newCluster(t, 3, withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}))
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
	l2 := tryAcquireSoon(t, ctx, s, "x@a", "%v", err)
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
	c, ctx := newCluster(t, 3)
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
		l := tryAcquireSoon(t, ctx, s, "job@billing", "replica %d: %v", id, err)
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

// With only the default group configured, every call that takes a lock or
// election name refuses a name that names another group, loudly: nothing
// is queued, held or read in the default group instead.
func TestUnknownGroupFailsEveryCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := fencelocktest.NewCluster(t, 1)
	n := c.Node(1)
	s := newSession(t, ctx, n)
	for _, name := range []string{"x@nope", "x@", "x@Billing", "a@b@nope"} {
		calls := map[string]error{}
		_, calls["Acquire"] = s.Acquire(ctx, name)
		_, calls["TryAcquire"] = s.TryAcquire(ctx, name)
		_, calls["AcquireShared"] = s.AcquireShared(ctx, name)
		_, calls["TryAcquireShared"] = s.TryAcquireShared(ctx, name)
		_, calls["AcquireSemaphore"] = s.AcquireSemaphore(ctx, name, 2)
		_, calls["TryAcquireSemaphore"] = s.TryAcquireSemaphore(ctx, name, 2)
		_, calls["Campaign"] = s.Campaign(ctx, name, "v")
		_, calls["TryCampaign"] = s.TryCampaign(ctx, name, "v")
		_, calls["Leader"] = n.Leader(ctx, name)
		_, calls["Inspect"] = n.Inspect(ctx, name)
		_, calls["Candidates"] = n.Candidates(ctx, name)
		calls["Revoke"] = n.Revoke(ctx, name)
		calls["RevokeGrant"] = n.RevokeGrant(ctx, name, 1)
		calls["RevokeLeadership"] = n.RevokeLeadership(ctx, name)
		_, calls["Locks"] = n.Locks(ctx, name)
		_, calls["Elections"] = n.Elections(ctx, name)
		calls["RunElection"] = n.RunElection(ctx, name, "v", fencelock.ElectionCallbacks{
			OnStartedLeading: func(context.Context, *fencelock.Leadership) { t.Error("led an election in an unknown group") },
		})
		obs := <-n.Observe(ctx, name)
		calls["Observe"] = obs.Err
		w := <-n.Watch(ctx, name)
		calls["Watch"] = w.Err
		for call, err := range calls {
			require.ErrorIs(t, err, fencelock.ErrUnknownGroup, "%s(%q)", call, name)
		}
	}
	page, err := n.Locks(ctx, "")
	require.NoError(t, err)
	require.Empty(t, page.Locks, "nothing was taken in the default group instead")
	require.Empty(t, s.Locks())
	require.Empty(t, s.Leaderships())
	require.NoError(t, s.Err())

	// A name without '@' is the default group's, as always.
	l, err := s.Acquire(ctx, "plain")
	require.NoError(t, err)
	require.Equal(t, n.Status().GroupID, l.Fence().Group)
	require.NoError(t, l.Release(ctx))
}

// A call that names a group this replica does not run reads the group
// table first. That read ends with the caller's context, not with a bound
// of its own (the lookup's 5 s): a call its caller gives up returns at once
// with ErrUnavailable and the context's error, as every call's contract
// says, even on a replica cut off from the table's quorum.
func TestGroupLookupEndsWithTheCallersContext(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cut := c.Leader(ctx)%3 + 1
	c.Isolate(cut)

	call, giveUp := context.WithCancel(ctx)
	defer giveUp()
	gaveUp := time.AfterFunc(200*time.Millisecond, giveUp) // the caller gives up while the table read waits
	defer gaveUp.Stop()
	_, err := c.Node(cut).Inspect(call, "x@nosuch")
	require.ErrorIs(t, err, context.Canceled, "the lookup outlived its caller: %v", err)
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
}

// tryAcquireSoon returns s's grant of name once a TryAcquire of it
// succeeds, within 20 s, each try bounded by 5 s: a group just made takes a
// moment to grant on every replica. msgAndArgs say what failed.
func tryAcquireSoon(t *testing.T, ctx context.Context, s *fencelock.Session, name string, msgAndArgs ...any) *fencelock.Lock {
	t.Helper()
	var l *fencelock.Lock
	require.Eventually(t, func() bool {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		l, err = s.TryAcquire(actx, name)
		return err == nil
	}, 20*time.Second, 20*time.Millisecond, msgAndArgs...)
	return l
}
