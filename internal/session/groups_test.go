package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/transport"
)

var (
	quiet      = slog.New(slog.NewTextHandler(io.Discard, nil))
	errUnknown = errors.New("test: unknown group")
)

// testGroups is a Groups over replicas a test started.
type testGroups struct {
	mu sync.RWMutex
	m  map[string]Group
}

func (g *testGroups) Group(name string) Group {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.m[name]
}

func (g *testGroups) Lookup(_ context.Context, name string) (Group, error) {
	if r := g.Group(name); r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("%w: %q", errUnknown, truncate(name, 64)) // as replica.Host.Lookup words it
}

func (g *testGroups) Reachable(context.Context) ([]string, error) { return g.Names(), nil }

func (g *testGroups) Names() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return slices.Sorted(maps.Keys(g.m)) // "" first
}

// nopSink is the sink of a replica that runs no sessions of the test's.
type nopSink struct{}

func (nopSink) Applied(uint64, []fsm.Event) {}
func (nopSink) Restored(*fsm.State)         {}
func (nopSink) Removed()                    {}

// twoGroups runs, on one fault network, the default group as one replica
// and group "b" as three, the first of which is this Host's: the Host's
// replica of each group is real, and b can lose its quorum.
type twoGroups struct {
	t      *testing.T
	h      *Host
	groups *testGroups
	others map[uint64]*replica.Replica // b's replicas 2 and 3
}

func replicaConfig(net *transport.Network, dir string, id uint64, members map[uint64]string) replica.Config {
	return replica.Config{
		ReplicaID: id, Members: members, Addr: members[id], Dir: dir,
		RTT: 10 * time.Millisecond, ProposalTimeout: time.Second, ElectionTicks: 15, HeartbeatTicks: 2,
		SnapshotEntries: 10000, CompactionOverhead: 5000, Transport: net, Logger: quiet, Clock: clock.Real,
	}
}

func startTwoGroups(t *testing.T) *twoGroups {
	t.Helper()
	net := transport.NewNetwork(24)
	tg := &twoGroups{t: t, groups: &testGroups{m: map[string]Group{}}, others: map[uint64]*replica.Replica{}}
	tg.h = NewHost(Config{ReplicaID: 1, ProposalTimeout: time.Second, RTT: 10 * time.Millisecond,
		Clock: clock.Real, Log: quiet, Groups: tg.groups, UnknownGroup: errUnknown})
	dir := t.TempDir()
	def := map[uint64]string{1: net.Addr(1)}
	b := map[uint64]string{1: net.Addr(11), 2: net.Addr(12), 3: net.Addr(13)}
	var closers []func()
	t.Cleanup(func() {
		tg.h.Close(replica.ErrClosed)
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	})
	// Each group runs on hosts of its own here, as the default group of
	// each: the session machinery only sees a group's Group.
	start := func(cfg replica.Config, sink replica.Sink) (*replica.Replica, error) {
		h, err := replica.Start(cfg, func(string) replica.Sink { return sink })
		if err != nil {
			return nil, err
		}
		return h.Shard(""), nil
	}
	r, err := start(replicaConfig(net, filepath.Join(dir, "default"), 1, def), tg.h.Sink(""))
	require.NoError(t, err)
	closers = append(closers, r.Close)
	tg.groups.m[""] = r
	for id := uint64(1); id <= 3; id++ {
		var sink replica.Sink = nopSink{}
		if id == 1 {
			sink = tg.h.Sink("b")
		}
		r, err := start(replicaConfig(net, filepath.Join(dir, fmt.Sprint("b", id)), id, b), sink)
		require.NoError(t, err)
		closers = append(closers, func() { r.Close() }) // idempotent
		if id == 1 {
			tg.groups.m["b"] = r
		} else {
			tg.others[id] = r
		}
	}
	return tg
}

func acquire(ctx context.Context, s *Session, group, name string) (*Grant, error) {
	return s.Request(ctx, group, fsm.Command{Kind: fsm.KindAcquire, Name: name, Wait: true}, RequestOptions{})
}

// openInTwoGroups starts two groups (startTwoGroups) and opens a session
// with o at this test's Host, under a context that ends after timeout or
// when the test does.
func openInTwoGroups(t *testing.T, timeout time.Duration, o Options) (context.Context, *twoGroups, *Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	tg := startTwoGroups(t)
	t.Cleanup(cancel) // before the groups close, as a deferred cancel was
	s, err := tg.h.Open(ctx, o, nil)
	require.NoError(t, err)
	return ctx, tg, s
}

// A session opens its part in a group on the first call naming it, one part
// for the calls that race to open it; the parts have their own IDs and
// their grants their own group's tokens. When group b loses its quorum, the
// part there ends by the holder's clock and ends only b's grants: the
// session and its default group's grants live on, and so does the renewal
// of the default part.
func TestPartsPerGroupAndTheirLoss(t *testing.T) {
	const ttl = 2 * time.Second
	ctx, tg, s := openInTwoGroups(t, 2*time.Minute, Options{TTL: ttl, Margin: ttl / 5})
	_, ok := s.PartID("b")
	require.False(t, ok, "no part in b before a call names it")

	x, err := acquire(ctx, s, "", "x")
	require.NoError(t, err)

	// The first calls naming b race: one open serves them all.
	var wg sync.WaitGroup
	grants, errs := make([]*Grant, 4), make([]error, 4)
	for i := range grants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			grants[i], errs[i] = acquire(ctx, s, "b", fmt.Sprintf("y%d@b", i))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	bID, ok := s.PartID("b")
	require.True(t, ok)
	for _, g := range grants {
		require.Same(t, grants[0].p, g.p, "one part per group")
	}
	require.Len(t, tg.h.router("b").localParts(), 1)
	require.Equal(t, bID, grants[0].p.ID())
	require.NotZero(t, x.GroupID())
	require.NotZero(t, grants[0].GroupID())
	require.NotEqual(t, x.GroupID(), grants[0].GroupID(), "each grant carries its own group's ID")
	require.Len(t, s.Held(false), 5)
	require.Len(t, s.Tokens(), 2)

	_, err = acquire(ctx, s, "nope", "q@nope")
	require.ErrorIs(t, err, errUnknown)

	// b loses its quorum.
	for _, r := range tg.others {
		r.Close()
	}
	lost := time.Now()
	for _, g := range grants {
		select {
		case <-g.Done():
		case <-ctx.Done():
			t.Fatal("b's grant outlived its part")
		}
		require.ErrorIs(t, g.Err(), ErrSessionExpired)
	}
	// By its deadline, TTL − margin after its last renewal (with slack for a
	// loaded machine): the holder's clock, not the group, ended it.
	require.Less(t, time.Since(lost), ttl+3*time.Second, "b's part ended by its deadline")
	require.NoError(t, s.Err(), "the session lives on")
	require.False(t, closed(s.done))
	require.NoError(t, x.Err(), "the default group's grant is untouched")
	_, ok = s.PartID("b")
	require.False(t, ok)
	require.Len(t, s.Tokens(), 1, "a resume token names only live parts")

	// The default part goes on renewing while b cannot commit.
	wait := time.NewTimer(2 * ttl)
	defer wait.Stop()
	select {
	case <-x.Done():
		t.Fatalf("the default group's grant ended: %v", x.Err())
	case <-wait.C:
	}
	z, err := acquire(ctx, s, "", "z")
	require.NoError(t, err)
	require.Same(t, x.p, z.p)

	// A call naming b now opens a new part, and fails while b has no quorum.
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	_, err = acquire(short, s, "b", "w@b")
	require.Error(t, err)
	require.NoError(t, s.Err())
	require.NoError(t, s.Close(ctx))
	require.ErrorIs(t, x.Err(), ErrSessionClosed)
}

// When the default part ends, the whole session ends, and with it every
// part in other groups, which is closed at its group.
func TestDefaultPartEndsTheSession(t *testing.T) {
	ctx, tg, s := openInTwoGroups(t, 2*time.Minute, Options{TTL: 5 * time.Second, Margin: time.Second})
	y, err := acquire(ctx, s, "b", "y@b")
	require.NoError(t, err)
	r := tg.groups.Group("")
	res, err := r.Propose(ctx, fsm.Command{Kind: fsm.KindEndSession, Session: s.ID()})
	require.NoError(t, err)
	require.Equal(t, fsm.OK, res.Status)
	<-s.Done()
	require.ErrorIs(t, s.Err(), ErrRevoked)
	<-y.Done()
	require.ErrorIs(t, y.Err(), ErrRevoked)
	// b frees y@b at once: the part was closed there, not left to expire.
	b := tg.groups.Group("b")
	require.Eventually(t, func() bool {
		v, err := b.Read(ctx, func(st *fsm.State) any { return st.Lock("y@b").Held })
		return err == nil && !v.(bool)
	}, 30*time.Second, 10*time.Millisecond)
	_, err = acquire(ctx, s, "b", "again@b")
	require.ErrorIs(t, err, ErrRevoked, "a session that is over opens no part")
}

// Resume takes back every part a session had, with the grants each holds,
// their tokens unchanged.
func TestResumeEveryPart(t *testing.T) {
	o := Options{TTL: 5 * time.Second, Margin: time.Second}
	ctx, tg, s := openInTwoGroups(t, 2*time.Minute, o)
	x, err := acquire(ctx, s, "", "x")
	require.NoError(t, err)
	y, err := acquire(ctx, s, "b", "y@b")
	require.NoError(t, err)
	tokens := s.Tokens()
	require.Len(t, tokens, 2)

	// The holder process dies: its parts end here and nothing reaches the
	// groups, which still hold the grants.
	s.end(replica.ErrClosed, leaveParts)
	for _, p := range []*Part{x.p, y.p} {
		p.rt.forget(p)
	}

	again, err := tg.h.Resume(ctx, tokens, o, "owner")
	require.NoError(t, err)
	require.Equal(t, "owner", again.Owner())
	require.Equal(t, s.ID(), again.ID())
	held := again.Held(false)
	require.Len(t, held, 2)
	require.Equal(t, []string{"x", "y@b"}, []string{held[0].Name(), held[1].Name()})
	require.Equal(t, x.Token(), held[0].Token())
	require.Equal(t, y.Token(), held[1].Token())
	id, ok := again.PartID("b")
	require.True(t, ok)
	require.Equal(t, y.p.ID(), id)
	require.NoError(t, held[1].GiveBack(ctx))
	require.NoError(t, again.Close(ctx))

	// A part that is over is left out of a resume; the default one is not.
	_, err = tg.h.Resume(ctx, tokens, o, nil)
	require.ErrorIs(t, err, ErrSessionExpired)
}

// Below log version 11 a group cannot write a fenced resume
// (fsm.ErrVersionGated): an adoption then resumes each part unfenced, as
// before (last writer wins, resume.go), and keeps every grant with its
// token. Without the fallback the adoption fails, and a deployment in the
// middle of a rolling upgrade could adopt no session.
func TestAdoptionBelowTheFencedResumeResumesUnfenced(t *testing.T) {
	nonces := map[string]uint64{"": 71, "b": 72}
	o := Options{TTL: 5 * time.Second, Margin: time.Second, Nonce: func(g string) uint64 { return nonces[g] }}
	ctx, tg, s := openInTwoGroups(t, 2*time.Minute, o)
	x, err := acquire(ctx, s, "", "x")
	require.NoError(t, err)
	y, err := acquire(ctx, s, "b", "y@b")
	require.NoError(t, err)
	// The holder's replica is gone: its copy ends here, and the groups
	// still hold the grants.
	s.end(replica.ErrClosed, leaveParts)
	for _, p := range []*Part{x.p, y.p} {
		p.rt.forget(p)
	}
	gated := map[string]*belowFencedResume{}
	tg.groups.mu.Lock()
	for _, g := range []string{"", "b"} {
		gated[g] = &belowFencedResume{Group: tg.groups.m[g]}
		tg.groups.m[g] = gated[g]
	}
	tg.groups.mu.Unlock()

	again, err := tg.h.Adopt(ctx, s.ID(), []string{"", "b"}, o, "adopter")
	require.NoError(t, err, "an adoption where the groups cannot write a fenced resume")
	held := again.Held(false)
	require.Len(t, held, 2)
	require.Equal(t, []string{"x", "y@b"}, []string{held[0].Name(), held[1].Name()})
	require.Equal(t, []uint64{x.Token(), y.Token()}, []uint64{held[0].Token(), held[1].Token()})
	for g, r := range gated {
		require.Equal(t, int32(1), r.fenced.Load(), "group %q: the fenced resume asked first", g)
		require.Equal(t, int32(1), r.unfenced.Load(), "group %q: then the unfenced one", g)
	}
	require.NoError(t, again.Close(ctx))
}

// belowFencedResume is a group whose log version is below 11: it refuses
// a fenced resume as such a group does, and passes every other command on.
type belowFencedResume struct {
	Group
	fenced, unfenced atomic.Int32
}

func (g *belowFencedResume) Propose(ctx context.Context, c fsm.Command) (fsm.Result, error) {
	if c.Kind == fsm.KindResume && c.Fence {
		g.fenced.Add(1)
		return fsm.Result{}, fmt.Errorf("%w: a fenced resume", fsm.ErrVersionGated)
	}
	if c.Kind == fsm.KindResume {
		g.unfenced.Add(1)
	}
	return g.Group.Propose(ctx, c)
}

// A part waiting for its resume, on a replica that restores a snapshot
// taken before the session was opened (a lagging replica catching up), is
// not expired for it: the resume applies after the snapshot, and the grant
// it keeps must reach the part. The fault checker caught the opposite (a
// resumed session whose Locks lacked the lock its group kept; leader-crash).
func TestResumingPartSurvivesAnOlderSnapshot(t *testing.T) {
	h := NewHost(Config{ReplicaID: 2, ProposalTimeout: time.Second, RTT: 10 * time.Millisecond,
		Clock: clock.Real, Log: quiet, Groups: &testGroups{m: map[string]Group{}}, UnknownGroup: errUnknown})
	t.Cleanup(func() { h.Close(replica.ErrClosed) })

	// The group's history: the session opens at 20, is granted "x" at 21
	// and is resumed by this replica's attempt at 22.
	const nonce, attempt, ttl = 77, 9001, uint64(10 * time.Second)
	before := fsm.New() // a snapshot from before the open
	before.Apply(10, []fsm.Command{{Kind: fsm.KindOpenSession, Nonce: 5, TTL: ttl}})
	after := fsm.New()
	after.Apply(10, []fsm.Command{{Kind: fsm.KindOpenSession, Nonce: 5, TTL: ttl}})
	rs, _ := after.Apply(20, []fsm.Command{{Kind: fsm.KindOpenSession, Nonce: nonce, TTL: ttl}})
	id := rs[0].Value
	rs, _ = after.Apply(21, []fsm.Command{{Kind: fsm.KindAcquire, Session: id, Seq: 1, Name: "x", Wait: true}})
	require.Equal(t, fsm.Granted, rs[0].Status)
	rs, _ = after.Apply(22, []fsm.Command{{Kind: fsm.KindResume, Session: id, Nonce: nonce, Owner: 2, Target: attempt, TTL: ttl}})
	require.Equal(t, fsm.OK, rs[0].Status)

	s := h.newSession(Options{TTL: time.Duration(ttl), Margin: time.Second}, nil)
	rt := h.router("b")
	p := rt.newPart(s, id, nonce)
	p.resume.Store(attempt)
	rt.mu.Lock()
	rt.parts[id] = p
	rt.mu.Unlock()

	rt.Restored(before)
	require.False(t, p.ended(), "a snapshot from before the session's open does not end the part waiting for its resume")
	require.Empty(t, p.held(false))

	rt.Restored(after)
	require.False(t, p.ended())
	held := p.held(false)
	require.Len(t, held, 1, "the snapshot that covers the resume hands the part the grant it kept")
	require.Equal(t, "x", held[0].Name())
	require.Equal(t, uint64(21)<<fsm.TokenShift, held[0].Token())
	require.Zero(t, p.resume.Load(), "the resume is over")
}

// A holder that finds its session over finds each of its locks over too,
// in every group: the session's end ends its parts, and their grants,
// before Done closes. The test holds the named part's lock, so an end that
// closed Done first is caught between the two.
func TestSessionEndsItsPartsFirst(t *testing.T) {
	ctx, _, s := openInTwoGroups(t, 2*time.Minute, Options{TTL: 30 * time.Second, Margin: time.Second})
	y, err := acquire(ctx, s, "b", "y@b")
	require.NoError(t, err)
	y.p.mu.Lock()
	go s.Abandon(errors.New("test: over"))
	select {
	case <-s.done:
		open := !closed(y.done) // not Done: it takes the part's lock
		y.p.mu.Unlock()
		require.False(t, open, "the session's Done closed while a lock in b was still held")
	case <-time.After(200 * time.Millisecond):
		// The end waits for the part, as it should: let it go on.
		y.p.mu.Unlock()
	}
	<-s.Done()
	require.True(t, closed(y.Done()))
	require.ErrorContains(t, s.Err(), "test: over")
}
