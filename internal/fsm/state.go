package fsm

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
	locks       map[string]*lock    // locks that are held or have waiters
	waiting     int                 // queued requests in all locks
	elections   map[string]*lock    // elections that have a leader or candidates
	campaigning int                 // queued candidates in all elections
	grants      uint64              // grants made, of locks and leaderships
	leaderMark  uint64              // index of the last LeaderStart entry
	groupID     uint64              // the first LeaderStart's nonce; 0 before it

	events  []Event
	results []Result
}

// session is one holder: usually one per client process.
type session struct {
	id, nonce, ttl, owner uint64
	keepAlive             uint64 // index of the entry that last renewed it
	floor                 uint64
	base                  uint64             // the floor its last Resume set: older commands are its old incarnation's
	resumed               uint64             // the attempt ID of its last Resume
	replies               map[uint64]Result  // request seq -> first reply, for seq >= floor
	held                  heldList           // locks it holds
	leads                 heldList           // elections it leads
	waits                 map[uint64]*waiter // its queued requests by seq
	campaigns             map[uint64]*waiter // its queued candidacies by seq
}

// lock is a named exclusive lock, or an election: a lock whose holder is
// the leader and carries a value. It exists while held or waited for.
type lock struct {
	name     string
	election bool
	value    string   // election: the leader's value
	holder   *session // nil when free
	seq      uint64   // the holder's request number
	token    uint64
	queue    chain[waiter, *waiter] // FIFO queue of waiting requests
	// heldLink links the lock into its holder's held or leads list.
	heldLink link[lock]
}

func (l *lock) chained() *link[lock] { return &l.heldLink }

// heldList is the locks (or elections) a session holds, linked through the
// locks themselves. Lookups go through the lock tables by name instead.
type heldList = chain[lock, *lock]

// waiter is one queued Acquire or Campaign, linked into its lock's queue.
type waiter struct {
	s     *session
	seq   uint64
	value string // Campaign: the value it will lead with
	l     *lock
	link  link[waiter]
}

func (w *waiter) chained() *link[waiter] { return &w.link }

// New returns an empty state.
func New() *State {
	return &State{
		sessions:  make(map[uint64]*session),
		nonces:    make(map[uint64]*session),
		locks:     make(map[string]*lock),
		elections: make(map[string]*lock),
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

func (st *State) nextToken(index uint64) uint64 {
	st.lastToken = max(st.lastToken+1, index<<TokenShift)
	return st.lastToken
}

func (st *State) nextSessionID(index uint64) uint64 {
	st.lastSession = max(st.lastSession+1, index<<TokenShift)
	return st.lastSession
}

// push queues w behind the lock's other waiters.
func (l *lock) push(w *waiter) {
	w.l = l
	l.queue.push(w)
}
