package fsm

import "github.com/fencelock/fencelock/internal/seeded"

// TokenShift is k in the token derivation: a grant made by the entry at raft
// log index i gets token max(previous token + 1, i << TokenShift). Tokens
// therefore rise strictly across the whole group (so per lock, and no two
// locks share one), are derived from the log index, and survive snapshots and
// restarts: the log index never goes back, and the last token is snapshotted.
// One entry may make up to 2^TokenShift grants before its tokens run into the
// range of the next index; the max() keeps them increasing even then.
const TokenShift = 16

// State is the replicated lock table. The zero value is not usable; call New.
// State is not safe for concurrent use: Dragonboat serialises Apply, queries
// and snapshots.
type State struct {
	index       uint64 // last applied raft log index
	lastToken   uint64 // last fencing token granted
	lastSession uint64 // last session ID assigned
	sessions    map[uint64]*session
	nonces      map[uint64]*session // live sessions by the nonce that opened them
	locks       *lockTable          // locks that are held, have waiters or are delayed
	waiting     int                 // queued requests in all locks
	elections   *lockTable          // elections that have a leader or candidates
	campaigning int                 // queued candidates in all elections
	grants      uint64              // grants made, of locks and leaderships
	leaderMark  uint64              // index of the last LeaderStart entry
	groupID     uint64              // the first LeaderStart's nonce; 0 before it
	// contended is the locks (not elections) anyone waits for, in no
	// order that matters: what Contended ranks, so that it need not scan
	// every lock. A lock joins when its queue grows from empty and leaves
	// when it empties.
	contended chain[lockMore, *lockMore]
	// at is the At of the command being applied: the time a grant or a
	// queued request records.
	at uint64
	// ops is the outcomes of the last operator commands with an
	// operation ID (version 7), for their retries.
	ops ops
	// gate is the log and snapshot versions the group writes (version 9;
	// Baseline before: see version.go).
	gate Gate
	// table is the group table (grouptable.go), the default group's.
	table groupTable
	// sealed is set by KindSeal (version 11; snapshot version 9): the
	// group is being dropped, queues nothing and grants nothing.
	sealed bool

	events  []Event
	results []Result
}

// session is one holder: usually one per client process.
type session struct {
	id, nonce, ttl, owner uint64
	name                  string // its name (version 6; "" before)
	parent                uint64 // the session it is a part of (Command.Parent; version 10), 0: none or unknown
	delay                 uint64 // its lock-delay, nanoseconds (0: none)
	keepAlive             uint64 // index of the entry that last renewed it
	floor                 uint64
	base                  uint64 // the floor its last Resume set: older commands are its old incarnation's
	resumed               uint64 // the attempt ID of its last Resume
	// epoch is a named group's part's ownership epoch: the Epoch of the
	// fenced Resume that last moved it (Command.Fence; version 11), 0
	// before one did. A session's default part's epoch is its base.
	epoch     uint64
	replies   map[uint64]Result  // request seq -> first reply, for seq >= floor
	held      heldList           // grants of locks it holds
	leads     heldList           // grants of elections it leads
	waits     map[uint64]*waiter // its queued requests by seq
	campaigns map[uint64]*waiter // its queued candidacies by seq
}

// lock is a named lock, or an election: a lock whose one holder is the
// leader and carries a value. It exists while held or waited for, or (a
// lock, not an election) while delayed.
//
// A lock has one exclusive holder or, in shared mode, any number of
// holders up to its capacity: MaxHoldersPerLock for a shared/exclusive
// lock, permits for a semaphore (whose every grant is shared). Requests
// wait in one FIFO queue whatever their mode, and the head of the queue
// is granted as soon as the holders admit it, so that a shared request
// never overtakes an exclusive one queued before it.
type lock struct {
	name     string
	election bool
	shared   bool      // its holders hold in shared mode
	first    hold      // the first grant's storage: an exclusive lock allocates no other
	holders  peerList  // its grants, in the order they were made (token order)
	more     *lockMore // nil for a lock that never needed it: see lockMore
}

// lockMore is what a lock needs only once it is a semaphore, has a
// leader's value, is delayed or has been waited for. Most of a million
// held locks are none of these, so it is kept apart, allocated the first
// time one is set and kept while the lock lives (so a lock handed from
// holder to waiter allocates it once, not at every handoff). Read it
// through the lock's methods, which read a nil one as zero.
type lockMore struct {
	permits uint64 // a semaphore's permit count; 0 for a lock or an election
	value   string // election: the leader's value
	// delay is the lock-delay the lock is under, in nanoseconds: 0 unless
	// a session that held it expired (or an operator ended it) with a
	// lock-delay; then nobody is granted the lock until Undelay names
	// delayToken, the token of the grant whose end began the delay.
	delay, delayToken uint64
	queue             waitQueue // FIFO queue of waiting requests
	// l is the lock this belongs to, and hot its link in the state's
	// contended locks while its queue is not empty (never an election's).
	l   *lock
	hot link[lockMore]
	// firstMaxHold is the maximum hold of the lock's first grant (the
	// one inside the lock), and maxHolds those of its other grants that
	// have one. Maximum holds are rare, so a grant keeps none of its own:
	// that kept a plain lock, its first grant inside it, within 128 bytes
	// when grants gained a time. A lock held exclusively with a maximum
	// hold pays for its lockMore instead.
	firstMaxHold uint64
	maxHolds     map[*hold]uint64
}

func (m *lockMore) chained() *link[lockMore] { return &m.hot }

// waitQueue is a lock's queue of waiting requests, oldest first.
type waitQueue = chain[waiter, *waiter]

// ensure returns l's lockMore, allocating it if l has none yet.
func (l *lock) ensure() *lockMore {
	if l.more == nil {
		l.more = &lockMore{l: l}
	}
	return l.more
}

// permits is the lock's permit count if it is a semaphore, else 0.
func (l *lock) permits() uint64 {
	if l.more == nil {
		return 0
	}
	return l.more.permits
}

// value is the election leader's value ("" for a lock).
func (l *lock) value() string {
	if l.more == nil {
		return ""
	}
	return l.more.value
}

// setValue sets the election leader's value; clearing it allocates nothing.
func (l *lock) setValue(v string) {
	if v != "" || l.more != nil {
		l.ensure().value = v
	}
}

// delay is the lock-delay l is under (0: none) and the token whose end
// began it.
func (l *lock) delay() (delay, token uint64) {
	if l.more == nil {
		return 0, 0
	}
	return l.more.delay, l.more.delayToken
}

// delayed reports whether l is under a lock-delay.
func (l *lock) delayed() bool { return l.more != nil && l.more.delay != 0 }

// setDelay puts l under a lock-delay begun by the end of grant token, or
// with 0, 0 ends it; ending none allocates nothing.
func (l *lock) setDelay(delay, token uint64) {
	if delay != 0 || token != 0 || l.more != nil {
		m := l.ensure()
		m.delay, m.delayToken = delay, token
	}
}

// waiters is how many requests wait in l's queue.
func (l *lock) waiters() int {
	if l.more == nil {
		return 0
	}
	return l.more.queue.n
}

// next returns the head of l's queue, or nil if nobody waits.
func (l *lock) next() *waiter {
	if l.more == nil {
		return nil
	}
	return l.more.queue.head
}

// queued yields l's waiting requests, head first; the caller may remove
// the one it is given.
func (l *lock) queued(yield func(*waiter) bool) {
	if l.more != nil {
		l.more.queue.all(yield)
	}
}

// hold is one grant of a lock (or of an election) to one request of a
// session, with its fencing token. It is linked into its session's held
// (or leads) list and into its lock's holders.
type hold struct {
	l          *lock
	s          *session
	seq, token uint64
	at         uint64         // the At of the command that made it (0: unknown)
	mine       link[hold]     // in the session's list
	peers      link[peerHold] // in the lock's holders
}

func (h *hold) chained() *link[hold] { return &h.mine }

// maxHold is the grant's maximum hold, nanoseconds (0: none).
func (h *hold) maxHold() uint64 {
	m := h.l.more
	switch {
	case m == nil:
		return 0
	case h == &h.l.first:
		return m.firstMaxHold
	case m.maxHolds != nil:
		return m.maxHolds[h]
	}
	return 0
}

// setMaxHold records grant h's maximum hold d (0: none, recorded as
// nothing).
func (h *hold) setMaxHold(d uint64) {
	if d == 0 {
		return
	}
	m := h.l.ensure()
	if h == &h.l.first {
		m.firstMaxHold = d
		return
	}
	if m.maxHolds == nil {
		m.maxHolds = make(map[*hold]uint64)
	}
	m.maxHolds[h] = d
}

// clearMaxHold forgets grant h's maximum hold, as it ends.
func (h *hold) clearMaxHold() {
	m := h.l.more
	switch {
	case m == nil:
	case h == &h.l.first:
		m.firstMaxHold = 0
	case m.maxHolds != nil:
		delete(m.maxHolds, h)
	}
}

// peerHold is a hold as an element of its lock's holders: the same
// memory, linked through its other link.
type peerHold hold

func (p *peerHold) chained() *link[peerHold] { return &p.peers }

// peerList is the holders of a lock, oldest grant first.
type peerList = chain[peerHold, *peerHold]

// heldList is the grants a session holds, linked through the grants
// themselves. Lookups go through the lock tables by name instead.
type heldList = chain[hold, *hold]

// grants yields the lock's grants, oldest first; the caller may drop the
// grant it is given.
func (l *lock) grants(yield func(*hold) bool) {
	for p := range l.holders.all {
		if !yield((*hold)(p)) {
			return
		}
	}
}

// oldest returns the lock's oldest grant (an election's only one), or nil
// if it is free.
func (l *lock) oldest() *hold { return (*hold)(l.holders.head) }

// key is the token that orders l in a snapshot: its oldest grant's or, if
// it is free (then delayed), the token whose end began the delay. Tokens
// are unique, so no two locks share a key.
func (l *lock) key() uint64 {
	if h := l.oldest(); h != nil {
		return h.token
	}
	_, token := l.delay()
	return token
}

// capacity is how many grants the lock admits at once in shared mode.
func (l *lock) capacity() int {
	if p := l.permits(); p > 0 {
		return int(p)
	}
	return MaxHoldersPerLock
}

// admits reports whether a request in mode shared could be granted now if
// it were at the head of the queue. A delayed lock admits nobody.
func (l *lock) admits(shared bool) bool {
	if l.delayed() {
		return false
	}
	if l.holders.n == 0 {
		return true
	}
	if seeded.On(seeded.SharedBesideExclusive) && shared && !l.shared {
		return true
	}
	return shared && l.shared && l.holders.n < l.capacity()
}

// find returns the grant of l with token, if any, provided it is session
// s's (or, with s nil, whoever's).
func (l *lock) find(s *session, token uint64) *hold {
	for h := range l.grants {
		if h.token == token && (s == nil || h.s == s) {
			return h
		}
	}
	return nil
}

// findSeq returns the grant of l to request seq of session s, if any.
func (l *lock) findSeq(s *session, seq uint64) *hold {
	for h := range l.grants {
		if h.s == s && h.seq == seq {
			return h
		}
	}
	return nil
}

// waiter is one queued Acquire or Campaign, linked into its lock's queue.
type waiter struct {
	s      *session
	seq    uint64
	shared bool   // Acquire: in shared mode (a shared lock's, or a semaphore's)
	value  string // Campaign: the value it will lead with
	// maxHold is the maximum hold its grant will have, nanoseconds.
	maxHold uint64
	at      uint64 // the At of the command that queued it (0: unknown)
	l       *lock
	link    link[waiter]
}

func (w *waiter) chained() *link[waiter] { return &w.link }

// New returns an empty state.
func New() *State {
	return &State{
		sessions:  make(map[uint64]*session),
		nonces:    make(map[uint64]*session),
		locks:     new(lockTable),
		elections: new(lockTable),
		gate:      Baseline,
	}
}

// Index returns the index of the last applied entry.
func (st *State) Index() uint64 { return st.index }

// LeaderMark returns the index of the last LeaderStart entry applied: the
// mark the current leader's expiries name. It is 0 before the first.
func (st *State) LeaderMark() uint64 { return st.leaderMark }

// GroupID returns the group's ID: the random nonce of the first LeaderStart
// it applied, never changed after; 0 before it. A group bootstrapped again
// from empty Dirs gets another one, so tokens of two incarnations, which
// both start low, can be told apart.
func (st *State) GroupID() uint64 { return st.groupID }

// LastToken returns the last fencing token granted.
func (st *State) LastToken() uint64 { return st.lastToken }

// Sealed reports whether the group is being dropped (KindSeal): it grants
// nothing, and answers every Acquire and Campaign Dropped.
func (st *State) Sealed() bool { return st.sealed }

func (st *State) nextToken(index uint64) uint64 {
	st.lastToken = max(st.lastToken+1, index<<TokenShift)
	return st.lastToken
}

func (st *State) nextSessionID(index uint64) uint64 {
	st.lastSession = max(st.lastSession+1, index<<TokenShift)
	return st.lastSession
}

// enqueue queues w behind the other waiters of l; a lock's first waiter
// makes it contended.
func (st *State) enqueue(l *lock, w *waiter) {
	w.l = l
	m := l.ensure()
	if m.queue.n == 0 && !l.election {
		st.contended.push(m)
	}
	m.queue.push(w)
}

// dequeue takes w out of its lock's queue; a lock's last waiter leaving
// makes it uncontended.
func (st *State) dequeue(w *waiter) {
	m := w.l.more // a lock anyone waits for has its lockMore
	m.queue.remove(w)
	if m.queue.n == 0 && !w.l.election {
		st.contended.remove(m)
	}
}
