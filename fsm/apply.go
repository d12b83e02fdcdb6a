package fsm

import (
	"slices"
	"strings"
)

// maxReplies bounds the replies a session keeps for deduplication. A client
// keeps its floor at its oldest unanswered request, so only a client with
// thousands of requests in flight reaches it; beyond it the oldest replies
// are forgotten first.
const maxReplies = 4096

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
	if c.Kind == KindOpenSession {
		return st.openSession(index, c)
	}
	s := st.sessions[c.Session]
	if s == nil {
		if c.Kind < KindOpenSession || c.Kind > maxKind {
			return Result{Status: Invalid}
		}
		return Result{Status: UnknownSession}
	}
	switch c.Kind {
	case KindKeepAlive:
		st.advanceFloor(s, c.Floor)
		s.keepAlive = index
		st.emit(Event{Kind: EventTouched, Session: s.id, Index: index, TTL: s.ttl})
		return Result{Status: OK}
	case KindCloseSession:
		st.endSession(index, s, ReasonClosed)
		return Result{Status: OK}
	case KindExpire:
		if s.keepAlive > c.Target {
			return Result{Status: NotApplied}
		}
		st.endSession(index, s, ReasonExpired)
		return Result{Status: OK}
	case KindAcquire, KindRelease:
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

func (st *State) addSession(s *session) {
	s.replies = make(map[uint64]Result)
	s.waits = make(map[uint64]*waiter)
	st.sessions[s.id] = s
	st.nonces[s.nonce] = s
}

// request applies Acquire or Release at most once per (session, seq).
func (st *State) request(index uint64, s *session, c *Command) Result {
	st.advanceFloor(s, c.Floor)
	if c.Seq < s.floor {
		return Result{Status: Stale}
	}
	if r, ok := s.replies[c.Seq]; ok {
		return r
	}
	var r Result
	if c.Kind == KindAcquire {
		r = st.acquire(index, s, c)
	} else {
		r = st.release(index, s, c)
	}
	st.remember(s, c.Seq, r)
	return r
}

func (st *State) acquire(index uint64, s *session, c *Command) Result {
	if !ValidName(c.Name) {
		return Result{Status: Invalid}
	}
	l := st.locks[c.Name]
	if l == nil {
		l = &lock{name: c.Name}
		st.locks[c.Name] = l
	}
	if l.holder == nil {
		return Result{Status: Granted, Value: st.grant(index, l, s, c.Seq)}
	}
	if !c.Wait {
		return Result{Status: Locked}
	}
	w := &waiter{s: s, seq: c.Seq}
	l.push(w)
	s.waits[c.Seq] = w
	st.waiting++
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

// cancel withdraws request c.Target. It is idempotent, so it needs no
// request number of its own; it records Cancelled as the target's reply so
// that a delayed duplicate of the acquire, applied after the cancel, finds
// the reply and changes nothing.
func (st *State) cancel(index uint64, s *session, c *Command) Result {
	st.advanceFloor(s, c.Floor)
	r := Result{Status: NotApplied}
	if w := s.waits[c.Target]; w != nil {
		st.unqueue(w)
		r.Status = Cancelled
	} else if l := s.holding(c.Target); l != nil {
		st.free(index, l, ReasonCancelled)
		r.Status = Cancelled
	}
	if c.Target >= s.floor {
		st.remember(s, c.Target, Result{Status: Cancelled})
	}
	return r
}

// grant makes request seq of s the holder of the free lock l.
func (st *State) grant(index uint64, l *lock, s *session, seq uint64) uint64 {
	l.holder, l.seq, l.token = s, seq, st.nextToken(index)
	s.held.add(l)
	if _, ok := s.replies[seq]; ok {
		s.replies[seq] = Result{Status: Granted, Value: l.token}
	}
	st.emit(Event{Kind: EventGranted, Session: s.id, Seq: seq, Token: l.token, Name: l.name})
	return l.token
}

// free ends the current grant of l and passes the lock to the head of its
// queue, in the same entry. A lock nobody holds or waits for is forgotten.
func (st *State) free(index uint64, l *lock, why Reason) {
	h := l.holder
	st.emit(Event{Kind: EventFreed, Reason: why, Session: h.id, Seq: l.seq, Token: l.token, Name: l.name})
	h.held.remove(l)
	l.holder, l.seq, l.token = nil, 0, 0
	if w := l.head; w != nil {
		st.unqueue(w)
		st.grant(index, l, w.s, w.seq)
		return
	}
	delete(st.locks, l.name)
}

func (st *State) unqueue(w *waiter) {
	w.l.unlink(w)
	delete(w.s.waits, w.seq)
	st.waiting--
}

// endSession withdraws every queued request of s, then frees its locks in
// name order (each may grant its queue head; the order fixes the tokens), all
// in one entry.
func (st *State) endSession(index uint64, s *session, why Reason) {
	for _, w := range s.waits {
		st.unqueue(w) // withdrawing grants nothing: order does not matter
	}
	held := make([]*lock, 0, s.held.n)
	for l := range s.held.all {
		held = append(held, l)
	}
	slices.SortFunc(held, func(a, b *lock) int { return strings.Compare(a.name, b.name) })
	for _, l := range held {
		st.free(index, l, why)
	}
	delete(st.sessions, s.id)
	delete(st.nonces, s.nonce)
	st.emit(Event{Kind: EventSessionEnded, Reason: why, Session: s.id})
}

func (s *session) holding(seq uint64) *lock {
	for l := range s.held.all {
		if l.seq == seq {
			return l
		}
	}
	return nil
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

func (st *State) remember(s *session, seq uint64, r Result) {
	if _, ok := s.replies[seq]; !ok && len(s.replies) >= maxReplies {
		oldest := ^uint64(0)
		for k := range s.replies {
			oldest = min(oldest, k)
		}
		delete(s.replies, oldest)
	}
	s.replies[seq] = r
}

func (st *State) emit(e Event) { st.events = append(st.events, e) }
