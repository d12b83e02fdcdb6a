package fsm

import (
	"maps"
	"slices"
	"strings"

	"github.com/fencelock/fencelock/internal/seeded"
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
		st.at = cmds[i].At
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
		return st.operator(c, func() Result { return st.revoke(index, c) })
	case KindUndelay:
		return st.undelay(index, c)
	case KindExpireGrant:
		return st.expireGrant(index, c)
	case KindKeepAliveBatch:
		return st.keepAliveBatch(index, c)
	case KindEndSession:
		return st.operator(c, func() Result { return st.endSessionCmd(index, c) })
	case KindGate:
		return st.raiseGate(index, c)
	case KindSeal:
		return st.seal(index)
	case KindGroupSeed, KindGroupCreate, KindGroupDrop, KindGroupSetVoters:
		return st.applyGroupTable(index, c)
	}
	s := st.sessions[c.Session]
	if s == nil {
		if c.Kind < KindOpenSession || c.Kind > maxKind {
			return Result{Status: Invalid}
		}
		return Result{Status: UnknownSession}
	}
	if c.Kind != KindExpire && c.Kind != KindResume && c.Floor < s.base {
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
	case KindExpire:
		// A newer keep-alive, or a newer leader (one that has not given the
		// session a full TTL of its own yet), overrules the expiry.
		if s.keepAlive > c.Target || (!c.v1 && c.Mark != st.leaderMark) {
			return Result{Status: NotApplied}
		}
		st.endSession(index, s, ReasonExpired)
		return Result{Status: OK}
	case KindAcquire, KindAcquireShared, KindRelease, KindCampaign, KindResign, KindProclaim:
		return st.request(index, s, c)
	case KindCancel:
		return st.cancel(index, s, c)
	}
	return Result{Status: Invalid}
}

// endSessionCmd ends session c.Session at an operator's request, whoever
// owns it; a session that is over is UnknownSession. The session's floor
// and base do not matter: the operator is not its holder.
func (st *State) endSessionCmd(index uint64, c *Command) Result {
	s := st.sessions[c.Session]
	if s == nil {
		return Result{Status: UnknownSession}
	}
	st.endSession(index, s, ReasonRevoked)
	return Result{Status: OK}
}

// keepAliveBatch renews the sessions of c.Renew that replica c.Owner
// holds: see KindKeepAliveBatch. One event reports them all, so the
// leader's timers take a batch in one step too.
func (st *State) keepAliveBatch(index uint64, c *Command) Result {
	if c.Owner == 0 || len(c.Renew) == 0 || len(c.Renew) > MaxRenewals {
		return Result{Status: Invalid}
	}
	renewed := make([]uint64, 0, len(c.Renew))
	var refused []uint64
	for _, r := range c.Renew {
		s := st.sessions[r.Session]
		// Another owner: the session was resumed on another replica, and
		// this one renews its old incarnation. A floor below the resume's,
		// likewise, from a process that runs the old incarnation still.
		if s == nil || s.owner != c.Owner || r.Floor < s.base {
			refused = append(refused, r.Session)
			continue
		}
		st.advanceFloor(s, r.Floor)
		s.keepAlive = index
		renewed = append(renewed, s.id)
	}
	if len(renewed) > 0 {
		st.emit(Event{Kind: EventRenewed, Owner: c.Owner, Index: index, Sessions: renewed})
	}
	if len(refused) > 0 {
		return Result{Status: Refused, Value: uint64(len(refused)), Refused: refused}
	}
	return Result{Status: OK}
}

func (st *State) openSession(index uint64, c *Command) Result {
	if c.TTL == 0 || c.Nonce == 0 || c.Delay > MaxLockDelay {
		return Result{Status: Invalid}
	}
	if s := st.nonces[c.Nonce]; s != nil {
		return Result{Status: OK, Value: s.id} // a retried open
	}
	if !ValidSessionName(c.Name) {
		return Result{Status: Invalid, Value: InvalidSessionName}
	}
	if len(st.sessions) >= MaxSessions {
		return limitExceeded(LimitSessions)
	}
	s := &session{
		id:        st.nextSessionID(index),
		nonce:     c.Nonce,
		ttl:       c.TTL,
		delay:     c.Delay,
		owner:     c.Owner,
		name:      c.Name,
		keepAlive: index,
	}
	// Only a group that writes version 10 keeps the parent: below, its
	// snapshots could not hold it, and a replica restoring one would show
	// other views than its group's. (A writer drops it anyway below gate
	// 10; this keeps the state whole whatever an entry carries.)
	if st.gate.Codec >= parentCodec {
		s.parent = c.Parent
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
	// Plain equality, not crypto/subtle: the nonce is a replicated value
	// that every replica must compare alike, which == does, and a resume's
	// reply comes back only after a raft round trip, whose jitter hides
	// the time of an 8-byte compare. (Secrets compared outside the state
	// machine use crypto/subtle.)
	if c.Nonce != s.nonce || c.Owner == 0 {
		return Result{Status: UnknownSession}
	}
	// From version 5 the resume names the TTL its holder will time its
	// lease by (the token's). Only the group's record may decide it: a
	// holder that believed a longer TTL would act past the group's expiry
	// of the session, beside the lock's next holder. A version-5 resume
	// without a TTL is refused alike; older entries carry none and apply
	// as they did. Checked after the nonce, so only a secret's holder
	// learns the session's TTL.
	if !c.pre5 && c.TTL != s.ttl {
		return Result{Status: Conflict, Value: s.ttl}
	}
	if c.Target != 0 && c.Target == s.resumed {
		return Result{Status: OK, Value: s.base} // a retry: it applied already
	}
	// A fenced adoption moves the session only under the epoch it names:
	// by compare-and-set on the default part's, above the last one for a
	// named group's part (Command.Fence). Not last writer wins: a loser's
	// resume, however late, changes nothing.
	if c.Fence {
		if c.Parent == 0 && c.Epoch != s.base {
			return Result{Status: NotApplied, Value: s.base}
		}
		if c.Parent != 0 && c.Epoch <= s.epoch {
			return Result{Status: NotApplied, Value: s.epoch}
		}
	}
	top := s.floor
	for seq := range s.replies {
		top = max(top, seq)
	}
	for _, waits := range []map[uint64]*waiter{s.waits, s.campaigns} {
		for seq := range waits {
			top = max(top, seq)
		}
	}
	for _, list := range []*heldList{&s.held, &s.leads} {
		for h := range list.all {
			top = max(top, h.seq)
		}
	}
	if top > 1<<63 {
		return Result{Status: Invalid} // no room left to number requests
	}
	if !c.Keep {
		st.withdrawAll(index, s)
	}
	// A grant with a maximum hold is not kept: the new incarnation cannot
	// tell how long the old one has held it, so it could not stop before
	// the group frees it. It ends now, as its hold would have.
	var timed []*hold
	for _, list := range []*heldList{&s.held, &s.leads} {
		for h := range list.all {
			if h.maxHold() != 0 {
				timed = append(timed, h)
			}
		}
	}
	sortHolds(timed)
	for _, h := range timed {
		st.free(index, h, ReasonMaxHold)
	}
	s.base, s.resumed = top+resumeGap, c.Target
	if c.Fence && c.Parent != 0 {
		s.epoch = c.Epoch
	}
	st.advanceFloor(s, s.base)
	s.owner, s.keepAlive = c.Owner, index
	st.emit(Event{Kind: EventResumed, Session: s.id, Target: c.Target})
	st.emit(Event{Kind: EventTouched, Session: s.id, Index: index, TTL: s.ttl})
	st.events = s.kept(st.events)
	st.events = s.keptQueued(st.events)
	return Result{Status: OK, Value: s.base}
}

// keptQueued appends an EventKeptQueued for each request s has queued (its
// lock requests, then its candidacies, each in request order): after a
// resume with Keep, the requests its new holder waits for again.
func (s *session) keptQueued(evs []Event) []Event {
	for _, waits := range []map[uint64]*waiter{s.waits, s.campaigns} {
		for _, seq := range slices.Sorted(maps.Keys(waits)) {
			w := waits[seq]
			evs = append(evs, Event{Kind: EventKeptQueued, Session: s.id, Seq: seq, Name: w.l.name,
				Election: w.l.election, Shared: w.shared, Permits: w.l.permits(), MaxHold: w.maxHold})
		}
	}
	return evs
}

// kept appends an EventKept for each grant s holds: its locks, then its
// leaderships, each in the order they were granted.
func (s *session) kept(evs []Event) []Event {
	for _, list := range []*heldList{&s.held, &s.leads} {
		for h := range list.all {
			l := h.l
			evs = append(evs, Event{Kind: EventKept, Session: s.id, Seq: h.seq, Name: l.name, Token: h.token,
				Value: l.value(), Election: l.election, Shared: l.shared, Permits: l.permits()})
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
	l := table.get(c.Name)
	if !ValidName(c.Name) {
		return Result{Status: Invalid}
	}
	if l == nil || l.holders.n == 0 {
		return Result{Status: NotHeld} // a delayed lock too: Undelay is the leader's
	}
	if c.Token != 0 {
		h := l.find(nil, c.Token)
		if h == nil {
			return Result{Status: NotHeld}
		}
		st.revokeGrant(h, c)
		st.settle(index, l)
		return Result{Status: OK}
	}
	// Token 0 ends every grant current now, oldest first (a shared lock's
	// holders, a semaphore's), before the queue is granted.
	for h := range l.grants {
		st.revokeGrant(h, c)
	}
	st.settle(index, l)
	return Result{Status: OK}
}

// revokeGrant ends grant h for revocation c without granting anything.
// From version 5, a lock whose holder's session has a lock-delay is
// delayed, as when an operator ends the session: the holder did not choose
// to stop and may be writing still. A version-4 revoke (or older) freed it
// at once, and still does when its log replays, so the replay reaches the
// state it reached then. Elections are never delayed.
func (st *State) revokeGrant(h *hold, c *Command) {
	if d := h.s.delay; d != 0 && !c.pre5 && !h.l.election {
		st.dropDelayed(h, ReasonRevoked, d)
		return
	}
	st.drop(h, ReasonRevoked)
}

// dropDelayed ends grant h of a lock as drop does, and puts the lock under
// a lock-delay of d nanoseconds begun by h's end. A lock delayed already
// restarts its delay now, for the longer of the two: never shorter than
// either.
func (st *State) dropDelayed(h *hold, why Reason, d uint64) {
	l, s, seq, token := h.l, h.s, h.seq, h.token
	st.drop(h, why) // clears h
	was, _ := l.delay()
	d = max(was, d)
	l.setDelay(d, token)
	st.emit(Event{Kind: EventDelayed, Reason: why, Session: s.id, Seq: seq, Name: l.name, Token: token, TTL: d})
}

// undelay ends the lock-delay of c.Name if it is the one grant c.Token's
// end began and the leader that timed it is still the group's leader.
func (st *State) undelay(index uint64, c *Command) Result {
	if !ValidName(c.Name) {
		return Result{Status: Invalid}
	}
	l := st.locks.get(c.Name)
	if c.Mark != st.leaderMark || l == nil {
		return Result{Status: NotApplied}
	}
	if delay, token := l.delay(); delay == 0 || token != c.Token {
		return Result{Status: NotApplied}
	}
	l.setDelay(0, 0)
	st.emit(Event{Kind: EventUndelayed, Name: l.name, Token: c.Token})
	st.settle(index, l)
	return Result{Status: OK}
}

// expireGrant ends grant c.Token of lock (or election) c.Name when its
// maximum hold ran out by the timer of the leader that is still the
// group's leader. A grant made without a maximum hold never ends so.
func (st *State) expireGrant(index uint64, c *Command) Result {
	if !ValidName(c.Name) {
		return Result{Status: Invalid}
	}
	if c.Mark != st.leaderMark {
		return Result{Status: NotApplied}
	}
	table := st.locks
	if c.Election {
		table = st.elections
	}
	l := table.get(c.Name)
	if l == nil {
		return Result{Status: NotHeld}
	}
	h := l.find(nil, c.Token)
	if h == nil || h.maxHold() == 0 {
		return Result{Status: NotHeld}
	}
	st.free(index, h, ReasonMaxHold)
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
	if st.sealed && (c.Kind == KindAcquire || c.Kind == KindAcquireShared || c.Kind == KindCampaign) {
		// Not remembered: a sealed group answers every retry alike, and
		// the answer takes no room of the session's.
		return Result{Status: Dropped}
	}
	if !c.v1 && len(s.replies) >= MaxPendingPerSession {
		// Not remembered: the client was refused and moves its floor on,
		// and a retry of the same request is judged afresh.
		return limitExceeded(LimitPendingRequests)
	}
	var r Result
	switch c.Kind {
	case KindAcquire, KindAcquireShared:
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
	shared, permits := c.Kind == KindAcquireShared, c.Permits
	if !ValidName(c.Name) || permits > MaxHoldersPerLock || (!shared && permits != 0) || c.MaxHold > MaxHoldLimit {
		return Result{Status: Invalid}
	}
	if s.requests() >= MaxLocksPerSession {
		return limitExceeded(LimitLocksPerSession)
	}
	l := st.locks.get(c.Name)
	if l != nil && l.permits() != permits {
		// A semaphore's count is fixed while it exists, and a name is a
		// lock or a semaphore, not both.
		return Result{Status: Conflict, Value: l.permits()}
	}
	// FIFO: a request is granted at once only if nobody waits before it.
	now := l == nil || (l.waiters() == 0 && l.admits(shared))
	if !now && c.Wait && l.waiters() >= MaxWaitersPerLock {
		return limitExceeded(LimitWaitersPerLock)
	}
	if l == nil {
		l = &lock{name: c.Name}
		if permits != 0 {
			l.ensure().permits = permits
		}
		st.locks.add(l)
	}
	if now {
		return Result{Status: Granted, Value: st.grant(index, l, s, c.Seq, shared, "", c.MaxHold)}
	}
	if !c.Wait {
		return Result{Status: Locked}
	}
	w := &waiter{s: s, seq: c.Seq, shared: shared, maxHold: c.MaxHold, at: st.at}
	st.enqueue(l, w)
	s.waits[c.Seq] = w
	st.waiting++
	st.emit(Event{Kind: EventQueued, Session: s.id, Seq: c.Seq, Name: c.Name})
	return Result{Status: Queued}
}

func (st *State) release(index uint64, s *session, c *Command) Result {
	l := st.locks.get(c.Name)
	if l == nil {
		return Result{Status: NotHeld}
	}
	h := l.find(s, c.Token)
	if h == nil {
		return Result{Status: NotHeld}
	}
	st.free(index, h, ReasonReleased)
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
		if !w.l.election {
			// The head of a lock's queue may have been all that held the
			// shared requests behind it back.
			st.settle(index, w.l)
		}
		r.Status = Cancelled
	} else if h := st.cancelled(s, c); h != nil {
		st.free(index, h, ReasonCancelled)
		r.Status = Cancelled
	}
	if _, known := s.replies[c.Target]; c.Target >= s.floor && (c.v1 || known || len(s.replies) < MaxPendingPerSession) {
		// Beyond the bound the target's own request was refused (or would
		// be, if it arrives late), so it cannot apply behind the cancel.
		st.remember(s, c, c.Target, Result{Status: Cancelled})
	}
	return r
}

// grant makes request seq of s a holder of lock l (the leader, with value,
// of the election l), in mode shared, for at most maxHold nanoseconds (0:
// no bound); the holders must admit it.
func (st *State) grant(index uint64, l *lock, s *session, seq uint64, shared bool, value string, maxHold uint64) uint64 {
	h := &l.first
	if h.s != nil {
		h = new(hold)
	}
	*h = hold{l: l, s: s, seq: seq, token: st.nextToken(index), at: st.at}
	h.setMaxHold(maxHold)
	l.holders.push((*peerHold)(h))
	l.shared = shared
	l.setValue(value)
	st.grants++
	if _, ok := s.replies[seq]; ok {
		s.replies[seq] = Result{Status: Granted, Value: h.token}
	}
	if l.election {
		s.leads.push(h)
		st.emit(Event{Kind: EventElected, Session: s.id, Seq: seq, Token: h.token, Name: l.name, Value: value,
			MaxHold: maxHold, SessionName: s.name, At: h.at, Parent: s.parent})
	} else {
		s.held.push(h)
		st.emit(Event{Kind: EventGranted, Session: s.id, Seq: seq, Token: h.token, Name: l.name,
			Shared: shared, Permits: l.permits(), MaxHold: maxHold})
	}
	return h.token
}

// free ends grant h and grants its lock to the head of the queue, and to
// every request behind it the holders then admit, in the same entry. A
// lock nobody holds or waits for is forgotten.
func (st *State) free(index uint64, h *hold, why Reason) {
	l := h.l
	if seeded.On(seeded.PromotionReusesToken) { // the grant settle makes takes h's token
		defer func(last uint64) { st.lastToken = max(st.lastToken, last) }(st.lastToken)
		st.lastToken, index = h.token-1, 0
	}
	st.drop(h, why)
	st.settle(index, l)
}

// drop ends grant h without granting anything.
func (st *State) drop(h *hold, why Reason) {
	l, s := h.l, h.s
	if l.election {
		st.emit(Event{Kind: EventDeposed, Reason: why, Session: s.id, Seq: h.seq, Token: h.token, Name: l.name})
		s.leads.remove(h)
	} else {
		st.emit(Event{Kind: EventFreed, Reason: why, Session: s.id, Seq: h.seq, Token: h.token, Name: l.name,
			Shared: l.shared, Permits: l.permits()})
		s.held.remove(h)
	}
	l.holders.remove((*peerHold)(h))
	h.clearMaxHold()
	*h = hold{} // the lock's first grant is free for the next one
	if l.holders.n == 0 {
		// A semaphore stays shared: every grant of it is, and a delayed
		// one outlives its last holder.
		l.shared = l.permits() > 0
		l.setValue("")
	}
}

// settle grants l to the head of its queue while its holders admit the
// head, and forgets l if nobody holds it (then nobody waits either). A
// sealed group grants nothing: its queues are empty (the seal withdrew
// them, and nothing queues after it), and settle keeps it so even if one
// were not.
func (st *State) settle(index uint64, l *lock) {
	for w := l.next(); w != nil && !st.sealed && l.admits(w.shared); w = l.next() {
		st.unqueue(w)
		st.grant(index, l, w.s, w.seq, w.shared, w.value, w.maxHold)
	}
	if l.holders.n > 0 || l.delayed() {
		return
	}
	if l.election {
		st.elections.remove(l.name)
	} else {
		st.locks.remove(l.name)
	}
}

func (st *State) unqueue(w *waiter) {
	st.dequeue(w)
	if w.l.election {
		delete(w.s.campaigns, w.seq)
		st.campaigning--
	} else {
		delete(w.s.waits, w.seq)
		st.waiting--
	}
	st.emit(Event{Kind: EventUnqueued, Session: w.s.id, Seq: w.seq, Name: w.l.name, Election: w.l.election})
}

// endSession withdraws every queued request and candidacy of s (granting
// what that lets the holders admit), then frees
// its grants of locks and then its leaderships, each in name order and, for
// a lock it holds more than once (shared), in token order (each may grant its
// queue head; the order fixes the tokens), all in one entry.
//
// If s has a lock-delay and it expired or an operator ended it (why
// ReasonExpired or ReasonRevoked), each lock it held is delayed instead of
// granted on: its holder did not stop of its own accord, and may still
// have writes in flight. A close is the holder's own, so it delays
// nothing; neither does a release, nor a maximum hold running out (the
// holder stopped by its own clock before the group freed the grant).
func (st *State) endSession(index uint64, s *session, why Reason) {
	st.withdrawAll(index, s)
	delay := s.delay != 0 && (why == ReasonExpired || why == ReasonRevoked)
	if seeded.On(seeded.ExpiryIgnoresDelay) && why == ReasonExpired {
		delay = false
	}
	for _, list := range []*heldList{&s.held, &s.leads} {
		held := make([]*hold, 0, list.n)
		for h := range list.all {
			held = append(held, h)
		}
		sortHolds(held)
		for _, h := range held {
			if !delay || h.l.election {
				st.free(index, h, why)
				continue
			}
			st.dropDelayed(h, why, s.delay)
		}
	}
	delete(st.sessions, s.id)
	delete(st.nonces, s.nonce)
	st.emit(Event{Kind: EventSessionEnded, Reason: why, Session: s.id})
}

// seal marks the group as dying: see KindSeal. It withdraws every queued
// request and candidacy, locks then elections, each table in name order
// (a table's own order is a hash's) and each queue head first, so that
// every replica reports alike; nothing is granted, since the group is
// sealed before the first withdrawal.
func (st *State) seal(index uint64) Result {
	if st.gate.Codec < sealCodec {
		// Its snapshots could not keep the seal: a replica restoring one
		// would grant what its group refuses.
		return Result{Status: Invalid}
	}
	if st.sealed {
		return Result{Status: OK}
	}
	st.sealed = true
	var withdrawn uint64
	for _, t := range []*lockTable{st.locks, st.elections} {
		var ls []*lock
		for l := range t.all {
			if l.waiters() > 0 {
				ls = append(ls, l)
			}
		}
		slices.SortFunc(ls, func(a, b *lock) int { return strings.Compare(a.name, b.name) })
		for _, l := range ls {
			for w := l.next(); w != nil; w = l.next() {
				s, seq := w.s, w.seq
				st.unqueue(w)
				if _, ok := s.replies[seq]; ok {
					s.replies[seq] = Result{Status: Dropped} // for the request's retries
				}
				st.emit(Event{Kind: EventDropped, Session: s.id, Seq: seq, Name: l.name, Election: l.election})
				withdrawn++
			}
			st.settle(index, l) // forgets a lock nobody holds any more
		}
	}
	return Result{Status: OK, Value: withdrawn}
}

// sortHolds orders grants by name, then token: the order a session's end
// frees them in, so that every replica makes the same grants.
func sortHolds(held []*hold) {
	slices.SortFunc(held, func(a, b *hold) int {
		if a.l.election != b.l.election {
			if a.l.election {
				return 1
			}
			return -1
		}
		if c := strings.Compare(a.l.name, b.l.name); c != 0 {
			return c
		}
		return cmpUint(a.token, b.token)
	})
}

// withdrawAll withdraws every queued request and candidacy of s, and
// grants what that lets the holders admit.
func (st *State) withdrawAll(index uint64, s *session) {
	// Withdrawing grants nothing, but it is reported: in request order, so
	// that every replica reports alike (a map's order is not).
	var left []*lock // locks whose queues it left
	for _, waits := range []map[uint64]*waiter{s.waits, s.campaigns} {
		for _, seq := range slices.Sorted(maps.Keys(waits)) {
			w := waits[seq]
			st.unqueue(w)
			if !w.l.election {
				left = append(left, w.l)
			}
		}
	}
	// Leaving a queue may let the requests behind it be granted (shared
	// ones behind an exclusive head): once the session waits for nothing,
	// so that nothing is granted to it, in name order.
	slices.SortFunc(left, func(a, b *lock) int { return strings.Compare(a.name, b.name) })
	for i, l := range left {
		if i == 0 || left[i-1] != l {
			st.settle(index, l)
		}
	}
}

// outstanding reports the reply to request c (an Acquire or a Campaign) if
// it is still queued or holding its grant.
func (st *State) outstanding(s *session, c *Command) (Result, bool) {
	// Only a version-1 entry can find its reply evicted, and AcquireShared
	// (version 3) never is: skip the scan of a shared lock's holders.
	if c.Kind != KindAcquire && c.Kind != KindCampaign {
		return Result{}, false
	}
	if s.queued(c.Seq) != nil {
		return Result{Status: Queued}, true
	}
	if h := st.grantOf(s, c.Seq, c.Name, c.Kind == KindCampaign); h != nil {
		return Result{Status: Granted, Value: h.token}, true
	}
	return Result{}, false
}

// grantOf returns the grant of lock (or election) name to request seq of s,
// if it holds one.
func (st *State) grantOf(s *session, seq uint64, name string, election bool) *hold {
	table := st.locks
	if election {
		table = st.elections
	}
	if l := table.get(name); l != nil {
		return l.findSeq(s, seq)
	}
	return nil
}

// cancelled returns the grant a Cancel withdraws, if the target holds one.
// The client names the lock (or election), so it is one lookup; a Cancel
// without a name costs a scan of the session's grants.
func (st *State) cancelled(s *session, c *Command) *hold {
	if c.Name != "" {
		return st.grantOf(s, c.Target, c.Name, c.Election)
	}
	return s.holding(c.Target)
}

// holding returns the grant of a lock or election to request seq of s, if
// any. It scans the session's grants: only for rare paths (a snapshot
// restored, a Cancel without a name).
func (s *session) holding(seq uint64) *hold {
	for _, list := range []*heldList{&s.held, &s.leads} {
		for h := range list.all {
			if h.seq == seq {
				return h
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
