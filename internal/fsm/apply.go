package fsm

import (
	"maps"
	"slices"
	"strings"
)

// maxRepliesV1 is how many replies a session kept under version 1, which
// then forgot the oldest: a retry of a forgotten request could apply twice.
// Only version-1 entries, replayed from an old log, still evict.
const maxRepliesV1 = 4096

// Apply applies the commands of the raft entry at index, in order, and
// returns one Result per command and the events they caused. Both slices are
// reused by the next call: copy what must outlive it.
func (st *State) Apply(index uint64, cmds []Command) ([]Result, []Event) {
	st.results = st.results[:0]
	st.events = st.events[:0]
	st.index = index
	for i := range cmds {
		st.results = append(st.results, st.apply(index, &cmds[i]))
	}
	return st.results, st.events
}

func (st *State) apply(index uint64, c *Command) Result {
	switch c.Kind {
	case KindOpenSession:
		return st.openSession(index, c)
	case KindLeaderStart:
		return st.leaderStart(index, c)
	case KindRevoke:
		return st.revoke(index, c)
	}
	s := st.sessions[c.Session]
	if s == nil {
		if c.Kind < KindOpenSession || c.Kind > maxKind {
			return Result{Status: Invalid}
		}
		return Result{Status: UnknownSession}
	}
	if c.Kind != KindExpire && c.Kind != KindEndSession && c.Kind != KindResume && c.Floor < s.base {
		// The session was resumed since this holder numbered its requests:
		// the holder is its old incarnation, and its session is over.
		return Result{Status: UnknownSession}
	}
	switch c.Kind {
	case KindResume:
		return st.resume(index, s, c)
	case KindKeepAlive:
		st.advanceFloor(s, c.Floor)
		s.keepAlive = index
		st.emit(Event{Kind: EventTouched, Session: s.id, Index: index, TTL: s.ttl})
		return Result{Status: OK}
	case KindCloseSession:
		st.endSession(index, s, ReasonClosed)
		return Result{Status: OK}
	case KindEndSession:
		st.endSession(index, s, ReasonRevoked)
		return Result{Status: OK}
	case KindExpire:
		// A newer keep-alive, or a newer leader (one that has not given the
		// session a full TTL of its own yet), overrules the expiry.
		if s.keepAlive > c.Target || (!c.v1 && c.Mark != st.leaderMark) {
			return Result{Status: NotApplied}
		}
		st.endSession(index, s, ReasonExpired)
		return Result{Status: OK}
	case KindAcquire, KindRelease, KindCampaign, KindResign, KindProclaim:
		return st.request(index, s, c)
	case KindCancel:
		return st.cancel(index, s, c)
	}
	return Result{Status: Invalid}
}

func (st *State) openSession(index uint64, c *Command) Result {
	if c.TTL == 0 || c.Nonce == 0 {
		return Result{Status: Invalid}
	}
	if s := st.nonces[c.Nonce]; s != nil {
		return Result{Status: OK, Value: s.id} // a retried open
	}
	if len(st.sessions) >= MaxSessions {
		return limitExceeded(LimitSessions)
	}
	s := &session{
		id:        st.nextSessionID(index),
		nonce:     c.Nonce,
		ttl:       c.TTL,
		owner:     c.Owner,
		keepAlive: index,
	}
	st.addSession(s)
	st.emit(Event{Kind: EventTouched, Session: s.id, Index: index, TTL: s.ttl})
	return Result{Status: OK, Value: s.id}
}

// resumeGap is how far a resume moves a session's floor past the highest
// request number it has seen: past anything the old incarnation can have
// numbered and not yet had applied.
const resumeGap = 1 << 32

// resume hands session s to a restarted holder that knows its nonce: see
// KindResume. Its reply's Value is the floor the new incarnation numbers
// its requests from.
func (st *State) resume(index uint64, s *session, c *Command) Result {
	if c.Nonce != s.nonce || c.Owner == 0 {
		return Result{Status: UnknownSession}
	}
	if c.Target != 0 && c.Target == s.resumed {
		return Result{Status: OK, Value: s.base} // a retry: it applied already
	}
	top := s.floor
	for seq := range s.replies {
		top = max(top, seq)
	}
	for _, waits := range []map[uint64]*waiter{s.waits, s.campaigns} {
		for _, seq := range slices.Sorted(maps.Keys(waits)) {
			top = max(top, seq)
			st.unqueue(waits[seq])
		}
	}
	for _, list := range []*heldList{&s.held, &s.leads} {
		for l := range list.all {
			top = max(top, l.seq)
		}
	}
	if top > 1<<63 {
		return Result{Status: Invalid} // no room left to number requests
	}
	s.base, s.resumed = top+resumeGap, c.Target
	st.advanceFloor(s, s.base)
	s.owner, s.keepAlive = c.Owner, index
	st.emit(Event{Kind: EventResumed, Session: s.id, Target: c.Target})
	st.emit(Event{Kind: EventTouched, Session: s.id, Index: index, TTL: s.ttl})
	st.events = s.kept(st.events)
	return Result{Status: OK, Value: s.base}
}

// kept appends an EventKept for each grant s holds: its locks, then its
// leaderships, each in the order they were granted.
func (s *session) kept(evs []Event) []Event {
	for _, list := range []*heldList{&s.held, &s.leads} {
		for l := range list.all {
			evs = append(evs, Event{Kind: EventKept, Session: s.id, Seq: l.seq, Name: l.name, Token: l.token,
				Value: l.value, Election: l.election})
		}
	}
	return evs
}

// revoke ends the current grant of a lock or an election, whoever holds
// it, if it is the one the operator named (or any, with token 0).
func (st *State) revoke(index uint64, c *Command) Result {
	table := st.locks
	if c.Election {
		table = st.elections
	}
	l := table[c.Name]
	if !ValidName(c.Name) {
		return Result{Status: Invalid}
	}
	if l == nil || l.holder == nil || (c.Token != 0 && l.token != c.Token) {
		return Result{Status: NotHeld}
	}
	st.free(index, l, ReasonRevoked)
	return Result{Status: OK}
}

// leaderStart records the new leader's mark, which its expiries will name.
func (st *State) leaderStart(index uint64, c *Command) Result {
	if c.Owner == 0 {
		return Result{Status: Invalid}
	}
	st.leaderMark = index
	if st.groupID == 0 {
		st.groupID = c.Nonce
	}
	st.emit(Event{Kind: EventLeaderStarted, Index: index, Owner: c.Owner, Term: c.Term, Group: st.groupID})
	return Result{Status: OK}
}

func (st *State) addSession(s *session) {
	s.replies = make(map[uint64]Result)
	s.waits = make(map[uint64]*waiter)
	s.campaigns = make(map[uint64]*waiter)
	st.sessions[s.id] = s
	st.nonces[s.nonce] = s
}

// request applies a numbered request (Acquire, Release, Campaign, Resign,
// Proclaim) at most once per (session, seq).
func (st *State) request(index uint64, s *session, c *Command) Result {
	st.advanceFloor(s, c.Floor)
	if c.Seq < s.floor {
		return Result{Status: Stale}
	}
	if r, ok := s.replies[c.Seq]; ok {
		return r
	}
	if r, ok := st.outstanding(s, c); ok {
		// A retry whose reply was evicted (version 1) while the request
		// still waits or holds: answer it again rather than apply it twice.
		st.remember(s, c, c.Seq, r)
		return r
	}
	if !c.v1 && len(s.replies) >= MaxPendingPerSession {
		// Not remembered: the client was refused and moves its floor on,
		// and a retry of the same request is judged afresh.
		return limitExceeded(LimitPendingRequests)
	}
	var r Result
	switch c.Kind {
	case KindAcquire:
		r = st.acquire(index, s, c)
	case KindRelease:
		r = st.release(index, s, c)
	case KindCampaign:
		r = st.campaign(index, s, c)
	case KindResign:
		r = st.resign(index, s, c)
	case KindProclaim:
		r = st.proclaim(s, c)
	}
	st.remember(s, c, c.Seq, r)
	return r
}

func (st *State) acquire(index uint64, s *session, c *Command) Result {
	if !ValidName(c.Name) {
		return Result{Status: Invalid}
	}
	if s.requests() >= MaxLocksPerSession {
		return limitExceeded(LimitLocksPerSession)
	}
	l := st.locks[c.Name]
	if l != nil && l.holder != nil && c.Wait && l.queue.n >= MaxWaitersPerLock {
		return limitExceeded(LimitWaitersPerLock)
	}
	if l == nil {
		l = &lock{name: c.Name}
		st.locks[c.Name] = l
	}
	if l.holder == nil {
		return Result{Status: Granted, Value: st.grant(index, l, s, c.Seq, "")}
	}
	if !c.Wait {
		return Result{Status: Locked}
	}
	w := &waiter{s: s, seq: c.Seq}
	l.push(w)
	s.waits[c.Seq] = w
	st.waiting++
	st.emit(Event{Kind: EventQueued, Session: s.id, Seq: c.Seq, Name: c.Name})
	return Result{Status: Queued}
}

func (st *State) release(index uint64, s *session, c *Command) Result {
	l := st.locks[c.Name]
	if l == nil || l.holder != s || l.token != c.Token {
		return Result{Status: NotHeld}
	}
	st.free(index, l, ReasonReleased)
	return Result{Status: OK}
}

// cancel withdraws request c.Target, an Acquire of lock c.Name or (with
// c.Election) a Campaign in election c.Name. It is idempotent, so it needs no
// request number of its own; it records Cancelled as the target's reply so
// that a delayed duplicate of the request, applied after the cancel, finds
// the reply and changes nothing.
func (st *State) cancel(index uint64, s *session, c *Command) Result {
	st.advanceFloor(s, c.Floor)
	r := Result{Status: NotApplied}
	if w := s.queued(c.Target); w != nil {
		st.unqueue(w)
		r.Status = Cancelled
	} else if l := st.cancelled(s, c); l != nil {
		st.free(index, l, ReasonCancelled)
		r.Status = Cancelled
	}
	if _, known := s.replies[c.Target]; c.Target >= s.floor && (c.v1 || known || len(s.replies) < MaxPendingPerSession) {
		// Beyond the bound the target's own request was refused (or would
		// be, if it arrives late), so it cannot apply behind the cancel.
		st.remember(s, c, c.Target, Result{Status: Cancelled})
	}
	return r
}

// grant makes request seq of s the holder of the free lock l (the leader,
// with value, of the election l).
func (st *State) grant(index uint64, l *lock, s *session, seq uint64, value string) uint64 {
	l.holder, l.seq, l.token, l.value = s, seq, st.nextToken(index), value
	st.grants++
	if _, ok := s.replies[seq]; ok {
		s.replies[seq] = Result{Status: Granted, Value: l.token}
	}
	if l.election {
		s.leads.push(l)
		st.emit(Event{Kind: EventElected, Session: s.id, Seq: seq, Token: l.token, Name: l.name, Value: value})
	} else {
		s.held.push(l)
		st.emit(Event{Kind: EventGranted, Session: s.id, Seq: seq, Token: l.token, Name: l.name})
	}
	return l.token
}

// free ends the current grant of l and passes the lock to the head of its
// queue, in the same entry. A lock nobody holds or waits for is forgotten.
func (st *State) free(index uint64, l *lock, why Reason) {
	h := l.holder
	if l.election {
		st.emit(Event{Kind: EventDeposed, Reason: why, Session: h.id, Seq: l.seq, Token: l.token, Name: l.name})
		h.leads.remove(l)
	} else {
		st.emit(Event{Kind: EventFreed, Reason: why, Session: h.id, Seq: l.seq, Token: l.token, Name: l.name})
		h.held.remove(l)
	}
	l.holder, l.seq, l.token, l.value = nil, 0, 0, ""
	if w := l.queue.head; w != nil {
		st.unqueue(w)
		st.grant(index, l, w.s, w.seq, w.value)
		return
	}
	if l.election {
		delete(st.elections, l.name)
	} else {
		delete(st.locks, l.name)
	}
}

func (st *State) unqueue(w *waiter) {
	w.l.queue.remove(w)
	if w.l.election {
		delete(w.s.campaigns, w.seq)
		st.campaigning--
	} else {
		delete(w.s.waits, w.seq)
		st.waiting--
		st.emit(Event{Kind: EventUnqueued, Session: w.s.id, Seq: w.seq, Name: w.l.name})
	}
}

// endSession withdraws every queued request and candidacy of s, then frees
// its locks and then its leaderships, each in name order (each may grant its
// queue head; the order fixes the tokens), all in one entry.
func (st *State) endSession(index uint64, s *session, why Reason) {
	// Withdrawing grants nothing, but it is reported: in request order, so
	// that every replica reports alike (a map's order is not).
	for _, waits := range []map[uint64]*waiter{s.waits, s.campaigns} {
		for _, seq := range slices.Sorted(maps.Keys(waits)) {
			st.unqueue(waits[seq])
		}
	}
	for _, list := range []*heldList{&s.held, &s.leads} {
		held := make([]*lock, 0, list.n)
		for l := range list.all {
			held = append(held, l)
		}
		slices.SortFunc(held, func(a, b *lock) int { return strings.Compare(a.name, b.name) })
		for _, l := range held {
			st.free(index, l, why)
		}
	}
	delete(st.sessions, s.id)
	delete(st.nonces, s.nonce)
	st.emit(Event{Kind: EventSessionEnded, Reason: why, Session: s.id})
}

// outstanding reports the reply to request c (an Acquire or a Campaign) if
// it is still queued or holding its grant.
func (st *State) outstanding(s *session, c *Command) (Result, bool) {
	if c.Kind != KindAcquire && c.Kind != KindCampaign {
		return Result{}, false
	}
	if s.queued(c.Seq) != nil {
		return Result{Status: Queued}, true
	}
	if l := st.grantOf(s, c.Seq, c.Name, c.Kind == KindCampaign); l != nil {
		return Result{Status: Granted, Value: l.token}, true
	}
	return Result{}, false
}

// grantOf returns lock (or election) name if request seq of s holds it.
func (st *State) grantOf(s *session, seq uint64, name string, election bool) *lock {
	table := st.locks
	if election {
		table = st.elections
	}
	if l := table[name]; l != nil && l.holder == s && l.seq == seq {
		return l
	}
	return nil
}

// cancelled returns the grant a Cancel withdraws, if the target holds one.
// The client names the lock (or election), so it is one lookup; a Cancel
// without a name costs a scan of the session's grants.
func (st *State) cancelled(s *session, c *Command) *lock {
	if c.Name != "" {
		return st.grantOf(s, c.Target, c.Name, c.Election)
	}
	return s.holding(c.Target)
}

// holding returns the lock or election request seq of s holds, if any. It
// scans the session's grants: only for rare paths (a snapshot restored, a
// Cancel without a name).
func (s *session) holding(seq uint64) *lock {
	for _, list := range []*heldList{&s.held, &s.leads} {
		for l := range list.all {
			if l.seq == seq {
				return l
			}
		}
	}
	return nil
}

// requests counts the locks and elections s holds or waits for.
func (s *session) requests() int { return s.held.n + s.leads.n + len(s.waits) + len(s.campaigns) }

// queued returns request seq's place in a lock's or an election's queue.
func (s *session) queued(seq uint64) *waiter {
	if w := s.waits[seq]; w != nil {
		return w
	}
	return s.campaigns[seq]
}

func (st *State) advanceFloor(s *session, floor uint64) {
	if floor <= s.floor {
		return
	}
	s.floor = floor
	for seq := range s.replies {
		if seq < floor {
			delete(s.replies, seq)
		}
	}
}

// remember records r as the reply to request seq of s, for its retries.
// Version 2 never forgets a reply at or above the floor; the bound on them
// is enforced before a request applies.
func (st *State) remember(s *session, c *Command, seq uint64, r Result) {
	if _, ok := s.replies[seq]; c.v1 && !ok && len(s.replies) >= maxRepliesV1 {
		oldest := ^uint64(0)
		for k := range s.replies {
			oldest = min(oldest, k)
		}
		delete(s.replies, oldest)
	}
	s.replies[seq] = r
}

func (st *State) emit(e Event) { st.events = append(st.events, e) }
