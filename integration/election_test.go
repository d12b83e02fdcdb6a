package integration_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

func TestElectionInvalidInput(t *testing.T) {
	c, ctx := newCluster(t, 1)
	s := newSession(t, ctx, c.Node(1))
	for _, name := range []string{"", strings.Repeat("x", 513), "bad\x00name", "\xff\xfe"} {
		_, err := s.Campaign(ctx, name, "v")
		require.ErrorIs(t, err, fencelock.ErrInvalidName, "%q", name)
		_, err = c.Node(1).Leader(ctx, name)
		require.ErrorIs(t, err, fencelock.ErrInvalidName)
		ch := c.Node(1).Observe(ctx, name)
		info, ok := <-ch
		require.True(t, ok)
		require.ErrorIs(t, info.Err, fencelock.ErrInvalidName, "the mistake is reported, not a silent close")
		requireClosed(t, ctx, ch)
	}
	_, err := s.Campaign(ctx, "e", strings.Repeat("v", 4097))
	require.ErrorIs(t, err, fencelock.ErrValueTooLarge)
	require.Zero(t, queued(t, ctx, c.Node(1), "e"), "nothing was proposed")
	l := campaign(t, ctx, s, "e", "")
	require.Equal(t, "", leaderOf(t, ctx, c.Node(1), "e").Value, "an empty value is fine")
	require.NoError(t, l.Resign(ctx))
}

// A lock and an election of the same name are different things.
func TestElectionsAndLocksAreSeparate(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s1, s2 := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	lock, err := s1.Acquire(ctx, "orders")
	require.NoError(t, err)
	lead := campaign(t, ctx, s2, "orders", "s2")
	require.NotEqual(t, lock.Token(), lead.Token())
	require.Equal(t, s1.ID(), inspect(t, ctx, c.Node(3), "orders").SessionID)
	require.Equal(t, s2.ID(), leaderOf(t, ctx, c.Node(3), "orders").SessionID)
	require.NoError(t, lock.Release(ctx))
	require.False(t, closed(lead.Done()), "releasing the lock leaves the election alone")
	require.Equal(t, s2.ID(), leaderOf(t, ctx, c.Node(1), "orders").SessionID)
}

// Observe delivers the current state first, then each change in order.
func TestObserveSequence(t *testing.T) {
	c, ctx := newCluster(t, 3)
	octx, stop := context.WithCancel(ctx)
	ch := c.Node(3).Observe(octx, "primary")
	require.Equal(t, fencelock.LeaderInfo{Election: "primary"}, next(t, ctx, ch), "first: no leader")

	a, b := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	la := campaign(t, ctx, a, "primary", "a")
	require.Equal(t, infoOf(la), next(t, ctx, ch))
	require.NoError(t, la.Proclaim(ctx, "a2"))
	require.Equal(t, fencelock.LeaderInfo{Election: "primary", Value: "a2", Token: la.Token(), SessionID: a.ID(), PartID: a.ID()}, next(t, ctx, ch))

	rb := campaignAsync(ctx, b, "primary", "b")
	waitCandidates(t, ctx, c.Node(3), "primary", 1)
	require.NoError(t, la.Resign(ctx))
	r := <-rb
	require.NoError(t, r.err)
	// The resignation and the election are one entry: no gap is observed.
	require.Equal(t, infoOf(r.l), next(t, ctx, ch))

	late := c.Node(1).Observe(octx, "primary")
	require.Equal(t, infoOf(r.l), next(t, ctx, late), "a new observer starts with the current leader")

	require.NoError(t, r.l.Resign(ctx))
	require.Equal(t, fencelock.LeaderInfo{Election: "primary"}, next(t, ctx, ch))
	require.Equal(t, fencelock.LeaderInfo{Election: "primary"}, next(t, ctx, late))
	select {
	case info := <-ch:
		t.Fatalf("an observation without a change: %+v", info)
	case <-time.After(100 * time.Millisecond): // nothing else may arrive
	}
	stop()
	requireClosed(t, ctx, ch)
	requireClosed(t, ctx, late)
}

// Changes made faster than the observer reads are coalesced, and the value
// waiting is always the latest.
func TestObserveCoalescesToTheLatest(t *testing.T) {
	c, ctx := newCluster(t, 3)
	ch := c.Node(2).Observe(ctx, "e")
	require.Equal(t, fencelock.LeaderInfo{Election: "e"}, next(t, ctx, ch))
	s := newSession(t, ctx, c.Node(1))
	lead := campaign(t, ctx, s, "e", "v0")
	for i := 1; i <= 50; i++ {
		require.NoError(t, lead.Proclaim(ctx, fmt.Sprint("v", i)))
	}
	want := fencelock.LeaderInfo{Election: "e", Value: "v50", Token: lead.Token(), SessionID: s.ID(), PartID: s.ID()}
	// The observer's replica may not have applied the last change yet, but
	// nothing after the latest value arrives, and values only move forward.
	seen := observeUntil(t, ctx, ch, want)
	require.Less(t, len(seen), 52, "at most every change once")
	prev := -1
	for _, info := range seen {
		var i int
		_, err := fmt.Sscanf(info.Value, "v%d", &i)
		require.NoError(t, err)
		require.Greater(t, i, prev, "in order: %v", seen)
		prev = i
	}
}

// An observer on a follower keeps following the election when the raft
// leader goes away.
func TestObserveAcrossRaftLeaderChange(t *testing.T) {
	c, ctx := newCluster(t, 3)
	old := c.Leader(ctx)
	f1 := old%3 + 1
	f2 := f1%3 + 1
	ch := c.Node(f1).Observe(ctx, "primary")
	require.Equal(t, fencelock.LeaderInfo{Election: "primary"}, next(t, ctx, ch))
	s := newSession(t, ctx, c.Node(f2))
	lead := campaign(t, ctx, s, "primary", "before")
	require.Equal(t, infoOf(lead), next(t, ctx, ch))

	c.Crash(old)
	require.NotEqual(t, old, c.Leader(ctx))
	require.False(t, closed(lead.Done()), "the leadership survives the raft failover")
	require.NoError(t, lead.Proclaim(ctx, "after"))
	require.Equal(t, fencelock.LeaderInfo{Election: "primary", Value: "after", Token: lead.Token(), SessionID: s.ID(), PartID: s.ID()}, next(t, ctx, ch))

	s2 := newSession(t, ctx, c.Node(f1))
	r := campaignAsync(ctx, s2, "primary", "f1")
	waitCandidates(t, ctx, c.Node(f2), "primary", 1)
	require.NoError(t, lead.Resign(ctx))
	got := <-r
	require.NoError(t, got.err)
	require.Greater(t, got.l.Token(), lead.Token())
	require.Equal(t, infoOf(got.l), next(t, ctx, ch))
	require.Equal(t, infoOf(got.l), next(t, ctx, c.Node(f2).Observe(ctx, "primary")))
}

func TestCancelWhileCampaigning(t *testing.T) {
	c, ctx := newCluster(t, 3)
	leader, candidate := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	lead := campaign(t, ctx, leader, "primary", "leader")

	cctx, cancel := context.WithCancel(ctx)
	res := campaignAsync(cctx, candidate, "primary", "candidate")
	waitCandidates(t, ctx, c.Node(3), "primary", 1)
	cancel()
	r := <-res
	require.ErrorIs(t, r.err, context.Canceled)
	require.Nil(t, r.l)
	require.Zero(t, queued(t, ctx, c.Node(1), "primary"), "the cancelled candidate left the queue")

	require.NoError(t, lead.Resign(ctx))
	_, err := c.Node(3).Leader(ctx, "primary")
	require.ErrorIs(t, err, fencelock.ErrNoLeader, "nobody leads for a caller that gave up")

	again := campaign(t, ctx, candidate, "primary", "candidate")
	require.Greater(t, again.Token(), lead.Token(), "the session is still usable")
}

// A leadership ends with its session: closing it elects the next candidate
// at once; closing the node ends its sessions' leaderships and observers.
func TestLeadershipEndsWithItsSession(t *testing.T) {
	c, ctx := newCluster(t, 3)
	a, b := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	la := campaign(t, ctx, a, "primary", "a")
	res := campaignAsync(ctx, b, "primary", "b")
	waitCandidates(t, ctx, c.Node(3), "primary", 1)
	require.NoError(t, a.Close(ctx))
	require.True(t, closed(la.Done()))
	require.ErrorIs(t, la.Err(), fencelock.ErrSessionClosed)
	r := <-res
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), la.Token())

	ch := c.Node(2).Observe(ctx, "primary")
	require.Equal(t, infoOf(r.l), next(t, ctx, ch))
	c.Stop(2)
	require.True(t, closed(r.l.Done()))
	require.ErrorIs(t, r.l.Err(), fencelock.ErrClosed)
	requireClosed(t, ctx, ch)
	_, err := b.Campaign(ctx, "other", "b")
	require.ErrorIs(t, err, fencelock.ErrClosed)
}

// TryCampaign leads at once or fails at once with ErrElectionTaken, and
// never leaves a candidate behind.
func TestTryCampaign(t *testing.T) {
	c, ctx := newCluster(t, 1)
	a, b := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(1))
	l, err := a.TryCampaign(ctx, "cron/nightly", "a")
	require.NoError(t, err)
	_, err = b.TryCampaign(ctx, "cron/nightly", "b")
	require.ErrorIs(t, err, fencelock.ErrElectionTaken)
	require.Zero(t, queued(t, ctx, c.Node(1), "cron/nightly"), "nothing queued")
	require.NoError(t, l.Resign(ctx))
	l2, err := b.TryCampaign(ctx, "cron/nightly", "b")
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())
	_, err = b.TryCampaign(ctx, "", "b")
	require.ErrorIs(t, err, fencelock.ErrInvalidName)
}

// Candidates lists the leader and the queue in the order they will lead.
func TestCandidates(t *testing.T) {
	c, ctx := newCluster(t, 3)
	a, b, d := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2)), newSession(t, ctx, c.Node(3))
	lead, err := a.Campaign(ctx, "primary", "a")
	require.NoError(t, err)
	for _, s := range []*fencelock.Session{b, d} {
		go func() { _, _ = s.Campaign(ctx, "primary", fmt.Sprint("v", s.ID())) }()
		id := s.ID()
		waitUntil(t, ctx, "queued", func() bool {
			got, err := c.Node(1).Candidates(ctx, "primary")
			return err == nil && len(got.Queue) > 0 && got.Queue[len(got.Queue)-1].SessionID == id
		})
	}
	got, err := c.Node(3).Candidates(ctx, "primary")
	require.NoError(t, err)
	require.Equal(t, lead.Token(), got.Leader.Token)
	require.Equal(t, 2, got.Total)
	require.Equal(t, []fencelock.Candidate{{SessionID: b.ID(), PartID: b.ID(), Value: fmt.Sprint("v", b.ID()), Replica: 2}, {SessionID: d.ID(), PartID: d.ID(), Value: fmt.Sprint("v", d.ID()), Replica: 3}}, unnamedCandidates(t, got.Queue))
	one, err := c.Node(3).Candidates(ctx, "primary", fencelock.ListLimit(1))
	require.NoError(t, err)
	require.Len(t, one.Queue, 1)
	_, err = c.Node(3).Candidates(ctx, "")
	require.ErrorIs(t, err, fencelock.ErrInvalidName)
}

type campaigned struct {
	l   *fencelock.Leadership
	err error
}

// campaignAsync starts a Campaign and returns where its result arrives.
func campaignAsync(ctx context.Context, s *fencelock.Session, election, value string) <-chan campaigned {
	ch := make(chan campaigned, 1)
	go func() {
		l, err := s.Campaign(ctx, election, value)
		ch <- campaigned{l, err}
	}()
	return ch
}

func campaign(t testing.TB, ctx context.Context, s *fencelock.Session, election, value string) *fencelock.Leadership {
	t.Helper()
	l, err := s.Campaign(ctx, election, value)
	require.NoError(t, err)
	return l
}

func leaderOf(t testing.TB, ctx context.Context, n *fencelock.Node, name string) fencelock.LeaderInfo {
	t.Helper()
	info, err := n.Leader(ctx, name)
	if errors.Is(err, fencelock.ErrNoLeader) {
		require.Zero(t, info.Token)
		return info
	}
	require.NoError(t, err)
	return unnamedLeader(t, info)
}

func infoOf(l *fencelock.Leadership) fencelock.LeaderInfo {
	_, group, _ := fencelock.SplitName(l.Election())
	part, _ := l.Session().IDIn(group)
	return fencelock.LeaderInfo{Election: l.Election(), Value: l.Value(), Token: l.Token(), SessionID: l.Session().ID(), PartID: part}
}

// observeUntil receives until the observation equals want, checking that
// tokens never go back, and returns everything received.
func observeUntil(t testing.TB, ctx context.Context, ch <-chan fencelock.LeaderInfo, want fencelock.LeaderInfo) []fencelock.LeaderInfo {
	t.Helper()
	var seen []fencelock.LeaderInfo
	var last uint64
	for {
		var info fencelock.LeaderInfo
		select {
		case got, ok := <-ch:
			require.True(t, ok, "the observer's channel closed; saw %v", seen)
			info = unnamedLeader(t, got)
		case <-ctx.Done():
			t.Fatalf("no observation of %+v; saw %+v", want, seen)
		}
		seen = append(seen, info)
		if info.Token != 0 {
			require.GreaterOrEqual(t, info.Token, last, "observations go back in time: %v", seen)
			last = info.Token
		}
		if info == want {
			return seen
		}
	}
}

func requireClosed(t testing.TB, ctx context.Context, ch <-chan fencelock.LeaderInfo) {
	t.Helper()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-ctx.Done():
			t.Fatal("the observer's channel stayed open")
		}
	}
}

// queued reads how many candidates queue behind the election's leader
// (Candidates.Total: a linearizable read).
func queued(t testing.TB, ctx context.Context, n *fencelock.Node, name string) int {
	t.Helper()
	cs, err := n.Candidates(ctx, name)
	require.NoError(t, err)
	return cs.Total
}

func waitCandidates(t testing.TB, ctx context.Context, n *fencelock.Node, name string, candidates int) {
	t.Helper()
	waitUntil(t, ctx, fmt.Sprintf("%d candidates queue", candidates), func() bool {
		return queued(t, ctx, n, name) == candidates
	})
}
