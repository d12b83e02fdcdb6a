package fsm

import "slices"

// LockInfo describes one lock. Token, Session and Seq describe its oldest
// current grant: for a lock held exclusively, its only one.
type LockInfo struct {
	Name    string
	Held    bool
	Token   uint64 // the oldest current grant's fencing token; 0 when free
	Session uint64 // its holder's session; 0 when free
	Seq     uint64 // its holder's request number
	// Parent is the holder's session's parent (Command.Parent): the
	// session it is a part of; 0 when free, or for none or unknown.
	Parent uint64
	// SessionName and GrantedAt are the oldest grant's session's name and
	// the time it was made, as in Holders[0] (see Holder.GrantedAt).
	SessionName string
	GrantedAt   uint64
	Waiters     int
	Shared      bool     // held in shared mode (a shared lock's holders, a semaphore's)
	Permits     uint64   // a semaphore's permit count; 0 for a lock
	Holders     []Holder // every current grant, oldest (lowest token) first; nil when free
	// Delayed: the lock is under a lock-delay (a session that held it
	// expired, or an operator ended it): nobody is granted it until the
	// leader ends the delay. Delay is its length in nanoseconds; when it
	// ends is the leader's timer's, not the state's, to know.
	Delayed bool
	Delay   uint64
}

// Holder is one current grant of a lock.
type Holder struct {
	Session, Seq, Token uint64
	Parent              uint64 // the session's parent (Command.Parent); 0: none or unknown
	Name                string // the session's name ("" if it was opened without one)
	Owner               uint64 // the replica the session lives on
	MaxHold             uint64 // the grant's maximum hold, nanoseconds; 0: none
	// GrantedAt is when the grant was made: the At of the command whose
	// apply made it (the acquire, or the release, cancel, expiry or revoke
	// that passed the lock on), in nanoseconds since the Unix epoch by its
	// proposer's clock. 0: unknown (made by an entry older than version 6).
	GrantedAt uint64
}

// Waiter is one queued request for a lock.
type Waiter struct {
	Session, Seq uint64
	Parent       uint64 // the session's parent (Command.Parent); 0: none or unknown
	Name         string // the session's name
	Owner        uint64 // the replica the session lives on
	Shared       bool   // it asks for the lock in shared mode
	// Place is its place in the queue: 1 at the head.
	Place int
	// QueuedAt is the At of the request that queued it (see
	// Holder.GrantedAt); 0: unknown.
	QueuedAt uint64
}

// Delay is a lock under a lock-delay, for the leader's timers: Token is
// the grant whose end began it, Delay its length in nanoseconds.
type Delay struct {
	Name         string
	Token, Delay uint64
}

// TimedGrant is a grant with a maximum hold, for the leader's timers.
type TimedGrant struct {
	Name           string
	Election       bool
	Token, MaxHold uint64
}

// Timers returns every lock under a lock-delay and every grant with a
// maximum hold: what the leader's timers must time after a snapshot
// replaced the state. The order is unspecified.
func (st *State) Timers() (delays []Delay, grants []TimedGrant) {
	for l := range st.locks.all {
		if delay, token := l.delay(); delay != 0 {
			delays = append(delays, Delay{Name: l.name, Token: token, Delay: delay})
		}
	}
	for _, table := range []*lockTable{st.locks, st.elections} {
		for l := range table.all {
			for h := range l.grants {
				if h.maxHold() != 0 {
					grants = append(grants, TimedGrant{Name: l.name, Election: l.election, Token: h.token, MaxHold: h.maxHold()})
				}
			}
		}
	}
	return delays, grants
}

// SessionInfo describes one session.
type SessionInfo struct {
	ID        uint64
	Parent    uint64 // the session it is a part of (Command.Parent; version 10); 0: none or unknown
	Name      string // the name it was opened with (version 6; "" before)
	TTL       uint64 // nanoseconds
	Delay     uint64 // its lock-delay, nanoseconds
	Owner     uint64 // replica ID the session lives on
	KeepAlive uint64 // index of the entry that last renewed it
	Held      int
	Waiting   int
	// Base is the floor its last resume set (0: never resumed): a
	// session's ownership epoch, which a fenced adoption of its default
	// part names (Command.Fence).
	Base uint64
	// Epoch is a named group's part's ownership epoch: the epoch of the
	// fenced adoption that last moved it (0: none did).
	Epoch uint64
}

// Lock describes the lock called name; a lock nobody holds is reported free.
func (st *State) Lock(name string) LockInfo {
	l := st.locks.get(name)
	if l == nil {
		return LockInfo{Name: name}
	}
	return l.info()
}

func (l *lock) info() LockInfo {
	delay, _ := l.delay()
	info := LockInfo{Name: l.name, Waiters: l.waiters(), Shared: l.shared, Permits: l.permits(),
		Delayed: delay != 0, Delay: delay}
	if h := l.oldest(); h != nil {
		info.Held, info.Token, info.Session, info.Seq, info.Parent = true, h.token, h.s.id, h.seq, h.s.parent
		info.SessionName, info.GrantedAt = h.s.name, h.at
		info.Holders = make([]Holder, 0, l.holders.n)
		for h := range l.grants {
			info.Holders = append(info.Holders, h.holder())
		}
	}
	return info
}

// Session describes session id, if it exists.
func (st *State) Session(id uint64) (SessionInfo, bool) {
	s := st.sessions[id]
	if s == nil {
		return SessionInfo{}, false
	}
	return s.info(), true
}

// holder describes grant h.
func (h *hold) holder() Holder {
	return Holder{Session: h.s.id, Seq: h.seq, Token: h.token, Parent: h.s.parent, Name: h.s.name, Owner: h.s.owner,
		MaxHold: h.maxHold(), GrantedAt: h.at}
}

func (s *session) info() SessionInfo {
	return SessionInfo{ID: s.id, Parent: s.parent, Name: s.name, TTL: s.ttl, Delay: s.delay, Owner: s.owner, KeepAlive: s.keepAlive,
		Held: s.held.n, Waiting: len(s.waits), Base: s.base, Epoch: s.epoch}
}

// Kept returns the ID of the last attempt that resumed session id (0 if
// none did), an EventKept for each grant the session holds now and an
// EventKeptQueued for each request it has queued now, in the order a
// resume reports them: what a replica whose snapshot covered the resume
// never saw reported. (Only a resume with Keep reports queued requests;
// after one without, the session has none until its new holder asks.)
func (st *State) Kept(id uint64) (resumed uint64, kept []Event) {
	s := st.sessions[id]
	if s == nil {
		return 0, nil
	}
	return s.resumed, s.keptQueued(s.kept(nil))
}

// Sessions returns every session, ordered by ID.
func (st *State) Sessions() []SessionInfo {
	out := make([]SessionInfo, 0, len(st.sessions))
	for _, s := range st.sessions {
		out = append(out, s.info())
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return cmpUint(a.ID, b.ID) })
	return out
}

// Grant reports the lock and token that request seq of session holds, if any.
func (st *State) Grant(session, seq uint64) (name string, token uint64, ok bool) {
	s := st.sessions[session]
	if s == nil {
		return "", 0, false
	}
	if h := s.holding(seq); h != nil && !h.l.election {
		return h.l.name, h.token, true
	}
	return "", 0, false
}

// Queued reports whether request seq of session waits in a queue.
func (st *State) Queued(session, seq uint64) bool {
	s := st.sessions[session]
	return s != nil && s.waits[seq] != nil
}

// Queue returns the sessions of the requests waiting for lock name, head
// first: up to limit of them.
func (st *State) Queue(name string, limit int) []uint64 {
	if l := st.locks.get(name); l != nil {
		return l.waiting(limit)
	}
	return nil
}

// Waiters returns up to limit of the requests waiting for lock name, head
// first, with their places, names and when they queued.
func (st *State) Waiters(name string, limit int) []Waiter {
	if l := st.locks.get(name); l != nil {
		return l.waiterList(limit)
	}
	return nil
}

func (l *lock) waiterList(limit int) []Waiter {
	var out []Waiter
	for w := l.next(); w != nil && len(out) < limit; w = w.link.next {
		out = append(out, Waiter{Session: w.s.id, Seq: w.seq, Parent: w.s.parent, Name: w.s.name, Owner: w.s.owner, Shared: w.shared,
			Place: len(out) + 1, QueuedAt: w.at})
	}
	return out
}

func (l *lock) waiting(limit int) []uint64 {
	var out []uint64
	for w := l.next(); w != nil && len(out) < limit; w = w.link.next {
		out = append(out, w.s.id)
	}
	return out
}

// Position returns where request seq of session waits: 1 at the head of
// its lock's queue (or its election's candidates), 0 if it is not queued.
// It walks the queue, which MaxWaitersPerLock bounds.
func (st *State) Position(session, seq uint64) int {
	s := st.sessions[session]
	if s == nil {
		return 0
	}
	w := s.waits[seq]
	if w == nil {
		w = s.campaigns[seq]
	}
	if w == nil {
		return 0
	}
	pos := 1
	for q := w.l.next(); q != nil && q != w; q = q.link.next {
		pos++
	}
	return pos
}

// Holds reports whether session holds lock name with grant token.
func (st *State) Holds(session uint64, name string, token uint64) bool {
	l, s := st.locks.get(name), st.sessions[session]
	return l != nil && s != nil && l.find(s, token) != nil
}

// Counts returns the number of sessions, locks (held, waited for or
// delayed) and queued requests.
func (st *State) Counts() (sessions, locks, waiting int) {
	return len(st.sessions), st.locks.len(), st.waiting
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
