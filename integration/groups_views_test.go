package integration_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/transport"
)

// The views describe one group: the name's or the prefix's "@group", or
// the group passed by name; they show a holder by its session's ID
// (Session.ID) and its part's ID in that group (PartID, Session.IDIn);
// EndSessionIn ends one part, EndSession the whole session, whose node
// then closes its other parts at their groups.
func TestGroupsViews(t *testing.T) {
	c, ctx := newCluster(t, 3, withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}))
	waitStatus(t, ctx, c, "leaders, writing log version 10", func(_ uint64, st fencelock.Status) bool {
		return len(st.Groups) == 2 && allLeaders(st) && writesNewest(st)
	})
	n := c.Node(2)

	s, err := c.Node(1).NewSession(ctx)
	require.NoError(t, err)
	_, ok := s.IDIn("a")
	require.False(t, ok, "no part in a before a call names it")
	id, ok := s.IDIn("")
	require.True(t, ok)
	require.Equal(t, s.ID(), id)
	x, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	y, err := s.Acquire(ctx, "y@a")
	require.NoError(t, err)
	z, err := s.Acquire(ctx, "z@a")
	require.NoError(t, err)
	_, err = s.Campaign(ctx, "e@a", "v")
	require.NoError(t, err)
	idA, ok := s.IDIn("a")
	require.True(t, ok)

	// Inspect and Candidates: the name's group, the session's ID and the
	// part's there.
	info, err := n.Inspect(ctx, "y@a")
	require.NoError(t, err)
	require.Equal(t, s.ID(), info.SessionID)
	require.Equal(t, idA, info.PartID)
	require.Equal(t, []uint64{s.ID(), idA}, []uint64{info.Holders[0].SessionID, info.Holders[0].PartID})
	require.Equal(t, y.Token(), info.Token)
	info, err = n.Inspect(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, s.ID(), info.SessionID)
	require.Equal(t, s.ID(), info.PartID, "in the default group, the part is the session")
	cands, err := n.Candidates(ctx, "e@a")
	require.NoError(t, err)
	require.Equal(t, s.ID(), cands.Leader.SessionID)
	require.Equal(t, idA, cands.Leader.PartID)
	leader, err := n.Leader(ctx, "e@a")
	require.NoError(t, err)
	require.Equal(t, []uint64{s.ID(), idA}, []uint64{leader.SessionID, leader.PartID})

	// Locks: one group per page.
	names := func(p fencelock.LockPage) []string {
		return mapped(p.Locks, func(l fencelock.LockDetail) string { return l.Name })
	}
	page, err := n.Locks(ctx, "@a")
	require.NoError(t, err)
	require.Equal(t, "a", page.Group)
	require.Equal(t, []string{"y@a", "z@a"}, names(page))
	require.False(t, page.AllGroups)
	require.Equal(t, "a", page.Locks[0].Group)
	page, err = n.Locks(ctx, "z@a")
	require.NoError(t, err)
	require.Equal(t, []string{"z@a"}, names(page))
	// Without '@', every group, merged in name order, each lock with its
	// group; paging goes on across groups.
	page, err = n.Locks(ctx, "")
	require.NoError(t, err)
	require.True(t, page.AllGroups)
	require.Equal(t, []string{"x", "y@a", "z@a"}, names(page))
	require.Equal(t, []string{"", "a", "a"}, []string{page.Locks[0].Group, page.Locks[1].Group, page.Locks[2].Group})
	require.Equal(t, s.ID(), page.Locks[0].SessionID)
	require.Equal(t, s.ID(), page.Locks[1].SessionID, "a named group's lock: the session's ID")
	require.Equal(t, idA, page.Locks[1].PartID, "and the part's ID there")
	page, err = n.Locks(ctx, "", fencelock.ListLimit(2))
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y@a"}, names(page))
	require.True(t, page.More)
	page, err = n.Locks(ctx, "", fencelock.ListLimit(2), fencelock.ListAfter("y@a"))
	require.NoError(t, err)
	require.Equal(t, []string{"z@a"}, names(page))
	require.False(t, page.More)
	page, err = n.Locks(ctx, "z")
	require.NoError(t, err)
	require.Equal(t, []string{"z@a"}, names(page), "a prefix without '@' matches in every group")

	// Sessions: per group, each part under its session's ID and its own.
	ids := func(p fencelock.SessionPage) []uint64 {
		return mapped(p.Sessions, func(si fencelock.SessionInfo) uint64 { return si.ID })
	}
	parts := func(p fencelock.SessionPage) []uint64 {
		return mapped(p.Sessions, func(si fencelock.SessionInfo) uint64 { return si.PartID })
	}
	sp, err := n.SessionsIn(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "a", sp.Group)
	require.Equal(t, []uint64{s.ID()}, ids(sp))
	require.Equal(t, []uint64{idA}, parts(sp))
	require.Equal(t, 2, sp.Sessions[0].Held, "y@a and z@a (Held counts locks)")
	sp, err = n.Sessions(ctx)
	require.NoError(t, err)
	require.Equal(t, "", sp.Group)
	require.Equal(t, []uint64{s.ID()}, ids(sp))
	require.Equal(t, []uint64{s.ID()}, parts(sp))
	require.Equal(t, 1, sp.Sessions[0].Held)

	// Members: per group.
	m, err := n.MembersOf(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "a", m.Group)
	require.Len(t, m.Voters, 3)
	m, err = n.Members(ctx)
	require.NoError(t, err)
	require.Equal(t, "", m.Group)

	// Stats: one entry per group, named.
	st := n.Stats()
	require.Len(t, st.Groups, 2)
	require.Equal(t, "a", st.Groups[1].Name)

	// Unknown groups fail loudly everywhere.
	_, err = n.SessionsIn(ctx, "nope")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
	_, err = n.MembersOf(ctx, "nope")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
	_, err = n.Locks(ctx, "@nope")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
	require.ErrorIs(t, n.EndSessionIn(ctx, "nope", idA), fencelock.ErrUnknownGroup)
	_, err = n.Inspect(ctx, "y@nope")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)

	// EndSessionIn ends the part in a only.
	require.NoError(t, n.EndSessionIn(ctx, "a", idA))
	waitDone(t, ctx, y.Done(), "y@a")
	require.ErrorIs(t, y.Err(), fencelock.ErrRevoked)
	waitDone(t, ctx, z.Done(), "z@a")
	require.NoError(t, x.Err(), "the default part is untouched")
	require.NoError(t, s.Err())
	// The next call naming a opens a new part there.
	z, err = s.Acquire(ctx, "z@a")
	require.NoError(t, err)
	idA2, ok := s.IDIn("a")
	require.True(t, ok)
	require.NotEqual(t, idA, idA2)

	// EndSession of Session.ID ends the whole session, and its node closes
	// its part in a at a: z@a frees without waiting for a TTL.
	w := n.Watch(ctx, "z@a")
	require.NoError(t, n.EndSession(ctx, s.ID()))
	waitDone(t, ctx, s.Done(), "the session")
	require.ErrorIs(t, s.Err(), fencelock.ErrRevoked)
	require.ErrorIs(t, x.Err(), fencelock.ErrRevoked)
	waitDone(t, ctx, z.Done(), "z@a")
	for info := range w {
		if !info.Held {
			break
		}
	}
	require.NoError(t, ctx.Err(), "z@a freed at a")
	sp, err = n.SessionsIn(ctx, "a")
	require.NoError(t, err)
	require.False(t, slices.Contains(parts(sp), idA2), "the part in a is closed there")
}

func waitDone(t *testing.T, ctx context.Context, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%s: still held: %v", what, ctx.Err())
	}
}

// A resource is fenced by the locks of one group: once a grant of a keys
// it, grants of the deployment's other groups are refused there with
// ErrOtherGroup however large their tokens, by DoFence and by Claim with a
// grant context, and the resource's mark is unchanged.
func TestGroupsFenceOneGroup(t *testing.T) {
	c, ctx := newCluster(t, 3, withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}, fencelock.GroupConfig{Name: "b", Voters: []uint64{1, 2, 3}}))
	waitStatus(t, ctx, c, "leaders", func(_ uint64, st fencelock.Status) bool { return len(st.Groups) == 3 && allLeaders(st) })
	s, err := c.Node(1).NewSession(ctx)
	require.NoError(t, err)
	la, err := s.Acquire(ctx, "orders@a")
	require.NoError(t, err)
	fences := fencelock.NewFencer()
	require.NoError(t, fences.Claim(la.Context(ctx), "db/orders", la.Token()))
	ga, _ := group(c.Node(1).Status(), "a")
	require.Equal(t, ga.GroupID, fences.Group("db/orders"), "the claim keyed the resource to a")

	// Grants of the default group and of b, taken after la's (so that
	// their tokens could pass for later ones if groups were not checked).
	for _, name := range []string{"orders", "orders@b"} {
		// Push the other group's token past la's, so that only the group
		// check can refuse it.
		var l *fencelock.Lock
		for l == nil || l.Token() <= la.Token() {
			if l != nil {
				require.NoError(t, l.Release(ctx))
			}
			l, err = s.Acquire(ctx, name)
			require.NoError(t, err)
		}
		wrote := false
		err = fences.DoFence("db/orders", l.Fence(), func() error { wrote = true; return nil })
		require.ErrorIs(t, err, fencelock.ErrOtherGroup, "%s's grant at a's resource", name)
		require.False(t, wrote)
		err = fences.Claim(l.Context(ctx), "db/orders", l.Token())
		require.ErrorIs(t, err, fencelock.ErrOtherGroup, "%s's claim at a's resource", name)
		require.Equal(t, la.Token(), fences.Highest("db/orders"), "the mark is a's")
	}
	// a's own holder still writes.
	require.NoError(t, fences.DoFence("db/orders", la.Fence(), func() error { return nil }))
}

// A part's ID in a named group is drawn from that group's log, and the
// default group's session IDs from its own: the same number can name a
// holder's part in group a and an unrelated session of the default group.
// The test makes that happen (sessions opened one by one in the default
// group fill its range of IDs, and parts are opened in a until one lands
// on such an ID), then requires every view to name the holder by its own
// session's ID, with the part's ID apart, and EndSession of the ID a view
// shows to end the holder, not the bystander whose ID the part's equals.
func TestGroupsViewsNameTheSession(t *testing.T) {
	c, ctx := newCluster(t, 1, withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1}}))
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
	c, ctx := newCluster(t, 3, fencelocktest.WithConfig(func(cfg *fencelock.Config) {
		cfg.Groups = []fencelock.GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
	}))
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
	c, ctx := newCluster(t, 3, fencelocktest.WithNetwork(net), fencelocktest.WithConfig(func(cfg *fencelock.Config) {
		cfg.Groups = []fencelock.GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
	}))
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
