package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Command constructors, so that tests read like the protocol.

func openCmd(nonce uint64) Command {
	return Command{Kind: KindOpenSession, Nonce: nonce, TTL: 1_000_000_000, Owner: 1}
}

// openCmds is n opens, nonces 1 to n: one entry of them opens n sessions.
func openCmds(n int) []Command {
	cmds := make([]Command, n)
	for i := range cmds {
		cmds[i] = openCmd(uint64(i + 1))
	}
	return cmds
}

func keepAliveCmd(s, floor uint64) Command {
	return Command{Kind: KindKeepAlive, Session: s, Floor: floor}
}

func closeCmd(s uint64) Command { return Command{Kind: KindCloseSession, Session: s} }

func expireCmd(s, keepAlive uint64) Command {
	return Command{Kind: KindExpire, Session: s, Target: keepAlive}
}

func acqCmd(s, seq uint64, name string, wait bool) Command {
	return Command{Kind: KindAcquire, Session: s, Seq: seq, Name: name, Wait: wait}
}

func relCmd(s, seq uint64, name string, token uint64) Command {
	return Command{Kind: KindRelease, Session: s, Seq: seq, Name: name, Token: token}
}

func cancelCmd(s, target uint64) Command {
	return Command{Kind: KindCancel, Session: s, Target: target}
}

// harness drives one State entry by entry at increasing indexes. It copies
// the results and events out of Apply's reused slices, checks that every
// grant's token rises strictly and is derived from the index, tracks the
// holders and leaders the events announce, and checks the state's
// invariants after every entry.
type harness struct {
	tb      testing.TB
	st      *State
	idx     uint64
	lastTok uint64
	holders holderModel
	leaders leaderModel
	queues  queueModel
	delays  delayModel
}

func newHarness(tb testing.TB) *harness {
	return &harness{tb: tb, st: New(), holders: holderModel{}, leaders: leaderModel{}, queues: queueModel{}, delays: delayModel{}}
}

// twoSessions is a new harness with two sessions open (nonces 1 and 2),
// the two that most tests set against each other.
func twoSessions(tb testing.TB) (h *harness, a, b uint64) {
	tb.Helper()
	h = newHarness(tb)
	return h, h.open(1), h.open(2)
}

// harnessFor continues from an existing (for example restored) state.
func harnessFor(tb testing.TB, st *State) *harness {
	return &harness{tb: tb, st: st, idx: st.Index(), lastTok: st.LastToken(), holders: holdersOf(st),
		leaders: leadersOf(st), queues: queuesOf(st), delays: delaysOf(st)}
}

// apply applies cmds as the next entry.
func (h *harness) apply(cmds ...Command) ([]Result, []Event) {
	h.tb.Helper()
	return h.applyAt(h.idx+1, cmds...)
}

// applyAlike applies entry i's cmds to h and to each of others that is
// not nil (copies that must not diverge from h: a second replica, one
// restored from a snapshot), and requires every copy to answer with h's
// results and events, which it returns.
func (h *harness) applyAlike(i int, cmds []Command, others ...*harness) ([]Result, []Event) {
	h.tb.Helper()
	rs, evs := h.apply(cmds...)
	for _, o := range others {
		if o == nil {
			continue
		}
		ro, eo := o.apply(cmds...)
		require.Equal(h.tb, rs, ro, "entry %d", i)
		require.Equal(h.tb, evs, eo, "entry %d", i)
	}
	return rs, evs
}

// requireConverged requires each of others that is not nil to have
// reached h's state byte for byte, and h's state to round-trip through a
// snapshot.
func (h *harness) requireConverged(others ...*harness) {
	h.tb.Helper()
	final := saveBytes(h.tb, h.st)
	for _, o := range others {
		if o != nil {
			require.Equal(h.tb, final, saveBytes(h.tb, o.st))
		}
	}
	roundTrip(h.tb, h.st)
}

func (h *harness) applyAt(idx uint64, cmds ...Command) ([]Result, []Event) {
	h.tb.Helper()
	rs, evs := h.st.Apply(idx, cmds)
	// Copy, and make "nothing" always nil so that replicas compare equal.
	rs, evs = append([]Result(nil), rs...), append([]Event(nil), evs...)
	h.idx = idx
	require.Len(h.tb, rs, len(cmds))
	require.Equal(h.tb, idx, h.st.Index())
	for _, e := range evs {
		if e.Kind != EventGranted && e.Kind != EventElected {
			continue
		}
		require.Greater(h.tb, e.Token, h.lastTok, "tokens must rise strictly")
		require.GreaterOrEqual(h.tb, e.Token, idx<<TokenShift, "token must be derived from the index")
		h.lastTok = e.Token
	}
	require.Equal(h.tb, h.lastTok, h.st.LastToken())
	require.NoError(h.tb, h.holders.observe(evs))
	require.NoError(h.tb, h.holders.matches(h.st))
	require.NoError(h.tb, checkInvariants(h.st, true))
	require.NoError(h.tb, h.leaders.observe(evs))
	require.NoError(h.tb, h.leaders.matches(h.st))
	require.NoError(h.tb, checkElectionInvariants(h.st))
	require.NoError(h.tb, h.queues.observe(evs, h.st))
	require.NoError(h.tb, h.delays.observe(evs, h.st))
	return rs, withoutQueueEvents(evs)
}

// delayModel follows the locks under a lock-delay from the events alone
// (name -> the token whose end began the delay), and checks it against the
// state after every entry. It fails if a delayed lock is granted to
// anyone, if a delay begins other than for a grant just freed by its
// session's expiry or an operator's end of it, or if a delay ends but by
// an Undelay naming its token.
type delayModel map[string]uint64

func delaysOf(st *State) delayModel {
	m := delayModel{}
	for name, l := range st.locks.byName() {
		if delay, token := l.delay(); delay != 0 {
			m[name] = token
		}
	}
	return m
}

func (m delayModel) observe(evs []Event, st *State) error {
	for i, e := range evs {
		switch e.Kind {
		case EventGranted:
			if tok, ok := m[e.Name]; ok {
				return fmt.Errorf("lock %q granted to %d/%d under the delay begun by %d", e.Name, e.Session, e.Seq, tok)
			}
		case EventDelayed:
			if i == 0 || evs[i-1].Kind != EventFreed || evs[i-1].Token != e.Token || evs[i-1].Name != e.Name ||
				(e.Reason != ReasonExpired && e.Reason != ReasonRevoked) || evs[i-1].Reason != e.Reason || e.TTL == 0 {
				return fmt.Errorf("delay %+v does not follow its grant's end by expiry", e)
			}
			m[e.Name] = e.Token
		case EventUndelayed:
			if tok, ok := m[e.Name]; !ok || tok != e.Token {
				return fmt.Errorf("undelay %+v of a lock delayed by %d (%v)", e, tok, ok)
			}
			delete(m, e.Name)
		}
	}
	n := 0
	for name, l := range st.locks.byName() {
		delay, token := l.delay()
		if delay == 0 {
			continue
		}
		n++
		if tok, ok := m[name]; !ok || tok != token {
			return fmt.Errorf("lock %q delayed by %d, events say %d (%v)", name, token, tok, ok)
		}
	}
	if n != len(m) {
		return fmt.Errorf("events say %d delayed locks, the state %d", len(m), n)
	}
	return nil
}

// withoutQueueEvents drops EventQueued and EventUnqueued, which the harness
// checks against the queues itself (queueModel), so that tests can state
// the grants and frees an entry made without them.
func withoutQueueEvents(evs []Event) []Event {
	var out []Event
	for _, e := range evs {
		if e.Kind != EventQueued && e.Kind != EventUnqueued {
			out = append(out, e)
		}
	}
	return out
}

// queueModel follows each lock's queue from the queue events alone, and
// checks it against the state after every entry: a watcher that follows
// the events sees every change of a queue. It also checks FIFO: a request
// is granted out of the queue only from its head, and a lock is granted
// directly (not out of its queue) only while nobody waits for it, so that
// no request, shared or not, overtakes one queued before it.
type queueModel map[string][][2]uint64

func (m queueModel) observe(evs []Event, st *State) error {
	for i, e := range evs {
		req := [2]uint64{e.Session, e.Seq}
		key := e.Name
		if e.Election {
			key = candidatesKey(e.Name)
		}
		switch e.Kind {
		case EventQueued:
			m[key] = append(m[key], req)
		case EventUnqueued:
			q := m[key]
			at := slices.Index(q, req)
			if at < 0 {
				return fmt.Errorf("queue %q: %v left a queue it was not in", key, req)
			}
			if i+1 < len(evs) && (evs[i+1].Kind == EventGranted || evs[i+1].Kind == EventElected) &&
				evs[i+1].Session == e.Session && evs[i+1].Seq == e.Seq && at != 0 {
				return fmt.Errorf("queue %q: %v granted from place %d of its queue", key, req, at)
			}
			m[key] = slices.Delete(q, at, at+1)
		case EventKeptQueued:
			if !slices.Contains(m[key], req) {
				return fmt.Errorf("queue %q: %v kept by a resume but not in the queue %v", key, req, m[key])
			}
		case EventGranted:
			fromQueue := i > 0 && evs[i-1].Kind == EventUnqueued && evs[i-1].Session == e.Session && evs[i-1].Seq == e.Seq
			if !fromQueue && len(m[e.Name]) > 0 {
				return fmt.Errorf("lock %q granted to %v ahead of its queue %v", e.Name, req, m[e.Name])
			}
		}
	}
	for name, q := range m {
		if election, ok := strings.CutPrefix(name, "\x00"); ok {
			if got := st.Election(election).Candidates; got != len(q) {
				return fmt.Errorf("election %q: events say %d candidates, the state %d", election, len(q), got)
			}
			for at, req := range q {
				if p := st.Position(req[0], req[1]); p != at+1 {
					return fmt.Errorf("election %q: %v is at place %d, Position says %d", election, req, at+1, p)
				}
			}
			if len(q) == 0 {
				delete(m, name)
			}
			continue
		}
		if got := st.Lock(name).Waiters; got != len(q) {
			return fmt.Errorf("lock %q: events say %d waiters, the state %d", name, len(q), got)
		}
		for at, req := range q {
			if p := st.Position(req[0], req[1]); p != at+1 {
				return fmt.Errorf("lock %q: %v is at place %d, Position says %d", name, req, at+1, p)
			}
		}
		if l := st.locks.get(name); l != nil {
			at := 0
			for w := range l.queued {
				if q[at] != [2]uint64{w.s.id, w.seq} {
					return fmt.Errorf("lock %q: events say %v at place %d, the state %d/%d", name, q[at], at, w.s.id, w.seq)
				}
				at++
			}
		}
		if len(q) == 0 {
			delete(m, name)
		}
	}
	return nil
}

// one applies a single command as the next entry.
func (h *harness) one(c Command) (Result, []Event) {
	h.tb.Helper()
	rs, evs := h.apply(c)
	return rs[0], evs
}

// open opens a session with nonce and returns its ID.
func (h *harness) open(nonce uint64) uint64 {
	h.tb.Helper()
	r, _ := h.one(openCmd(nonce))
	require.Equal(h.tb, OK, r.Status)
	require.NotZero(h.tb, r.Value)
	return r.Value
}

// grantedEv, freedEv and endedEv build the events Apply reports.
func grantedEv(s, seq uint64, name string, token uint64) Event {
	return Event{Kind: EventGranted, Session: s, Seq: seq, Token: token, Name: name}
}

func freedEv(why Reason, s, seq uint64, name string, token uint64) Event {
	return Event{Kind: EventFreed, Reason: why, Session: s, Seq: seq, Token: token, Name: name}
}

func endedEv(why Reason, s uint64) Event {
	return Event{Kind: EventSessionEnded, Reason: why, Session: s}
}

// holderModel follows the holders of every lock from the events alone, in
// grant order. It fails if a lock is granted while the model says it is
// held, unless the new grant and every current one are shared and the lock
// has room (two exclusive holders, an exclusive overlapping a shared one,
// more holders than permits, or a thundering herd), if a free names no
// current grant, or if a session ends while still holding a lock.
type holderModel map[string][]Event

func holdersOf(st *State) holderModel {
	m := holderModel{}
	for name, l := range st.locks.byName() {
		for h := range l.grants {
			e := grantedEv(h.s.id, h.seq, name, h.token)
			e.Shared, e.Permits = l.shared, l.permits()
			m[name] = append(m[name], e)
		}
	}
	return m
}

func (m holderModel) observe(evs []Event) error {
	for _, e := range evs {
		switch e.Kind {
		case EventGranted:
			cur := m[e.Name]
			if len(cur) > 0 {
				capacity := MaxHoldersPerLock
				if e.Permits > 0 {
					capacity = int(e.Permits)
				}
				if !e.Shared || !cur[0].Shared || len(cur) >= capacity || cur[0].Permits != e.Permits {
					return fmt.Errorf("lock %q granted to %d/%d (shared %v, permits %d) while held by %d/%d (shared %v, permits %d) and %d more",
						e.Name, e.Session, e.Seq, e.Shared, e.Permits, cur[0].Session, cur[0].Seq, cur[0].Shared, cur[0].Permits, len(cur)-1)
				}
				if e.Token <= cur[len(cur)-1].Token {
					return fmt.Errorf("lock %q: token %d after %d", e.Name, e.Token, cur[len(cur)-1].Token)
				}
			}
			m[e.Name] = append(cur, e)
		case EventFreed:
			cur := m[e.Name]
			i := slices.IndexFunc(cur, func(c Event) bool {
				return c.Session == e.Session && c.Seq == e.Seq && c.Token == e.Token && c.Shared == e.Shared && c.Permits == e.Permits
			})
			if i < 0 {
				return fmt.Errorf("free of %+v matches none of the holders %+v", e, cur)
			}
			if cur = slices.Delete(cur, i, i+1); len(cur) == 0 {
				delete(m, e.Name)
			} else {
				m[e.Name] = cur
			}
		case EventKept:
			cur := m[e.Name]
			if !e.Election && !slices.ContainsFunc(cur, func(c Event) bool {
				return c.Session == e.Session && c.Seq == e.Seq && c.Token == e.Token && c.Shared == e.Shared && c.Permits == e.Permits
			}) {
				return fmt.Errorf("resumed session keeps %+v, but the holders are %+v", e, cur)
			}
		case EventSessionEnded:
			for name, cur := range m {
				for _, c := range cur {
					if c.Session == e.Session {
						return fmt.Errorf("session %d ended still holding %q", e.Session, name)
					}
				}
			}
		case EventTouched, EventRenewed, EventResumed, EventElected, EventDeposed, EventProclaimed, EventLeaderStarted, EventQueued, EventUnqueued,
			EventDelayed, EventUndelayed, EventKeptQueued, EventGateRaised, EventGroupTable, EventDropped: // not about holders
		default:
			return fmt.Errorf("unknown event %+v", e)
		}
	}
	return nil
}

func (m holderModel) matches(st *State) error {
	held := 0
	for _, l := range st.locks.byName() {
		if l.holders.n > 0 {
			held++
		}
	}
	if len(m) != held {
		return fmt.Errorf("events announce %d held locks, state has %d", len(m), held)
	}
	for name, evs := range m {
		info := st.Lock(name)
		e := evs[0]
		if !info.Held || info.Session != e.Session || info.Seq != e.Seq || info.Token != e.Token ||
			info.Shared != e.Shared || info.Permits != e.Permits || len(info.Holders) != len(evs) {
			return fmt.Errorf("lock %q is %+v, events say %+v", name, info, evs)
		}
		for i, h := range info.Holders {
			if h.Session != evs[i].Session || h.Seq != evs[i].Seq || h.Token != evs[i].Token {
				return fmt.Errorf("lock %q: holder %d is %+v, events say %+v", name, i, h, evs[i])
			}
		}
	}
	return nil
}

// checkInvariants checks the state's internal structure. strict adds the
// invariants that Apply keeps but Restore does not verify in a snapshot
// (distinct tokens, the bound on remembered replies).
func checkInvariants(st *State, strict bool) error {
	if len(st.nonces) != len(st.sessions) {
		return fmt.Errorf("%d nonces for %d sessions", len(st.nonces), len(st.sessions))
	}
	waits := 0
	heldBy := make(map[*hold]*session) // grants of locks and elections, by the session whose list has them
	for id, s := range st.sessions {
		switch {
		case s.id != id || id == 0 || id > st.lastSession:
			return fmt.Errorf("session %d stored as %d (last %d)", s.id, id, st.lastSession)
		case s.nonce == 0 || st.nonces[s.nonce] != s:
			return fmt.Errorf("session %d: nonce %d not indexed", id, s.nonce)
		case s.ttl == 0 || s.delay > MaxLockDelay:
			return fmt.Errorf("session %d: ttl %d, delay %d", id, s.ttl, s.delay)
		case s.keepAlive > st.index:
			return fmt.Errorf("session %d: keep-alive %d beyond index %d", id, s.keepAlive, st.index)
		case strict && len(s.replies) > max(MaxPendingPerSession, maxRepliesV1):
			return fmt.Errorf("session %d: %d replies", id, len(s.replies))
		}
		for seq, r := range s.replies {
			if seq < s.floor || !r.Status.valid() {
				return fmt.Errorf("session %d: reply %d=%+v with floor %d", id, seq, r, s.floor)
			}
		}
		for _, list := range []*heldList{&s.held, &s.leads} {
			table, n := st.locks, 0
			if list == &s.leads {
				table = st.elections
			}
			for h := range list.all {
				if h.l == nil || table.get(h.l.name) != h.l || h.s != s {
					return fmt.Errorf("session %d: held grant %d not held by it", id, h.token)
				}
				if heldBy[h] != nil {
					return fmt.Errorf("grant %d of %q in two held lists", h.token, h.l.name)
				}
				heldBy[h] = s
				n++
			}
			if n != list.n {
				return fmt.Errorf("session %d: held list of %d counts %d", id, n, list.n)
			}
		}
		for seq, w := range s.waits {
			if w.s != s || w.seq != seq || w.l == nil || st.locks.get(w.l.name) != w.l {
				return fmt.Errorf("session %d: waiter %d is dangling", id, seq)
			}
		}
		waits += len(s.waits)
	}
	claim := claims{}.claim
	tokens := make(map[uint64]string)
	queued := 0
	for name, l := range st.locks.byName() {
		delay, delayToken := l.delay()
		switch {
		case l.name != name || !ValidName(name) || st.locks.get(name) != l:
			return fmt.Errorf("lock %q stored as %q", l.name, name)
		case l.holders.n == 0 && (delay == 0 || delayToken == 0):
			return fmt.Errorf("lock %q exists but is free", name)
		case delay > MaxLockDelay || (delay == 0) != (delayToken == 0) || delayToken > st.lastToken:
			return fmt.Errorf("lock %q: delay %d, token %d", name, delay, delayToken)
		case l.holders.n > 1 && !l.shared, l.permits() > 0 && !l.shared:
			return fmt.Errorf("lock %q: %d holders, shared %v, permits %d", name, l.holders.n, l.shared, l.permits())
		case strict && l.holders.n > l.capacity():
			return fmt.Errorf("lock %q: %d holders, capacity %d", name, l.holders.n, l.capacity())
		case l.next() != nil && l.admits(l.next().shared):
			return fmt.Errorf("lock %q admits the head of its queue", name)
		}
		n, prevTok := 0, uint64(0)
		var prevPeer *peerHold
		for h := range l.grants {
			switch {
			case (*peerHold)(h).peers.prev != prevPeer || h.l != l:
				return fmt.Errorf("lock %q: broken holder links", name)
			case st.sessions[h.s.id] != h.s:
				return fmt.Errorf("lock %q held by dead session %d", name, h.s.id)
			case heldBy[h] != h.s:
				return fmt.Errorf("lock %q not in its holder's set", name)
			case h.token == 0 || h.token > st.lastToken || h.token <= prevTok:
				return fmt.Errorf("lock %q has token %d after %d, last %d", name, h.token, prevTok, st.lastToken)
			case h.maxHold() > MaxHoldLimit:
				return fmt.Errorf("lock %q: grant %d has maximum hold %d", name, h.token, h.maxHold())
			}
			if other, dup := tokens[h.token]; dup && strict {
				return fmt.Errorf("locks %q and %q share token %d", name, other, h.token)
			}
			tokens[h.token] = name
			if err := claim(h.s, h.seq, "holding "+name); err != nil {
				return err
			}
			prevPeer, prevTok = (*peerHold)(h), h.token
			n++
		}
		if n != l.holders.n || (*peerHold)(l.holders.tail) != prevPeer {
			return fmt.Errorf("lock %q: %d holders counted, %d walked", name, l.holders.n, n)
		}
		if l.first.s != nil && l.first.l != l {
			return fmt.Errorf("lock %q: first grant of another lock", name)
		}
		n, err := checkQueue(st, name, l, lockQueue, claim)
		if err != nil {
			return err
		}
		queued += n
	}
	if queued != st.waiting || waits != st.waiting {
		return fmt.Errorf("waiting=%d, queues hold %d, sessions wait %d", st.waiting, queued, waits)
	}
	if err := checkOps(&st.ops); err != nil {
		return err
	}
	return checkContended(st)
}

// claims records where in the state each request of a session was found
// (held, queued, leading), so that a request found twice is reported.
type claims map[struct{ session, seq uint64 }]string

// claim records request seq of s as found where; it fails if the request
// was found elsewhere already.
func (c claims) claim(s *session, seq uint64, where string) error {
	r := struct{ session, seq uint64 }{s.id, seq}
	if prev, dup := c[r]; dup {
		return fmt.Errorf("request %d of session %d both %s and %s", seq, s.id, prev, where)
	}
	c[r] = where
	return nil
}

// queueKind names the entries of a queue for checkQueue, a lock's waiters
// or an election's candidates, and says what else each must be.
type queueKind struct {
	kind, entry, doing string // "lock", "waiter", "waiting for"
	// inSession reports whether w is among its session's requests.
	inSession func(w *waiter) bool
	// check is what else w must be, in queue l called name.
	check func(l *lock, name string, w *waiter) error
}

var lockQueue = queueKind{kind: "lock", entry: "waiter", doing: "waiting for",
	inSession: func(w *waiter) bool { return w.s.waits[w.seq] == w },
	check: func(l *lock, name string, w *waiter) error {
		if l.permits() > 0 && !w.shared {
			return fmt.Errorf("semaphore %q: exclusive waiter %d/%d", name, w.s.id, w.seq)
		}
		return nil
	}}

var electionQueue = queueKind{kind: "election", entry: "candidate", doing: "campaigning in",
	inSession: func(w *waiter) bool { return w.s.campaigns[w.seq] == w },
	check: func(_ *lock, name string, w *waiter) error {
		if len(w.value) > MaxValueLen {
			return fmt.Errorf("election %q: candidate value of %d bytes", name, len(w.value))
		}
		return nil
	}}

// checkQueue walks the queue of l, called name: its links, its tail and
// count, and each entry, a request of a live session that is among its
// session's and claimed by nothing else. It returns how many it walked.
func checkQueue(st *State, name string, l *lock, q queueKind, claim func(s *session, seq uint64, where string) error) (int, error) {
	n := 0
	var prev *waiter
	for w := l.next(); w != nil; w = w.link.next {
		if n++; n > l.waiters() {
			return 0, fmt.Errorf("%s %q: queue longer than %d", q.kind, name, l.waiters())
		}
		switch {
		case w.link.prev != prev || w.l != l:
			return 0, fmt.Errorf("%s %q: broken queue links", q.kind, name)
		case st.sessions[w.s.id] != w.s:
			return 0, fmt.Errorf("%s %q: %s of dead session %d", q.kind, name, q.entry, w.s.id)
		case !q.inSession(w):
			return 0, fmt.Errorf("%s %q: %s %d/%d not in its session", q.kind, name, q.entry, w.s.id, w.seq)
		}
		if err := q.check(l, name, w); err != nil {
			return 0, err
		}
		if err := claim(w.s, w.seq, q.doing+" "+name); err != nil {
			return 0, err
		}
		prev = w
	}
	if l.queueOf().tail != prev || n != l.waiters() {
		return 0, fmt.Errorf("%s %q: tail or count (%d) wrong, walked %d", q.kind, name, l.waiters(), n)
	}
	return n, nil
}

// checkContended checks the index of contended locks: exactly the locks
// (not elections) with a queue, each once, correctly linked.
func checkContended(st *State) error {
	want := 0
	for l := range st.locks.all {
		if l.waiters() > 0 {
			want++
		}
	}
	n := 0
	var prev *lockMore
	seen := map[*lock]bool{}
	for m := st.contended.head; m != nil; m = m.hot.next {
		switch {
		case m.hot.prev != prev:
			return fmt.Errorf("contended: broken links at %q", m.l.name)
		case m.l == nil || m.l.more != m || m.l.election:
			return fmt.Errorf("contended: a lockMore of no lock, or of an election")
		case st.locks.get(m.l.name) != m.l || m.queue.n == 0:
			return fmt.Errorf("contended: lock %q gone or without a queue", m.l.name)
		case seen[m.l]:
			return fmt.Errorf("contended: lock %q twice", m.l.name)
		}
		seen[m.l] = true
		prev = m
		n++
	}
	if n != want || n != st.contended.n || st.contended.tail != prev {
		return fmt.Errorf("contended: %d indexed (count %d), %d locks have queues", n, st.contended.n, want)
	}
	for e := range st.elections.all {
		if e.more != nil && (e.more.hot.prev != nil || e.more.hot.next != nil || st.contended.head == e.more) {
			return fmt.Errorf("contended: election %q indexed", e.name)
		}
	}
	return nil
}

// checkOps checks the memory of operator commands: at most OpMemory, each
// ID once in the ring and in the map, none 0, the head inside a full ring.
func checkOps(o *ops) error {
	if len(o.ring) > OpMemory || len(o.ring) != len(o.results) || (o.head != 0 && len(o.ring) < OpMemory) || o.head >= max(len(o.ring), 1) {
		return fmt.Errorf("ops: ring of %d (head %d), %d results", len(o.ring), o.head, len(o.results))
	}
	seen := make(map[uint64]bool, len(o.ring))
	for op, r := range o.all {
		if _, ok := o.results[op]; op == 0 || seen[op] || !ok || !r.Status.valid() {
			return fmt.Errorf("ops: operation %d (%v)", op, r)
		}
		seen[op] = true
	}
	return nil
}

// saveBytes returns the snapshot of st.
func saveBytes(tb testing.TB, st *State) []byte {
	tb.Helper()
	var b bytes.Buffer
	require.NoError(tb, st.Save(&b))
	return b.Bytes()
}

// roundTrip saves st, restores it both ways, checks that the restored state
// saves to the same bytes and answers queries alike, and returns it.
// requireCorrupt requires both decoders to refuse the snapshot data with
// ErrCorrupt, returning no State.
func requireCorrupt(t *testing.T, data []byte) {
	t.Helper()
	st, err := DecodeSnapshot(data)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Nil(t, st)
	st, err = Restore(bytes.NewReader(data))
	require.ErrorIs(t, err, ErrCorrupt)
	require.Nil(t, st)
}

func roundTrip(tb testing.TB, st *State) *State {
	tb.Helper()
	data := saveBytes(tb, st)
	got, err := Restore(bytes.NewReader(data))
	require.NoError(tb, err)
	require.Equal(tb, data, saveBytes(tb, got))
	again, err := DecodeSnapshot(data)
	require.NoError(tb, err)
	require.Equal(tb, data, saveBytes(tb, again))
	require.NoError(tb, checkInvariants(got, true))
	// viewOf asks Grant for every held lock, which is linear in the locks
	// of the holder; skip it for the very large states of a few tests.
	if st.locks.len() <= 10_000 {
		require.Equal(tb, viewOf(st), viewOf(got))
	}
	return got
}

// view is what the queries tell about a state, in a comparable form.
type view struct {
	Index, LastToken         uint64
	Sessions                 []SessionInfo
	Locks                    []LockInfo
	Queues                   map[string][][3]uint64
	NSessions, NLocks, NWait int
	Grants                   map[[2]uint64]string
	Queued                   [][2]uint64
	ByID                     []SessionInfo
}

func viewOf(st *State) view {
	v := view{Index: st.Index(), LastToken: st.LastToken(), Sessions: st.Sessions(),
		Queues: map[string][][3]uint64{}, Grants: map[[2]uint64]string{}, ByID: []SessionInfo{}}
	v.NSessions, v.NLocks, v.NWait = st.Counts()
	for _, s := range v.Sessions {
		info, ok := st.Session(s.ID)
		if !ok {
			info = SessionInfo{}
		}
		v.ByID = append(v.ByID, info)
	}
	for _, name := range slices.Sorted(maps.Keys(st.locks.byName())) {
		info := st.Lock(name)
		v.Locks = append(v.Locks, info)
		for _, h := range info.Holders {
			n, tok, ok := st.Grant(h.Session, h.Seq)
			v.Grants[[2]uint64{h.Session, h.Seq}] = fmt.Sprint(n, tok, ok, st.Holds(h.Session, name, h.Token))
		}
		for w := st.locks.get(name).next(); w != nil; w = w.link.next {
			v.Queues[name] = append(v.Queues[name], [3]uint64{w.s.id, w.seq, boolNum(w.shared)})
			if st.Queued(w.s.id, w.seq) {
				v.Queued = append(v.Queued, [2]uint64{w.s.id, w.seq})
			}
		}
	}
	return v
}

// queuesOf is the queue model of an existing state.
func queuesOf(st *State) queueModel {
	m := queueModel{}
	for name, l := range st.locks.byName() {
		for w := range l.queued {
			m[name] = append(m[name], [2]uint64{w.s.id, w.seq})
		}
	}
	for name, e := range st.elections.byName() {
		for w := range e.queued {
			m[candidatesKey(name)] = append(m[candidatesKey(name)], [2]uint64{w.s.id, w.seq})
		}
	}
	return m
}

// candidatesKey is an election's queue in a queueModel: "\x00" and its
// name, which no lock's name can be.
func candidatesKey(name string) string { return "\x00" + name }

func boolNum(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// queueOf returns l's queue as it stands (the zero queue if l has no
// lockMore), for checks of its links.
func (l *lock) queueOf() waitQueue {
	if l.more == nil {
		return waitQueue{}
	}
	return l.more.queue
}

// byName returns the table's locks by name, checking that each is found
// under its own name and that the count is right.
func (t *lockTable) byName() map[string]*lock {
	m := make(map[string]*lock, t.len())
	for l := range t.all {
		if t.get(l.name) != l {
			panic(fmt.Sprintf("lock table: %q not found under its name", l.name))
		}
		m[l.name] = l
	}
	if len(m) != t.len() {
		panic(fmt.Sprintf("lock table: %d locks, %d names, count %d", t.len(), len(m), t.len()))
	}
	return m
}

// requireRefused requires err to be a decoder's refusal: corrupt bytes, or
// a version this build does not read (never both).
func requireRefused(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrVersionTooNew) {
		require.NotErrorIs(t, err, ErrCorrupt)
		return
	}
	require.ErrorIs(t, err, ErrCorrupt)
}
