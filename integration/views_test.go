package integration_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// A lock held by a session named reindex@worker-3 shows that name, and
// when it was granted, in Inspect and Locks, seen from another replica; its
// waiters show theirs with their places; Sessions names every session; a
// session opened without a name is named after this process.
func TestSessionNamesInViews(t *testing.T) {
	c, ctx := newCluster(t, 3)
	before := time.Now()
	holder := newSession(t, ctx, c.Node(1), fencelock.WithSessionName("reindex@worker-3"))
	l, err := holder.Acquire(ctx, "jobs/reindex")
	require.NoError(t, err)
	after := time.Now()
	waiter := newSession(t, ctx, c.Node(2), fencelock.WithSessionName("backfill@worker-7"))
	res := acquireAsync(ctx, waiter, "jobs/reindex")
	waitWaiters(t, ctx, c.Node(3), "jobs/reindex", 1)
	anon := newSession(t, ctx, c.Node(3))

	info, err := c.Node(3).Inspect(ctx, "jobs/reindex")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	h := info.Holders[0]
	require.Equal(t, "reindex@worker-3", h.Name)
	require.Equal(t, "reindex@worker-3", info.SessionName)
	require.Equal(t, l.Token(), h.Token)
	// The grant time is the proposer's clock at the acquire: this process's.
	require.False(t, h.GrantedAt.Before(before.Truncate(time.Nanosecond)), "granted at %v, before the acquire began at %v", h.GrantedAt, before)
	require.False(t, h.GrantedAt.After(after), "granted at %v, after the acquire returned at %v", h.GrantedAt, after)
	require.True(t, info.GrantedAt.Equal(h.GrantedAt))
	require.Greater(t, h.HeldFor(time.Now()), time.Duration(0))
	require.Zero(t, fencelock.Holder{}.HeldFor(time.Now()), "an unknown grant time is no hold time")
	require.Len(t, info.Waiting, 1)
	require.Equal(t, fencelock.Waiter{SessionID: waiter.ID(), PartID: waiter.ID(), Name: "backfill@worker-7", Owner: 2, Place: 1,
		QueuedAt: info.Waiting[0].QueuedAt}, info.Waiting[0])
	require.False(t, info.Waiting[0].QueuedAt.Before(h.GrantedAt), "it queued after the grant")

	page, err := c.Node(2).Locks(ctx, "jobs/")
	require.NoError(t, err)
	require.Len(t, page.Locks, 1)
	require.Equal(t, "reindex@worker-3", page.Locks[0].Holders[0].Name)
	require.True(t, page.Locks[0].Holders[0].GrantedAt.Equal(h.GrantedAt))
	require.Equal(t, "backfill@worker-7", page.Locks[0].Waiting[0].Name)

	sp, err := c.Node(1).Sessions(ctx)
	require.NoError(t, err)
	names := map[uint64]string{}
	for _, s := range sp.Sessions {
		names[s.ID] = s.Name
	}
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Equal(t, map[uint64]string{holder.ID(): "reindex@worker-3", waiter.ID(): "backfill@worker-7",
		anon.ID(): fmt.Sprintf("%s:%d", host, os.Getpid())}, names)

	require.NoError(t, l.Release(ctx))
	got := <-res
	require.NoError(t, got.err)
	info, err = c.Node(1).Inspect(ctx, "jobs/reindex")
	require.NoError(t, err)
	require.Equal(t, "backfill@worker-7", info.Holders[0].Name, "the lock passed on, and so did the name shown")
	require.False(t, info.Holders[0].GrantedAt.Before(h.GrantedAt))
}

// A bad session name is refused before anything is proposed: no session
// is opened at the group.
func TestInvalidSessionName(t *testing.T) {
	c, ctx := newCluster(t, 1)
	for _, name := range []string{strings.Repeat("x", fencelock.MaxSessionNameLen+1), "a\x00b", "\xff"} {
		_, err := c.Node(1).NewSession(ctx, fencelock.WithSessionName(name))
		require.ErrorIs(t, err, fencelock.ErrInvalidSessionName, "%q", name)
	}
	sp, err := c.Node(1).Sessions(ctx)
	require.NoError(t, err)
	require.Empty(t, sp.Sessions)
	s := newSession(t, ctx, c.Node(1), fencelock.WithSessionName(strings.Repeat("é", fencelock.MaxSessionNameLen/2)))
	sp, err = c.Node(1).Sessions(ctx)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("é", fencelock.MaxSessionNameLen/2), sp.Sessions[0].Name, "the longest name fits")
	require.Equal(t, s.ID(), sp.Sessions[0].ID)
}

// Contended lists the locks with the longest queues, longest first, ties
// by name, with their holders' names; a lock nobody waits for is left out.
func TestContended(t *testing.T) {
	c, ctx := newCluster(t, 3)
	holder := newSession(t, ctx, c.Node(1), fencelock.WithSessionName("holder"))
	for _, name := range []string{"a", "b", "c", "quiet"} {
		_, err := holder.Acquire(ctx, name)
		require.NoError(t, err)
	}
	queue := map[string]int{"a": 1, "b": 3, "c": 1}
	for name, n := range queue {
		for i := range n {
			s := newSession(t, ctx, c.Node(uint64(i%3+1)), fencelock.WithSessionName(fmt.Sprintf("w%d", i)))
			acquireAsync(ctx, s, name)
			waitWaiters(t, ctx, c.Node(1), name, i+1)
		}
	}
	got, err := c.Node(2).Contended(ctx, 10)
	require.NoError(t, err)
	var order []string
	for _, l := range got {
		order = append(order, fmt.Sprintf("%s:%d", l.Name, l.Waiters))
		require.Equal(t, "holder", l.Holders[0].Name)
		require.False(t, l.GrantedAt.IsZero())
		require.Len(t, l.Waiting, l.Waiters)
		require.Equal(t, "w0", l.Waiting[0].Name, "the head of the queue, by name")
	}
	require.Equal(t, []string{"b:3", "a:1", "c:1"}, order)
	got, err = c.Node(3).Contended(ctx, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)
	require.Equal(t, "a", got[1].Name)
	for _, n := range []int{0, fencelock.MaxContended + 1} {
		_, err = c.Node(1).Contended(ctx, n)
		require.ErrorIs(t, err, fencelock.ErrInvalidConfig)
	}
	_, err = c.Node(1).ContendedIn(ctx, "nosuch", 1)
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
}

// Elections lists the elections with a leader or candidates, page by page,
// with the leaders' names and terms; Candidates names the queue.
func TestElectionsListing(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s1 := newSession(t, ctx, c.Node(1), fencelock.WithSessionName("primary@db-1"))
	s2 := newSession(t, ctx, c.Node(2), fencelock.WithSessionName("standby@db-2"))
	tokens := map[string]uint64{}
	for _, name := range []string{"orders/primary", "orders/replica", "payments/primary"} {
		lead, err := s1.Campaign(ctx, name, "v-"+name)
		require.NoError(t, err)
		tokens[name] = lead.Token()
	}
	go func() { _, _ = s2.Campaign(ctx, "orders/primary", "v2") }()
	waitUntil(t, ctx, "the candidate queued", func() bool {
		cs, err := c.Node(3).Candidates(ctx, "orders/primary")
		return err == nil && cs.Total == 1
	})

	var names []string
	var opts []fencelock.ListOption
	for pages := 1; ; pages++ {
		page, err := c.Node(3).Elections(ctx, "orders/", append(opts, fencelock.ListLimit(1))...)
		require.NoError(t, err)
		require.Len(t, page.Elections, 1)
		e := page.Elections[0]
		names = append(names, e.Election)
		require.Equal(t, "primary@db-1", e.SessionName)
		require.Equal(t, tokens[e.Election], e.Token)
		require.Equal(t, "v-"+e.Election, e.Value)
		require.False(t, e.ElectedAt.IsZero())
		require.Equal(t, map[string]int{"orders/primary": 1}[e.Election], e.Candidates)
		if !page.More {
			require.Equal(t, 2, pages)
			break
		}
		opts = []fencelock.ListOption{fencelock.ListAfter(e.Election)}
	}
	require.Equal(t, []string{"orders/primary", "orders/replica"}, names)
	all, err := c.Node(1).Elections(ctx, "")
	require.NoError(t, err)
	require.Len(t, all.Elections, 3)
	require.False(t, all.More)

	cs, err := c.Node(1).Candidates(ctx, "orders/primary")
	require.NoError(t, err)
	require.Equal(t, "primary@db-1", cs.Leader.SessionName)
	require.Len(t, cs.Queue, 1)
	require.Equal(t, "standby@db-2", cs.Queue[0].Name)
	require.Equal(t, 1, cs.Queue[0].Place)
	require.False(t, cs.Queue[0].QueuedAt.IsZero())
	li, err := c.Node(2).Leader(ctx, "payments/primary")
	require.NoError(t, err)
	require.Equal(t, "primary@db-1", li.SessionName)
}

// Every part of a session carries its name: the part opened lazily in
// another group, and, after a resume without WithSessionName, the parts
// the resumed session opens later, which keep the name the group stored
// rather than the new process's.
func TestSessionNameInEveryGroup(t *testing.T) {
	c, ctx := newCluster(t, 3, withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}},
		fencelock.GroupConfig{Name: "b", Voters: []uint64{1, 2, 3}}))
	old := newSession(t, ctx, c.Node(1), fencelock.WithSessionName("reindex@worker-3"))
	_, err := old.Acquire(ctx, "x@a")
	require.NoError(t, err)
	require.Equal(t, "reindex@worker-3", inspect(t, ctx, c.Node(2), "x@a").Holders[0].Name)

	// This node's copy of the default group must know the open for the
	// resume to read the name there; a linearizable read on it waits for
	// that.
	_, err = c.Node(2).Sessions(ctx)
	require.NoError(t, err)
	rs, err := c.Node(2).ResumeSession(ctx, old.Resume())
	require.NoError(t, err)
	_, err = rs.Acquire(ctx, "y@b")
	require.NoError(t, err)
	require.Equal(t, "reindex@worker-3", inspect(t, ctx, c.Node(3), "y@b").Holders[0].Name)
}

// Observe names the leader as the reads do: its session's name and when it
// was elected come with every change, from the log's events as from the
// first read, and a proclamation keeps both (the term goes on).
func TestObserveNamesTheLeader(t *testing.T) {
	c, ctx := newCluster(t, 3)
	ch := c.Node(3).Observe(ctx, "orders/primary")
	first := observed(t, ctx, ch)
	require.Zero(t, first.Token)
	require.Empty(t, first.SessionName)
	require.True(t, first.ElectedAt.IsZero())

	s1 := newSession(t, ctx, c.Node(1), fencelock.WithSessionName("primary@db-1"))
	s2 := newSession(t, ctx, c.Node(2), fencelock.WithSessionName("standby@db-2"))
	lead, err := s1.Campaign(ctx, "orders/primary", "a")
	require.NoError(t, err)
	seen := observed(t, ctx, ch)
	read, err := c.Node(3).Leader(ctx, "orders/primary")
	require.NoError(t, err)
	require.Equal(t, lead.Token(), seen.Token)
	require.Equal(t, "primary@db-1", seen.SessionName)
	require.False(t, seen.ElectedAt.IsZero())
	require.True(t, read.ElectedAt.Equal(seen.ElectedAt), "observed %v, read %v", seen.ElectedAt, read.ElectedAt)

	require.NoError(t, lead.Proclaim(ctx, "a2"))
	proclaimed := observed(t, ctx, ch)
	require.Equal(t, "a2", proclaimed.Value)
	require.Equal(t, "primary@db-1", proclaimed.SessionName)
	require.True(t, proclaimed.ElectedAt.Equal(seen.ElectedAt), "a proclamation is the same term")

	next := make(chan *fencelock.Leadership, 1)
	go func() {
		l, err := s2.Campaign(ctx, "orders/primary", "b")
		if err == nil {
			next <- l
		}
		close(next)
	}()
	waitUntil(t, ctx, "the candidate queued", func() bool {
		cs, err := c.Node(3).Candidates(ctx, "orders/primary")
		return err == nil && cs.Total == 1
	})
	require.NoError(t, lead.Resign(ctx))
	l2, ok := <-next
	require.True(t, ok, "the candidate was not elected")
	handed := observed(t, ctx, ch)
	require.Equal(t, l2.Token(), handed.Token)
	require.Equal(t, "standby@db-2", handed.SessionName)
	require.False(t, handed.ElectedAt.Before(seen.ElectedAt), "the next term was elected after the first")

	late := observed(t, ctx, c.Node(1).Observe(ctx, "orders/primary"))
	require.Equal(t, "standby@db-2", late.SessionName, "a new observer's first read names the leader too")
	require.True(t, late.ElectedAt.Equal(handed.ElectedAt))
}

// observed is the next observation on ch, as it came.
func observed(t testing.TB, ctx context.Context, ch <-chan fencelock.LeaderInfo) fencelock.LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-ch:
		require.True(t, ok, "the observer's channel closed")
		return info
	case <-ctx.Done():
		t.Fatal("no observation")
	}
	return fencelock.LeaderInfo{}
}

func unnamedCandidates(t testing.TB, cs []fencelock.Candidate) []fencelock.Candidate {
	t.Helper()
	out := make([]fencelock.Candidate, len(cs))
	for i, c := range cs {
		require.Equal(t, defaultSessionName(), c.Name)
		require.Equal(t, i+1, c.Place)
		require.False(t, c.QueuedAt.IsZero(), "no queue time")
		c.Name, c.Place, c.QueuedAt = "", 0, time.Time{}
		out[i] = c
	}
	return out
}

// Locks and Sessions list the whole group's state from any replica, in
// order, page by page, with holders, tokens, queues, TTLs and owners.
func TestLocksAndSessionsListing(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s1 := newSession(t, ctx, c.Node(1), fencelock.WithTTL(3*time.Second))
	s2 := newSession(t, ctx, c.Node(2), fencelock.WithTTL(5*time.Second))
	s3 := newSession(t, ctx, c.Node(3))
	tokens := map[string]uint64{}
	for i := range 12 {
		name := fmt.Sprintf("jobs/%02d", i)
		s := []*fencelock.Session{s1, s2}[i%2]
		l, err := s.Acquire(ctx, name)
		require.NoError(t, err)
		tokens[name] = l.Token()
	}
	other, err := s3.Acquire(ctx, "other")
	require.NoError(t, err)
	res := acquireAsync(ctx, s3, "jobs/03")
	waitWaiters(t, ctx, c.Node(1), "jobs/03", 1)
	res2 := acquireAsync(ctx, s1, "jobs/03")
	waitWaiters(t, ctx, c.Node(1), "jobs/03", 2)

	var names []string
	var opts []fencelock.ListOption
	for pages := 1; ; pages++ {
		page, err := c.Node(3).Locks(ctx, "jobs/", append(opts, fencelock.ListLimit(5))...)
		require.NoError(t, err)
		for _, l := range page.Locks {
			names = append(names, l.Name)
			require.Equal(t, tokens[l.Name], l.Token)
			require.True(t, l.Held)
			owner := map[uint64]uint64{s1.ID(): 1, s2.ID(): 2}[l.SessionID]
			require.Equal(t, owner, l.Owner)
			if l.Name == "jobs/03" {
				require.Equal(t, 2, l.Waiters)
				require.Equal(t, []uint64{s3.ID(), s1.ID()}, l.Queue, "the queue, head first")
			} else {
				require.Zero(t, l.Waiters)
				require.Empty(t, l.Queue)
			}
		}
		if !page.More {
			require.Equal(t, 3, pages)
			break
		}
		opts = []fencelock.ListOption{fencelock.ListAfter(page.Locks[len(page.Locks)-1].Name)}
	}
	require.Len(t, names, 12)
	require.IsIncreasing(t, names)

	all, err := c.Node(2).Locks(ctx, "")
	require.NoError(t, err)
	require.Len(t, all.Locks, 13)
	require.False(t, all.More)
	require.Equal(t, "other", all.Locks[12].Name)
	require.Equal(t, other.Token(), all.Locks[12].Token)

	sp, err := c.Node(1).Sessions(ctx, fencelock.ListLimit(2))
	require.NoError(t, err)
	require.True(t, sp.More)
	rest, err := c.Node(1).Sessions(ctx, fencelock.ListAfterSession(sp.Sessions[1].ID))
	require.NoError(t, err)
	require.False(t, rest.More)
	got := append(sp.Sessions, rest.Sessions...)
	require.Len(t, got, 3)
	want := map[uint64]fencelock.SessionInfo{
		s1.ID(): {ID: s1.ID(), PartID: s1.ID(), Name: defaultSessionName(), Owner: 1, TTL: 3 * time.Second, Held: 6, Waiting: 1},
		s2.ID(): {ID: s2.ID(), PartID: s2.ID(), Name: defaultSessionName(), Owner: 2, TTL: 5 * time.Second, Held: 6, Waiting: 0},
		s3.ID(): {ID: s3.ID(), PartID: s3.ID(), Name: defaultSessionName(), Owner: 3, TTL: fencelock.DefaultSessionTTL, Held: 1, Waiting: 1},
	}
	for i, s := range got {
		if i > 0 {
			require.Greater(t, s.ID, got[i-1].ID, "in ID order")
		}
		require.Positive(t, s.KeepAliveIndex)
		s.KeepAliveIndex = 0
		require.Equal(t, want[s.ID], s)
	}

	_, err = c.Node(1).Locks(ctx, "", fencelock.ListLimit(0))
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)
	_, err = c.Node(1).Sessions(ctx, fencelock.ListLimit(fencelock.MaxListLimit+1))
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)

	require.NoError(t, s2.Close(ctx)) // frees jobs/03: s3 is next
	r := <-res
	require.NoError(t, r.err)
	require.NoError(t, s1.Close(ctx))
	require.ErrorIs(t, (<-res2).err, fencelock.ErrSessionClosed)
}
