package fsm

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func campaignCmd(s, seq uint64, name, value string) Command {
	return Command{Kind: KindCampaign, Session: s, Seq: seq, Name: name, Value: value, Wait: true}
}

func resignCmd(s, seq uint64, name string, token uint64) Command {
	return Command{Kind: KindResign, Session: s, Seq: seq, Name: name, Token: token}
}

func proclaimCmd(s, seq uint64, name string, token uint64, value string) Command {
	return Command{Kind: KindProclaim, Session: s, Seq: seq, Name: name, Token: token, Value: value}
}

func electedEv(s, seq uint64, name string, token uint64, value string) Event {
	return Event{Kind: EventElected, Session: s, Seq: seq, Token: token, Name: name, Value: value}
}

func deposedEv(why Reason, s, seq uint64, name string, token uint64) Event {
	return Event{Kind: EventDeposed, Reason: why, Session: s, Seq: seq, Token: token, Name: name}
}

func proclaimedEv(s, seq uint64, name string, token uint64, value string) Event {
	return Event{Kind: EventProclaimed, Session: s, Seq: seq, Token: token, Name: name, Value: value}
}

// leaderModel follows the leader of every election from the events alone,
// as an observer on a replica does. It fails if an election gets a second
// leader, if a deposition or proclamation names another term than the
// current one, or if a session ends still leading.
type leaderModel map[string]Event

func leadersOf(st *State) leaderModel {
	m := leaderModel{}
	for name, e := range st.elections.byName() {
		h := e.oldest()
		m[name] = electedEv(h.s.id, h.seq, name, h.token, e.value())
	}
	return m
}

func (m leaderModel) observe(evs []Event) error {
	for _, e := range evs {
		cur, led := m[e.Name]
		same := led && cur.Session == e.Session && cur.Seq == e.Seq && cur.Token == e.Token
		switch e.Kind {
		case EventElected:
			if led {
				return fmt.Errorf("election %q: %d/%d elected while %d/%d leads", e.Name, e.Session, e.Seq, cur.Session, cur.Seq)
			}
			m[e.Name] = e
		case EventDeposed:
			if !same {
				return fmt.Errorf("deposition %+v does not match leader %+v", e, cur)
			}
			delete(m, e.Name)
		case EventProclaimed:
			if !same {
				return fmt.Errorf("proclamation %+v does not match leader %+v", e, cur)
			}
			cur.Value = e.Value
			m[e.Name] = cur
		case EventKept:
			if e.Election && (!same || cur.Value != e.Value) {
				return fmt.Errorf("resumed session keeps %+v, but the leader is %+v", e, cur)
			}
		case EventSessionEnded:
			for name, cur := range m {
				if cur.Session == e.Session {
					return fmt.Errorf("session %d ended still leading %q", e.Session, name)
				}
			}
		}
	}
	return nil
}

func (m leaderModel) matches(st *State) error {
	if len(m) != st.elections.len() {
		return fmt.Errorf("events announce %d leaders, state has %d elections", len(m), st.elections.len())
	}
	for name, e := range m {
		info := st.Election(name)
		// Events carry no names or times: the name is the session's, and
		// the time TestGrantTimes checks.
		want := ElectionInfo{Name: name, Led: true, Token: e.Token, Session: e.Session, Seq: e.Seq,
			Value: e.Value, Candidates: info.Candidates, ElectedAt: info.ElectedAt}
		if s := st.sessions[e.Session]; s != nil {
			want.SessionName = s.name
		}
		if info != want {
			return fmt.Errorf("election %q is %+v, events say %+v", name, info, e)
		}
	}
	return nil
}

// checkElectionInvariants checks the election half of the state, and the
// structures sessions share between locks and elections.
func checkElectionInvariants(st *State) error {
	claim := claims{}.claim
	for name, l := range st.locks.byName() {
		if l.election || l.value() != "" {
			return fmt.Errorf("lock %q is marked as an election", name)
		}
		for h := range l.grants {
			if err := claim(h.s, h.seq, "holding lock "+name); err != nil {
				return err
			}
		}
		for w := l.next(); w != nil; w = w.link.next {
			if err := claim(w.s, w.seq, "waiting for lock "+name); err != nil {
				return err
			}
		}
	}
	candidates := 0
	for name, e := range st.elections.byName() {
		h := e.oldest()
		switch {
		case e.name != name || !ValidName(name) || !e.election || st.elections.get(name) != e:
			return fmt.Errorf("election %q stored as %q (election=%v)", e.name, name, e.election)
		case h == nil:
			return fmt.Errorf("election %q exists without a leader", name)
		case e.holders.n != 1 || e.shared || e.permits() != 0:
			return fmt.Errorf("election %q has %d leaders", name, e.holders.n)
		case st.sessions[h.s.id] != h.s:
			return fmt.Errorf("election %q led by dead session %d", name, h.s.id)
		case !inList(&h.s.leads, h):
			return fmt.Errorf("election %q not in its leader's list", name)
		case h.token == 0 || h.token > st.lastToken:
			return fmt.Errorf("election %q has token %d, last %d", name, h.token, st.lastToken)
		case len(e.value()) > MaxValueLen:
			return fmt.Errorf("election %q: value of %d bytes", name, len(e.value()))
		}
		if err := claim(h.s, h.seq, "leading "+name); err != nil {
			return err
		}
		n, err := checkQueue(st, name, e, electionQueue, claim)
		if err != nil {
			return err
		}
		candidates += n
	}
	inSessions := 0
	for id, s := range st.sessions {
		for h := range s.leads.all {
			if st.elections.get(h.l.name) != h.l || h.s != s || h.l.oldest() != h {
				return fmt.Errorf("session %d: leads %q, which it does not", id, h.l.name)
			}
		}
		for seq, w := range s.campaigns {
			if w.s != s || w.seq != seq || w.l == nil || st.elections.get(w.l.name) != w.l {
				return fmt.Errorf("session %d: candidacy %d is dangling", id, seq)
			}
		}
		inSessions += len(s.campaigns)
	}
	if candidates != st.campaigning || inSessions != st.campaigning {
		return fmt.Errorf("campaigning=%d, queues hold %d, sessions %d", st.campaigning, candidates, inSessions)
	}
	return nil
}

func TestCampaignLeadsAtOnceOrQueues(t *testing.T) {
	h, a, b := twoSessions(t)
	before := h.st.Grants()
	r, evs := h.one(campaignCmd(a, 1, "primary", "a:7001"))
	require.Equal(t, Result{Status: Granted, Value: h.idx << TokenShift}, r)
	require.Equal(t, []Event{electedEv(a, 1, "primary", r.Value, "a:7001")}, evs)
	require.Equal(t, before+1, h.st.Grants())
	require.Equal(t, ElectionInfo{Name: "primary", Led: true, Token: r.Value, Session: a, Seq: 1, Value: "a:7001"},
		h.st.Election("primary"))
	info, ok := h.st.Leading(a, 1)
	require.True(t, ok)
	require.Equal(t, r.Value, info.Token)

	q, evs := h.one(campaignCmd(b, 1, "primary", "b:7001"))
	require.Equal(t, Result{Status: Queued}, q)
	require.Empty(t, evs)
	require.True(t, h.st.Campaigning(b, 1))
	require.Equal(t, 1, h.st.Election("primary").Candidates)
	_, ok = h.st.Leading(b, 1)
	require.False(t, ok)
	require.Equal(t, before+1, h.st.Grants(), "queueing grants nothing")
	ne, nc := h.st.ElectionCounts()
	require.Equal(t, [2]int{1, 1}, [2]int{ne, nc})

	require.Equal(t, ElectionInfo{Name: "nobody"}, h.st.Election("nobody"))
}

// Candidates lead in FIFO order, each with a larger token, and each change
// of leader is exactly one grant.
func TestResignHandsOverInFIFOOrder(t *testing.T) {
	h := newHarness(t)
	var ss []uint64
	for n := range uint64(5) {
		ss = append(ss, h.open(100+n))
	}
	r, _ := h.one(campaignCmd(ss[0], 1, "E", "v0"))
	token := r.Value
	for i, s := range ss[1:] {
		r, _ := h.one(campaignCmd(s, 1, "E", fmt.Sprint("v", i+1)))
		require.Equal(t, Queued, r.Status)
	}
	for i := range ss {
		grants := h.st.Grants()
		r, evs := h.one(resignCmd(ss[i], 2, "E", token))
		require.Equal(t, Result{Status: OK}, r)
		require.Equal(t, deposedEv(ReasonReleased, ss[i], 1, "E", token), evs[0])
		if i+1 == len(ss) {
			require.Len(t, evs, 1)
			require.Equal(t, grants, h.st.Grants())
			break
		}
		require.Len(t, evs, 2)
		next := evs[1]
		require.Equal(t, electedEv(ss[i+1], 1, "E", next.Token, fmt.Sprint("v", i+1)), next, "the head of the queue leads with its own value")
		require.Greater(t, next.Token, token)
		require.Equal(t, grants+1, h.st.Grants(), "one grant per change")
		require.Equal(t, len(ss)-i-2, h.st.Election("E").Candidates)
		token = next.Token
	}
	require.Equal(t, ElectionInfo{Name: "E"}, h.st.Election("E"))
	ne, nc := h.st.ElectionCounts()
	require.Equal(t, [2]int{0, 0}, [2]int{ne, nc}, "an election nobody leads is forgotten")
}

func TestResignNeedsTheCurrentTerm(t *testing.T) {
	h, a, b := twoSessions(t)
	r, _ := h.one(campaignCmd(a, 1, "E", "a"))
	h.one(campaignCmd(b, 1, "E", "b"))
	for _, c := range []Command{
		resignCmd(a, 2, "E", r.Value+1), // wrong token
		resignCmd(b, 2, "E", r.Value),   // not the leader
		resignCmd(a, 3, "F", r.Value),   // another election
		relCmd(a, 4, "E", r.Value),      // a lock of the same name
	} {
		got, evs := h.one(c)
		require.Equal(t, Result{Status: NotHeld}, got, "%+v", c)
		require.Empty(t, evs)
	}
	require.Equal(t, a, h.st.Election("E").Session)

	got, _ := h.one(resignCmd(a, 5, "E", r.Value))
	require.Equal(t, OK, got.Status)
	got, evs := h.one(resignCmd(a, 6, "E", r.Value))
	require.Equal(t, Result{Status: NotHeld}, got, "a late resign cannot depose the successor")
	require.Empty(t, evs)
	require.Equal(t, b, h.st.Election("E").Session)
	again, _ := h.one(resignCmd(a, 5, "E", r.Value))
	require.Equal(t, Result{Status: OK}, again, "a retry gets the first reply")
}

func TestProclaim(t *testing.T) {
	h, a, b := twoSessions(t)
	r, _ := h.one(campaignCmd(a, 1, "E", "old"))
	h.one(campaignCmd(b, 1, "E", "b"))
	grants := h.st.Grants()

	got, evs := h.one(proclaimCmd(a, 2, "E", r.Value, "new"))
	require.Equal(t, Result{Status: OK}, got)
	require.Equal(t, []Event{proclaimedEv(a, 1, "E", r.Value, "new")}, evs, "the event names the term, not the proclaim request")
	info := h.st.Election("E")
	require.Equal(t, "new", info.Value)
	require.Equal(t, r.Value, info.Token, "same term, same token")
	require.Equal(t, grants, h.st.Grants(), "a proclamation is no grant")

	for _, c := range []Command{
		proclaimCmd(a, 3, "E", r.Value+1, "x"), // wrong token
		proclaimCmd(b, 2, "E", r.Value, "x"),   // not the leader
		proclaimCmd(a, 4, "F", r.Value, "x"),   // no such election
	} {
		got, evs := h.one(c)
		require.Equal(t, Result{Status: NotHeld}, got, "%+v", c)
		require.Empty(t, evs)
	}
	got, evs = h.one(proclaimCmd(a, 5, "E", r.Value, strings.Repeat("v", MaxValueLen+1)))
	require.Equal(t, Result{Status: Invalid}, got)
	require.Empty(t, evs)
	long := strings.Repeat("v", MaxValueLen)
	got, _ = h.one(proclaimCmd(a, 6, "E", r.Value, long))
	require.Equal(t, OK, got.Status, "MaxValueLen bytes is fine")
	got, evs = h.one(proclaimCmd(a, 2, "E", r.Value, "new"))
	require.Equal(t, Result{Status: OK}, got, "a retry gets the first reply")
	require.Empty(t, evs, "a retried proclaim is not applied again")
	require.Equal(t, long, h.st.Election("E").Value, "so it cannot bring back an older value")

	h.one(resignCmd(a, 7, "E", r.Value))
	got, _ = h.one(proclaimCmd(a, 8, "E", r.Value, "late"))
	require.Equal(t, Result{Status: NotHeld}, got, "a deposed leader cannot proclaim")
	require.Equal(t, "b", h.st.Election("E").Value)
}

func TestElectionsAndLocksAreSeparateNamespaces(t *testing.T) {
	h, a, b := twoSessions(t)
	l, _ := h.one(acqCmd(a, 1, "x", false))
	e, _ := h.one(campaignCmd(b, 1, "x", "b"))
	require.Equal(t, Granted, l.Status)
	require.Equal(t, Granted, e.Status, "an election does not wait for a lock of the same name")
	require.True(t, h.st.Lock("x").Held)
	require.Equal(t, b, h.st.Election("x").Session)
	ns, nl, nw := h.st.Counts()
	require.Equal(t, [3]int{2, 1, 0}, [3]int{ns, nl, nw}, "elections are not counted as locks")
	info, _ := h.st.Session(b)
	require.Zero(t, info.Held)

	r, _ := h.one(acqCmd(b, 2, "x", false))
	require.Equal(t, Locked, r.Status)
	r, _ = h.one(campaignCmd(a, 2, "x", "a"))
	require.Equal(t, Queued, r.Status)
	r, _ = h.one(relCmd(b, 3, "x", e.Value))
	require.Equal(t, NotHeld, r.Status, "a leadership cannot be released as a lock")
	_, evs := h.one(relCmd(a, 3, "x", l.Value))
	require.Equal(t, []Event{freedEv(ReasonReleased, a, 1, "x", l.Value)}, evs, "freeing the lock grants no candidate")
	require.Equal(t, b, h.st.Election("x").Session)
}

func TestCancelWhileCampaigning(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.open(1), h.open(2), h.open(3)
	r, _ := h.one(campaignCmd(a, 1, "E", "a"))
	h.apply(campaignCmd(b, 1, "E", "b"), campaignCmd(c, 1, "E", "c"))

	got, evs := h.one(cancelCmd(b, 1))
	require.Equal(t, Result{Status: Cancelled}, got)
	require.Empty(t, evs, "leaving the queue grants nothing")
	require.False(t, h.st.Campaigning(b, 1))
	require.Equal(t, 1, h.st.Election("E").Candidates)
	dup, _ := h.one(campaignCmd(b, 1, "E", "b"))
	require.Equal(t, Result{Status: Cancelled}, dup, "a delayed duplicate of the cancelled campaign does nothing")
	require.Equal(t, 1, h.st.Election("E").Candidates)

	// A cancel that finds its campaign already elected deposes it.
	_, evs = h.one(resignCmd(a, 2, "E", r.Value))
	next := evs[1]
	require.Equal(t, c, next.Session)
	_, evs = h.one(cancelCmd(c, 1))
	require.Equal(t, []Event{deposedEv(ReasonCancelled, c, 1, "E", next.Token)}, evs)
	require.Equal(t, ElectionInfo{Name: "E"}, h.st.Election("E"))
}

// When a session ends, its candidacies leave their queues and each election
// it leads passes to the head of its queue, in the one entry, before the
// session's end is reported.
func TestSessionEndDeposesAndWithdraws(t *testing.T) {
	for _, end := range []struct {
		why Reason
		cmd func(s uint64) Command
	}{
		{ReasonClosed, closeCmd},
		{ReasonExpired, func(s uint64) Command { return expireCmd(s, ^uint64(0)) }},
	} {
		t.Run(end.why.String(), func(t *testing.T) {
			h := newHarness(t)
			a, b, c := h.open(1), h.open(2), h.open(3)
			e1, _ := h.one(campaignCmd(a, 1, "E1", "a"))
			e2, _ := h.one(campaignCmd(a, 2, "E2", "a"))
			lk, _ := h.one(acqCmd(a, 3, "L", false))
			h.apply(campaignCmd(b, 1, "E1", "b"), campaignCmd(c, 1, "E2", "c"), campaignCmd(a, 4, "E2", "a again"),
				acqCmd(c, 2, "L", true))
			grants := h.st.Grants()
			_, evs := h.one(end.cmd(a))
			tok := h.idx << TokenShift
			require.Equal(t, []Event{
				freedEv(end.why, a, 3, "L", lk.Value), grantedEv(c, 2, "L", tok),
				deposedEv(end.why, a, 1, "E1", e1.Value), electedEv(b, 1, "E1", tok+1, "b"),
				deposedEv(end.why, a, 2, "E2", e2.Value), electedEv(c, 1, "E2", tok+2, "c"),
				endedEv(end.why, a),
			}, evs)
			require.Equal(t, grants+3, h.st.Grants())
			require.Zero(t, h.st.Election("E2").Candidates, "the ended session's candidacy left the queue")
		})
	}
}

func TestCampaignRetries(t *testing.T) {
	h, a, b := twoSessions(t)
	r, _ := h.one(campaignCmd(a, 1, "E", "a"))
	again, evs := h.one(campaignCmd(a, 1, "E", "a"))
	require.Equal(t, r, again, "a retry gets the first reply")
	require.Empty(t, evs)
	q, _ := h.one(campaignCmd(b, 1, "E", "b"))
	require.Equal(t, Queued, q.Status)
	h.one(resignCmd(a, 2, "E", r.Value))
	g, _ := h.one(campaignCmd(b, 1, "E", "b"))
	require.Equal(t, Result{Status: Granted, Value: h.st.Election("E").Token}, g, "a retry after the grant learns the token")

	// Under version 1 (an old log replayed) the floor stays at a queued
	// campaign while the session makes maxRepliesV1 further requests,
	// evicting its reply; its retry must not queue it twice.
	r2, _ := h.one(campaignCmd(a, 3, "E", "a"))
	require.Equal(t, Queued, r2.Status)
	cmds := make([]Command, maxRepliesV1)
	for i := range cmds {
		cmds[i] = Command{Kind: KindRelease, Session: a, Seq: uint64(i + 4), Floor: 3, Name: "none", Token: 1, v1: true}
	}
	h.apply(cmds...)
	_, kept := h.st.sessions[a].replies[3]
	require.False(t, kept, "the campaign's reply was evicted")
	got, _ := h.one(Command{Kind: KindCampaign, Session: a, Seq: 3, Floor: 3, Name: "E", Value: "a", Wait: true, v1: true})
	require.Equal(t, Result{Status: Queued}, got)
	require.Equal(t, 1, h.st.Election("E").Candidates)
}

func TestInvalidElectionCommands(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	for _, c := range []Command{
		campaignCmd(a, 1, "", "v"),
		campaignCmd(a, 2, "a\x00b", "v"),
		campaignCmd(a, 3, strings.Repeat("n", MaxNameLen+1), "v"),
		campaignCmd(a, 4, "\xff", "v"),
		campaignCmd(a, 5, "ok", strings.Repeat("v", MaxValueLen+1)),
	} {
		grants := h.st.Grants()
		r, evs := h.one(c)
		require.Equal(t, Result{Status: Invalid}, r)
		require.Empty(t, evs)
		require.Equal(t, ElectionInfo{Name: c.Name}, h.st.Election(c.Name))
		require.Equal(t, grants, h.st.Grants())
		ne, nc := h.st.ElectionCounts()
		require.Zero(t, ne+nc)
	}
	for _, c := range []Command{
		campaignCmd(77, 1, "E", "v"), resignCmd(77, 1, "E", 1), proclaimCmd(77, 1, "E", 1, "v"),
	} {
		r, _ := h.one(c)
		require.Equal(t, Result{Status: UnknownSession}, r)
	}
	r, _ := h.one(campaignCmd(a, 9, "ok", strings.Repeat("v", MaxValueLen)))
	require.Equal(t, Granted, r.Status)
}

// Thousands of candidates: each change of leader grants exactly one of
// them, and the others' replicas hear nothing about them.
func TestManyCandidatesOneGrantPerChange(t *testing.T) {
	h := newHarness(t)
	const n = 5000
	opens := make([]Command, 50)
	for i := range opens {
		opens[i] = openCmd(uint64(i + 1))
	}
	rs, _ := h.apply(opens...)
	cmds := make([]Command, n)
	for i := range cmds {
		cmds[i] = campaignCmd(rs[i%len(rs)].Value, uint64(1+i/len(rs)), "primary", fmt.Sprint("c", i))
	}
	_, evs := h.apply(cmds...)
	require.Len(t, evs, 1, "one leader, everyone else queued")
	leader := evs[0]
	require.Equal(t, n-1, h.st.Election("primary").Candidates)
	for i := 1; i < 200; i++ {
		grants := h.st.Grants()
		_, evs := h.one(resignCmd(leader.Session, 1_000_000+uint64(i), "primary", leader.Token))
		require.Len(t, evs, 2)
		require.Equal(t, EventElected, evs[1].Kind)
		require.Equal(t, fmt.Sprint("c", i), evs[1].Value, "FIFO")
		require.Equal(t, grants+1, h.st.Grants())
		leader = evs[1]
	}
	// Closing a session that leads and has many candidacies: one grant.
	grants := h.st.Grants()
	_, evs = h.one(closeCmd(leader.Session))
	elected := 0
	for _, e := range evs {
		if e.Kind == EventElected {
			elected++
		}
	}
	require.Equal(t, 1, elected)
	require.Equal(t, grants+1, h.st.Grants())
	roundTrip(t, h.st)
}

// appendElections writes a snapshot's election section.
func appendElections(b []byte, elections []snapLock, version uint64) []byte {
	u := binary.AppendUvarint
	b = u(b, uint64(len(elections)))
	for _, e := range elections {
		b = u(u(u(appendString(b, e.name), e.holder), e.seq), e.token)
		if version >= 4 {
			b = u(b, e.maxHold)
		}
		if version >= 5 {
			b = u(b, e.at)
		}
		b = appendString(b, e.value)
		b = u(b, uint64(len(e.queue)))
		for i, w := range e.queue {
			b = appendString(u(u(b, w[0]), w[1]), e.values[i])
			if version >= 4 {
				b = u(b, 0)
			}
			if version >= 5 {
				b = u(b, e.queueAtOf(i))
			}
		}
	}
	return b
}

func buildElections(tb testing.TB) *harness {
	h := buildRich(tb)
	ids := []uint64{}
	for _, s := range h.st.Sessions() {
		ids = append(ids, s.ID)
	}
	h.apply(campaignCmd(ids[0], 50, "alpha", "leader of alpha"), campaignCmd(ids[1], 50, "alpha", ""),
		campaignCmd(ids[2], 50, "alpha", "third"), campaignCmd(ids[0], 51, "alpha", "self"))
	h.apply(campaignCmd(ids[3], 50, "zeta/ü", strings.Repeat("z", MaxValueLen)))
	r, _ := h.one(campaignCmd(ids[1], 52, "gone", "x"))
	h.one(resignCmd(ids[1], 53, "gone", r.Value))
	h.one(proclaimCmd(ids[3], 54, "zeta/ü", h.st.Election("zeta/ü").Token, "proclaimed"))
	return h
}

func TestElectionSnapshotRoundTrip(t *testing.T) {
	h := buildElections(t)
	got := roundTrip(t, h.st)
	require.Equal(t, h.st.Grants(), got.Grants())
	for _, name := range []string{"alpha", "zeta/ü", "gone"} {
		require.Equal(t, h.st.Election(name), got.Election(name))
	}
	require.NoError(t, checkElectionInvariants(got))
	require.Equal(t, leadersOf(h.st), leadersOf(got))

	// The restored state goes on alike.
	restored := harnessFor(t, got)
	ids := []uint64{}
	for _, s := range h.st.Sessions() {
		ids = append(ids, s.ID)
	}
	alpha := h.st.Election("alpha")
	for _, c := range []Command{
		resignCmd(alpha.Session, 60, "alpha", alpha.Token),
		cancelCmd(ids[2], 50),
		closeCmd(ids[1]),
		campaignCmd(ids[3], 61, "alpha", "late"),
	} {
		r1, e1 := h.apply(c)
		r2, e2 := restored.apply(c)
		require.Equal(t, r1, r2)
		require.Equal(t, e1, e2)
	}
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, restored.st))
}

// A version 1 snapshot, written before elections existed, still restores:
// no elections, and grants counted from zero.
func TestRestoreVersion1Snapshot(t *testing.T) {
	im := validImage()
	im.version, im.elections = 1, nil
	st, err := DecodeSnapshot(im.bytes())
	require.NoError(t, err)
	require.NoError(t, checkInvariants(st, true))
	require.NoError(t, checkElectionInvariants(st))
	require.Zero(t, st.Grants())
	require.True(t, st.Lock("alpha").Held)
	require.Equal(t, ElectionInfo{Name: "alpha"}, st.Election("alpha"))

	now := validImage()
	now.grants, now.elections, now.leaderMark, now.groupID = 0, nil, 0, 0
	now.sessions[1].resumed = 0
	now.sessions[0].name, now.locks[0].at, now.locks[0].queueAt = "", 0, nil // version 5's
	now.ops = nil                                                            // version 6's
	now.version, now.table = 6, nil                                          // version 7's gate and table: a restored version-1 group writes the baseline
	require.Equal(t, now.bytes(), saveBytes(t, st), "it is saved at its gate's version, the baseline")

	v1 := im
	v1.trailing = appendElections(nil, nil, 2)
	_, err = DecodeSnapshot(v1.bytes())
	require.ErrorIs(t, err, ErrCorrupt, "version 1 has no election section")
}

func TestRestoreRejectsInconsistentElections(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(im *snapImage)
	}{
		{"no election section", func(im *snapImage) { im.omitElections = true }},
		{"election led by an unknown session", func(im *snapImage) { im.elections[0].holder = 3 << TokenShift }},
		{"election led by nobody", func(im *snapImage) { im.elections[0].holder = 0 }},
		{"candidate of an unknown session", func(im *snapImage) { im.elections[0].queue[0][0] = 42 }},
		{"empty election name", func(im *snapImage) { im.elections[0].name = "" }},
		{"NUL in an election name", func(im *snapImage) { im.elections[0].name = "a\x00" }},
		{"duplicate election name", func(im *snapImage) {
			im.elections = append(im.elections, snapLock{name: "alpha", holder: imgA, seq: 7, token: 1})
		}},
		{"token 0", func(im *snapImage) { im.elections[0].token = 0 }},
		{"token beyond the last", func(im *snapImage) { im.elections[0].token = im.lastToken + 1 }},
		{"value too long", func(im *snapImage) { im.elections[0].value = strings.Repeat("v", MaxValueLen+1) }},
		{"candidate value too long", func(im *snapImage) { im.elections[0].values[0] = strings.Repeat("v", MaxValueLen+1) }},
		{"leader's request also holds a lock", func(im *snapImage) { im.elections[0].seq = 4 }},
		{"candidate's request also waits for a lock", func(im *snapImage) { im.elections[0].queue[0][1] = 3 }},
		{"candidate is also the leader's request", func(im *snapImage) { im.elections[0].queue[0] = [2]uint64{imgB, 5} }},
		{"election count beyond the data", func(im *snapImage) {
			im.omitElections = true
			im.trailing = binary.AppendUvarint(nil, 1000)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := validImage()
			im.elections = slices.Clone(im.elections)
			for i := range im.elections {
				im.elections[i].queue = slices.Clone(im.elections[i].queue)
				im.elections[i].values = slices.Clone(im.elections[i].values)
			}
			tc.mutate(&im)
			requireCorrupt(t, im.bytes())
		})
	}
}

// electionDriver mixes election commands into the lock driver's stream, on
// the same sessions and on names that locks use too.
type electionDriver struct {
	*driver
	leaders []Event // recent leaders, possibly deposed since
}

var electionNames = []string{"a", "b", "e/ü"}

func (d *electionDriver) electionName() string { return d.pick(electionNames) }

func (d *electionDriver) value() string {
	switch d.n(20) {
	case 0:
		return strings.Repeat("v", MaxValueLen+int(d.n(2))) // the limit, or one over it
	case 1:
		return ""
	}
	return fmt.Sprint("v", d.n(5))
}

func (d *electionDriver) command() Command {
	if d.n(2) == 0 {
		return d.driver.command()
	}
	switch d.n(8) {
	case 0, 1, 2:
		s := d.session()
		seq := d.newSeq(s)
		if d.n(6) == 0 {
			seq = d.oldSeq(s)
		}
		return Command{Kind: KindCampaign, Session: s, Seq: seq, Floor: d.floorOf(s), Name: d.electionName(), Value: d.value(), Wait: d.n(4) != 0}
	case 3, 4:
		if len(d.leaders) > 0 && d.n(5) != 0 {
			l := d.leaders[d.n(uint64(len(d.leaders)))]
			return Command{Kind: KindResign, Session: l.Session, Seq: d.newSeq(l.Session), Floor: d.floorOf(l.Session), Name: l.Name, Token: l.Token}
		}
		s := d.session()
		return Command{Kind: KindResign, Session: s, Seq: d.newSeq(s), Floor: d.floorOf(s), Name: d.electionName(), Token: d.n(1 << 20)}
	case 5, 6:
		if len(d.leaders) > 0 && d.n(5) != 0 {
			l := d.leaders[d.n(uint64(len(d.leaders)))]
			return Command{Kind: KindProclaim, Session: l.Session, Seq: d.newSeq(l.Session), Floor: d.floorOf(l.Session), Name: l.Name, Token: l.Token, Value: d.value()}
		}
		s := d.session()
		return Command{Kind: KindProclaim, Session: s, Seq: d.newSeq(s), Floor: d.floorOf(s), Name: d.electionName(), Token: d.n(1 << 20), Value: d.value()}
	default:
		s := d.session()
		return Command{Kind: KindCancel, Session: s, Target: d.oldSeq(s), Floor: d.floorOf(s)}
	}
}

func (d *electionDriver) entry() []Command {
	cmds := make([]Command, 1+d.n(4))
	for i := range cmds {
		cmds[i] = d.command()
	}
	return cmds
}

func (d *electionDriver) observe(cmds []Command, rs []Result, evs []Event) {
	d.driver.observe(cmds, rs, evs)
	for _, e := range evs {
		if e.Kind == EventElected {
			d.leaders = append(d.leaders, e)
			if len(d.leaders) > 16 {
				d.leaders = d.leaders[1:]
			}
		}
	}
}

func TestElectionReplayIsDeterministic(t *testing.T) {
	d := &electionDriver{driver: newDriver(rand.New(rand.NewPCG(0xe1, 0xec)))}
	a, b := newHarness(t), newHarness(t)
	var c *harness
	cov := newCoverage()
	deposed := map[Reason]int{}
	const entries = 3000
	for i := range entries {
		cmds := d.entry()
		ra, ea := a.applyAlike(i, cmds, b, c) // models and invariants
		d.observe(cmds, ra, ea)
		cov.add(ra, ea)
		for _, e := range ea {
			if e.Kind == EventDeposed {
				deposed[e.Reason]++
			}
		}
		if i == entries/2 {
			c = harnessFor(t, roundTrip(t, a.st))
		}
	}
	a.requireConverged(b, c)

	for _, k := range []EventKind{EventElected, EventDeposed, EventProclaimed, EventGranted, EventFreed} {
		require.Greater(t, cov.events[k], 20, "event %d too rare", k)
	}
	for _, r := range []Reason{ReasonReleased, ReasonCancelled, ReasonExpired, ReasonClosed} {
		require.Positive(t, deposed[r], "no leader deposed for %v", r)
	}
	require.Positive(t, cov.statuses[Invalid])
	require.Positive(t, cov.statuses[NotHeld])
}

func FuzzElectionApply(f *testing.F) {
	rng := rand.New(rand.NewPCG(31, 32))
	for _, n := range []int{16, 256, 2048} {
		seed := make([]byte, n)
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		f.Add(seed)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		d := &electionDriver{driver: newDriver(src)}
		a, b := newHarness(t), newHarness(t)
		var c *harness
		for i := 0; len(src.b) > 0 && i < 512; i++ {
			cmds := d.entry()
			ra, ea := a.applyAlike(i, cmds, b, c)
			d.observe(cmds, ra, ea)
			if i == 8 {
				c = harnessFor(t, roundTrip(t, a.st))
			}
			// What the codec carries, it carries exactly; an over-long
			// value is refused before Apply sees it.
			var known []Command
			tooLong := false
			for _, cmd := range cmds {
				if cmd.Kind >= KindOpenSession && cmd.Kind <= maxKind {
					known = append(known, cmd)
					tooLong = tooLong || len(cmd.Value) > MaxValueLen
				}
			}
			if len(known) > 0 {
				got, err := DecodeBatch(AppendBatch(nil, known), nil)
				if tooLong {
					require.ErrorIs(t, err, ErrCorrupt)
				} else {
					require.NoError(t, err)
					require.Equal(t, known, got)
				}
			}
		}
		a.requireConverged(b, c)
	})
}

func TestLockQueriesIgnoreElections(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	r, _ := h.one(campaignCmd(a, 1, "E", "a"))
	_, _, ok := h.st.Grant(a, 1)
	require.False(t, ok, "a leadership is not a lock grant")
	require.False(t, h.st.Holds(a, "E", r.Value))
	h.one(campaignCmd(a, 2, "E", "a"))
	require.False(t, h.st.Queued(a, 2), "a candidacy is not a queued lock request")
	require.True(t, h.st.Campaigning(a, 2))
	info, ok := h.st.Leading(a, 1)
	require.True(t, ok)
	require.Equal(t, "E", info.Name)
	_, ok = h.st.Leading(a, 2)
	require.False(t, ok)
	l, _ := h.one(acqCmd(a, 3, "L", false))
	_, ok = h.st.Leading(a, 3)
	require.False(t, ok, "a lock grant is not a leadership")
	_, ok = h.st.Leading(77, 3)
	require.False(t, ok)
	require.True(t, h.st.Holds(a, "L", l.Value))
}

func inList(list *heldList, h *hold) bool {
	for x := range list.all {
		if x == h {
			return true
		}
	}
	return false
}

// A Campaign without Wait leads at once or fails with Locked, queueing
// nothing and changing nothing.
func TestTryCampaign(t *testing.T) {
	h, a, b := twoSessions(t)
	try := func(s, seq uint64) Command {
		c := campaignCmd(s, seq, "E", "v")
		c.Wait = false
		return c
	}
	r, _ := h.one(try(a, 1))
	require.Equal(t, Granted, r.Status, "no leader: it leads")
	r, evs := h.one(try(b, 1))
	require.Equal(t, Result{Status: Locked}, r)
	require.Empty(t, evs)
	require.Zero(t, h.st.Election("E").Candidates, "nothing queued")
	again, _ := h.one(try(b, 1))
	require.Equal(t, r, again, "a retry gets the first reply")
}
