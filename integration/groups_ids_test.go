package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/transport"
)

// A part's ID in a named group is drawn from that group's log, and the
// default group's session IDs from its own: the same number can name a
// holder's part in group a and an unrelated session of the default group.
// The test makes that happen (sessions opened one by one in the default
// group fill its range of IDs, and parts are opened in a until one lands
// on such an ID), then requires every view to name the holder by its own
// session's ID, with the part's ID apart, and EndSession of the ID a view
// shows to end the holder, not the bystander whose ID the part's equals.
func TestGroupsViewsNameTheSession(t *testing.T) {
	c := fencelocktest.NewCluster(t, 1, fencelocktest.WithConfig(withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1}})))
	ctx := testCtx(t)
	waitStatus(t, ctx, c, "writing log version 10", func(_ uint64, st fencelock.Status) bool {
		return len(st.Groups) == 2 && allLeaders(st) && writesNewest(st)
	})
	n := c.Node(1)

	byID := map[uint64]*fencelock.Session{}
	for range 60 {
		s := newSession(t, ctx, n)
		byID[s.ID()] = s
	}
	var holder, bystander *fencelock.Session
	var part uint64
	for i := 0; holder == nil; i++ {
		require.Less(t, i, 400, "no part of group a landed on a default-group session's ID")
		s := newSession(t, ctx, n)
		byID[s.ID()] = s
		_, err := s.Acquire(ctx, "held@a")
		require.NoError(t, err)
		id, ok := s.IDIn("a")
		require.True(t, ok)
		if b := byID[id]; b != nil && b != s {
			holder, bystander, part = s, b, id
			break
		}
		require.NoError(t, s.Close(ctx)) // frees held@a for the next
	}
	require.Equal(t, part, bystander.ID(), "the holder's part in a has the bystander's ID")
	require.NotEqual(t, holder.ID(), bystander.ID())

	info, err := n.Inspect(ctx, "held@a")
	require.NoError(t, err)
	require.Equal(t, holder.ID(), info.SessionID, "the holder's session, not the bystander")
	require.Equal(t, part, info.PartID)
	require.Equal(t, holder.ID(), info.Holders[0].SessionID)
	require.Equal(t, part, info.Holders[0].PartID)

	// A waiter in a, and the listings, likewise.
	waiter := newSession(t, ctx, n)
	waiting := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(ctx, "held@a")
		waiting <- err
	}()
	require.Eventually(t, func() bool {
		info, err = n.Inspect(ctx, "held@a")
		return err == nil && len(info.Waiting) == 1
	}, 20*time.Second, 10*time.Millisecond)
	waiterPart, ok := waiter.IDIn("a")
	require.True(t, ok)
	require.Equal(t, []uint64{waiter.ID()}, info.Queue)
	require.Equal(t, waiter.ID(), info.Waiting[0].SessionID)
	require.Equal(t, waiterPart, info.Waiting[0].PartID)
	page, err := n.Locks(ctx, "held@a")
	require.NoError(t, err)
	require.Len(t, page.Locks, 1)
	require.Equal(t, []uint64{holder.ID(), part}, []uint64{page.Locks[0].SessionID, page.Locks[0].PartID})
	require.Equal(t, []uint64{waiter.ID()}, page.Locks[0].Queue)
	sp, err := n.SessionsIn(ctx, "a")
	require.NoError(t, err)
	found := false
	for _, si := range sp.Sessions {
		if si.PartID == part {
			require.Equal(t, holder.ID(), si.ID)
			found = true
		}
	}
	require.True(t, found, "the holder's part is listed in a")

	// EndSession of the ID the view shows ends the holder, and only it.
	require.NoError(t, n.EndSession(ctx, info.SessionID))
	waitDone(t, ctx, holder.Done(), "the holder")
	require.NoError(t, <-waiting, "the waiter is granted once the holder's part is closed")
	require.NoError(t, bystander.Err(), "the bystander lives on")
	require.NoError(t, bystander.KeepAlive(ctx), "and its group still knows it")
}

// writesNewest reports whether st's groups all write what this build
// reads: from then on, a part opened in a named group records its
// session's ID there.
func writesNewest(st fencelock.Status) bool {
	v := fencelock.BuildVersion()
	want := fencelock.Formats{Codec: v.Codec, Snapshot: v.Snapshot}
	if st.Writes != want {
		return false
	}
	for _, g := range st.Groups {
		if g.Writes != want {
			return false
		}
	}
	return true
}

// An observer of a named group's election names each leader by its
// session, whether it learnt of the leader from its first read or from the
// events that follow (those carried the part's ID only, so a change showed
// SessionID 0 where a read showed the session).
func TestObserveNamedGroupNamesTheSession(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithConfig(func(cfg *fencelock.Config) {
		cfg.Groups = []fencelock.GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
	}))
	ctx := testCtx(t)
	waitStatus(t, ctx, c, "every group writes the newest formats", func(_ uint64, st fencelock.Status) bool {
		return len(st.Groups) == 2 && allLeaders(st) && writesNewest(st)
	})
	s1, s2 := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	first := campaign(t, ctx, s1, "e@a", "one")
	ch := c.Node(3).Observe(ctx, "e@a")
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	observeUntil(t, octx, ch, infoOf(first))
	got := campaignAsync(ctx, s2, "e@a", "two")
	waitUntil(t, ctx, "the second candidate queues", func() bool {
		cs, err := c.Node(1).Candidates(ctx, "e@a")
		require.NoError(t, err)
		return cs.Total == 1
	})
	require.NoError(t, first.Resign(ctx))
	r := <-got
	require.NoError(t, r.err)
	want := infoOf(r.l)
	require.Equal(t, s2.ID(), want.SessionID)
	observeUntil(t, octx, ch, want)
}

// A part opened right after a deployment starts, before its group's leader
// has heard every member announce log version 10 (replica 3 is cut off
// from the start: not heard from, not known to read less), waits for the
// raise instead of being written without its session, and then names it.
func TestPartOpenedBeforeTheRaiseNamesItsSession(t *testing.T) {
	net := transport.NewNetwork(3)
	net.Isolate(net.Addr(3))
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithNetwork(net), fencelocktest.WithConfig(func(cfg *fencelock.Config) {
		cfg.Groups = []fencelock.GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
	}))
	ctx := testCtx(t)
	n := c.Node(1)
	require.Eventually(t, func() bool {
		st := n.Status()
		g, ok := group(st, "a")
		return ok && allLeaders(st) && g.Writes.Codec < fencelock.BuildVersion().Codec
	}, 30*time.Second, 10*time.Millisecond, "a has a leader, and writes an older version while 3 is unheard")
	s := newSession(t, ctx, n)
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "x@a")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the part was opened before its group could record its session (err %v)", err)
	case <-time.After(time.Second): // still waiting for the raise: no member is known to read less
	}
	net.Heal()
	require.NoError(t, <-done)
	info, err := n.Inspect(ctx, "x@a")
	require.NoError(t, err)
	require.Equal(t, s.ID(), info.SessionID, "the part was written with its session")
	part, ok := s.IDIn("a")
	require.True(t, ok)
	require.Equal(t, part, info.PartID)
}
