package fencelock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

type campaigned struct {
	l   *Leadership
	err error
}

// campaignAsync starts a Campaign and returns where its result arrives.
func campaignAsync(ctx context.Context, s *Session, election, value string) <-chan campaigned {
	ch := make(chan campaigned, 1)
	go func() {
		l, err := s.Campaign(ctx, election, value)
		ch <- campaigned{l, err}
	}()
	return ch
}

func campaign(t testing.TB, ctx context.Context, s *Session, election, value string) *Leadership {
	t.Helper()
	l, err := s.Campaign(ctx, election, value)
	require.NoError(t, err)
	return l
}

// election reads the election's state, candidates included.
func election(t testing.TB, ctx context.Context, n *Node, name string) fsm.ElectionInfo {
	t.Helper()
	v, err := n.r.Read(ctx, func(st *fsm.State) any { return st.Election(name) })
	require.NoError(t, err)
	return v.(fsm.ElectionInfo)
}

func waitCandidates(t testing.TB, ctx context.Context, n *Node, name string, candidates int) {
	t.Helper()
	waitUntil(t, ctx, fmt.Sprintf("%d candidates queue", candidates), func() bool {
		return election(t, ctx, n, name).Candidates == candidates
	})
}

// grants reads how many grants the group has made.
func grants(t testing.TB, ctx context.Context, n *Node) uint64 {
	t.Helper()
	v, err := n.r.Read(ctx, func(st *fsm.State) any { return st.Grants() })
	require.NoError(t, err)
	return v.(uint64)
}

func leaderOf(t testing.TB, ctx context.Context, n *Node, name string) LeaderInfo {
	t.Helper()
	info, err := n.Leader(ctx, name)
	if errors.Is(err, ErrNoLeader) {
		require.Zero(t, info.Token)
		return info
	}
	require.NoError(t, err)
	return unnamedLeader(t, info)
}

func infoOf(l *Leadership) LeaderInfo {
	_, group, _ := SplitName(l.Election())
	part, _ := l.Session().IDIn(group)
	return LeaderInfo{Election: l.Election(), Value: l.Value(), Token: l.Token(), SessionID: l.Session().ID(), PartID: part}
}

// next receives the next observation; the channel must stay open.
func next(t testing.TB, ctx context.Context, ch <-chan LeaderInfo) LeaderInfo {
	t.Helper()
	select {
	case info, ok := <-ch:
		require.True(t, ok, "the observer's channel closed")
		return unnamedLeader(t, info) // the exact comparisons predate names
	case <-ctx.Done():
		t.Fatal("no observation")
	}
	return LeaderInfo{}
}

// observeUntil receives until the observation equals want, checking that
// tokens never go back, and returns everything received; it fails the test
// when ctx ends or ch closes first.
func observeUntil(t testing.TB, ctx context.Context, ch <-chan LeaderInfo, want LeaderInfo) []LeaderInfo {
	t.Helper()
	seen, ok := observedWithin(t, ctx, ch, want)
	if !ok {
		t.Fatalf("no observation of %+v (the observer's channel closed, or %v); saw %+v", want, ctx.Err(), seen)
	}
	return seen
}

func requireClosed(t testing.TB, ctx context.Context, ch <-chan LeaderInfo) {
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

// Candidates are elected in the order they campaigned, from any replica,
// each with a larger token, and each handover is exactly one grant.
func TestCampaignResignHandoverOrder(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	first := newSession(t, ctx, c.node(1))
	lead := campaign(t, ctx, first, "primary", "replica-1")
	require.Equal(t, "primary", lead.Election())
	require.NotZero(t, lead.Token())
	require.Nil(t, lead.Err())
	for id := uint64(1); id <= 3; id++ {
		require.Equal(t, LeaderInfo{Election: "primary", Value: "replica-1", Token: lead.Token(), SessionID: first.ID(), PartID: first.ID()},
			leaderOf(t, ctx, c.node(id), "primary"))
	}

	var sessions []*Session
	var results []<-chan campaigned
	for i, id := range []uint64{2, 3, 1, 2} {
		s := newSession(t, ctx, c.node(id))
		sessions = append(sessions, s)
		results = append(results, campaignAsync(ctx, s, "primary", fmt.Sprint("candidate-", i)))
		waitCandidates(t, ctx, c.node(3), "primary", i+1) // enqueue in a known order
	}

	for i, s := range sessions {
		before := grants(t, ctx, c.node(2))
		require.NoError(t, lead.Resign(ctx))
		require.True(t, closed(lead.Done()), "Done closes on resign")
		require.ErrorIs(t, lead.Err(), ErrNotLeader)
		r := <-results[i]
		require.NoError(t, r.err)
		require.Greater(t, r.l.Token(), lead.Token(), "each term has a larger token")
		require.Equal(t, fmt.Sprint("candidate-", i), r.l.Value())
		require.Equal(t, LeaderInfo{Election: "primary", Value: r.l.Value(), Token: r.l.Token(), SessionID: s.ID(), PartID: s.ID()},
			leaderOf(t, ctx, c.node(uint64(i%3+1)), "primary"))
		require.Equal(t, before+1, grants(t, ctx, c.node(1)), "one grant per change")
		for _, later := range results[i+1:] {
			require.Empty(t, later, "only the head of the queue is elected")
		}
		require.ErrorIs(t, lead.Resign(ctx), ErrNotLeader, "a late resign cannot depose the successor")
		lead = r.l
	}
	require.NoError(t, lead.Resign(ctx))
	info, err := c.node(3).Leader(ctx, "primary")
	require.ErrorIs(t, err, ErrNoLeader)
	require.Equal(t, LeaderInfo{Election: "primary"}, info)
}

func TestProclaimKeepsTheTerm(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.node(2))
	lead := campaign(t, ctx, s, "db/primary", "10.0.0.2:5432")
	before := grants(t, ctx, c.node(1))

	require.NoError(t, lead.Proclaim(ctx, "10.0.0.2:6432"))
	require.Equal(t, "10.0.0.2:6432", lead.Value())
	info := leaderOf(t, ctx, c.node(3), "db/primary")
	require.Equal(t, LeaderInfo{Election: "db/primary", Value: "10.0.0.2:6432", Token: lead.Token(), SessionID: s.ID(), PartID: s.ID()}, info)
	require.Equal(t, before, grants(t, ctx, c.node(1)), "a proclamation is no new term")

	long := strings.Repeat("v", 4096)
	require.NoError(t, lead.Proclaim(ctx, long), "4096 bytes is the limit")
	require.Equal(t, long, leaderOf(t, ctx, c.node(1), "db/primary").Value)
	require.ErrorIs(t, lead.Proclaim(ctx, long+"v"), ErrValueTooLarge)
	require.Equal(t, long, lead.Value())

	require.NoError(t, lead.Resign(ctx))
	require.ErrorIs(t, lead.Proclaim(ctx, "late"), ErrNotLeader)
	_, err := c.node(1).Leader(ctx, "db/primary")
	require.ErrorIs(t, err, ErrNoLeader)
}

// A leader whose process pauses past its TTL stops by its own clock before
// the group elects the next candidate; observers see the successor with a
// larger token, the paused leader's late write is refused by the resource,
// and its late Resign and Proclaim change nothing. A candidate whose session
// expires while it waits leaves the queue.
func TestLeaderPauseHandsOverAfterItStops(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const ttl = time.Second
	a := newSession(t, ctx, c.node(2), WithTTL(ttl))
	expiring := newSession(t, ctx, c.node(1), WithTTL(ttl))
	b := newSession(t, ctx, c.node(3), WithTTL(ttl))
	storage := NewFencer()
	ch := c.node(1).Observe(ctx, "primary")
	require.Equal(t, LeaderInfo{Election: "primary"}, next(t, ctx, ch))

	la := campaign(t, ctx, a, "primary", "a")
	require.NoError(t, storage.Admit("log", la.Token()))
	require.Equal(t, infoOf(la), next(t, ctx, ch))
	lost := campaignAsync(ctx, expiring, "primary", "expiring")
	waitCandidates(t, ctx, c.node(1), "primary", 1)
	res := stoppedFirst(a, func() (*Leadership, error) { return b.Campaign(ctx, "primary", "b") })
	waitCandidates(t, ctx, c.node(1), "primary", 2)

	// The first candidate's session expires while it waits.
	testhook.Freeze(expiring)
	defer testhook.Thaw(expiring)
	r := <-lost
	require.ErrorIs(t, r.err, ErrSessionExpired)
	waitCandidates(t, ctx, c.node(2), "primary", 1)

	// The leader's replica is cut off too, so that it cannot learn of its
	// expiry from the group: its own deadline must stop it.
	cutOff(t, c, a, 2)
	successor := requireStoppedFirst(t, res, "the group elected another while the leader still believed it led")
	require.ErrorIs(t, la.Err(), ErrSessionExpired)
	c.net.Heal()
	require.Greater(t, successor.Token(), la.Token())
	require.Equal(t, infoOf(successor), observeUntil(t, ctx, ch, infoOf(successor))[0],
		"observers go straight to the successor: the expired candidate never leads")
	require.NoError(t, storage.Admit("log", successor.Token()))

	testhook.Thaw(a)
	requireStaleWriteRefused(t, storage, "log", la.Token())
	require.ErrorIs(t, la.Resign(ctx), ErrNotLeader)
	require.ErrorIs(t, la.Proclaim(ctx, "late"), ErrNotLeader)
	require.Equal(t, infoOf(successor), leaderOf(t, ctx, c.node(2), "primary"), "the late calls changed nothing")
}

// Thousands of candidates and observers: each change of leader is one grant,
// wakes one candidate, and every observer ends on the latest leader.
func TestManyCandidatesOneGrantPerChange(t *testing.T) {
	c := newCluster(t, 3, nil)
	// Thousands of goroutines under -race beside the other packages: one
	// deadline for the whole test, generous, so that only a value that
	// never arrives fails it.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const candidates, observers, changes = 1000, 1000, 5
	var sessions []*Session
	for i := range 12 {
		sessions = append(sessions, newSession(t, ctx, c.node(uint64(i%3+1)), WithTTL(10*time.Second)))
	}
	first := campaign(t, ctx, sessions[0], "primary", "first")
	results := make(chan campaigned, candidates)
	for i := range candidates {
		go func() {
			l, err := sessions[i%len(sessions)].Campaign(ctx, "primary", fmt.Sprint("c", i))
			results <- campaigned{l, err}
		}()
	}
	var chans []<-chan LeaderInfo
	octx, stop := context.WithCancel(ctx)
	for i := range observers {
		chans = append(chans, c.node(uint64(i%3+1)).Observe(octx, "primary"))
	}
	waitUntil(t, ctx, "every candidate queues", func() bool {
		select {
		case r := <-results:
			t.Fatalf("a candidate returned early: %v", r.err)
		default:
		}
		return election(t, ctx, c.node(1), "primary").Candidates == candidates
	})

	start := grants(t, ctx, c.node(2))
	lead := first
	for range changes {
		require.NoError(t, lead.Resign(ctx))
		r := <-results
		require.NoError(t, r.err)
		require.Greater(t, r.l.Token(), lead.Token())
		lead = r.l
	}
	require.Equal(t, start+changes, grants(t, ctx, c.node(3)), "exactly one grant per change")
	require.Equal(t, candidates-changes, election(t, ctx, c.node(1), "primary").Candidates)
	require.Empty(t, results, "no other candidate was woken")
	want := infoOf(lead)
	for i, ch := range chans {
		if seen, ok := observedWithin(t, ctx, ch, want); !ok {
			t.Fatalf("observer %d (on replica %d): no observation of %+v; saw %+v\n%s", i, i%3+1, want, seen, electionReport(c, sessions))
		}
	}
	stop()
	for _, ch := range chans {
		requireClosed(t, ctx, ch)
	}
	for _, s := range sessions {
		require.NoError(t, s.Close(ctx))
	}
	for range candidates - changes {
		// Closing a leader's session elects the next candidate, whose own
		// session is closed in turn.
		r := <-results
		if r.err == nil {
			<-r.l.Done()
			require.ErrorIs(t, r.l.Err(), ErrSessionClosed)
			continue
		}
		require.ErrorIs(t, r.err, ErrSessionClosed)
	}
}

// observedWithin receives until the observation equals want, checking
// that tokens never go back, and returns everything received; false when
// ctx ends or ch closes first, for a test that reports more on failure.
func observedWithin(t testing.TB, ctx context.Context, ch <-chan LeaderInfo, want LeaderInfo) ([]LeaderInfo, bool) {
	t.Helper()
	var seen []LeaderInfo
	var last uint64
	for {
		select {
		case got, ok := <-ch:
			if !ok {
				return seen, false
			}
			got = unnamedLeader(t, got)
			seen = append(seen, got)
			if got.Token != 0 {
				require.GreaterOrEqual(t, got.Token, last, "observations go back in time: %v", seen)
				last = got.Token
			}
			if got == want {
				return seen, true
			}
		case <-ctx.Done():
			return seen, false
		}
	}
}

// electionReport says how each replica's state has "primary" and which of
// sessions ended and why: what tells a lost observation from an election
// that moved on (sessions expired under load).
func electionReport(c *testCluster, sessions []*Session) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b strings.Builder
	for id := uint64(1); id <= 3; id++ {
		n := c.node(id)
		v, err := n.r.Read(ctx, func(st *fsm.State) any { return [2]any{st.Index(), st.Election("primary")} })
		st := n.Status()
		fmt.Fprintf(&b, "replica %d: %v %v (applied %d, leader %d, term %d)\n", id, v, err, st.AppliedIndex, st.LeaderID, st.Term)
	}
	for i, s := range sessions {
		select {
		case <-s.Done():
			fmt.Fprintf(&b, "session %d ended: %v\n", i, s.Err())
		default:
		}
	}
	return b.String()
}
