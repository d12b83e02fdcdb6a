// Package expiry holds the leader-side session timers.
//
// Every replica records, in its own memory, the monotonic time at which it
// applied each session's latest keep-alive. Only the raft leader acts on it.
// On promotion it first proposes LeaderStart; when that entry applies, its
// index is the leader's mark and every timer restarts at "now", so each
// session gets a full TTL from the new leader: its holder could not renew
// during the election. From then on, when a session's TTL has passed since
// its keep-alive applied, the leader proposes Expire(session, keep-alive
// index, mark), which the state machine applies only if no newer keep-alive
// arrived and no newer leader started. A deposed leader's late Expire is
// therefore refused, whichever leader's term it commits in.
//
// Sessions are timed in buckets, not one timer each: every session a
// keep-alive entry renewed (a replica's keep-alive batch renews all it
// holds) shares that entry's index, and so the deadline it earns, with the
// others of its TTL; the bucket fires once, for those it still holds. A
// session a later keep-alive renewed has moved to a later bucket. So a
// leader with a hundred thousand idle sessions keeps a few timers, and a
// renewal costs a map update, not a heap operation.
//
// The same timers end lock-delays and maximum holds: a lock delayed at the
// group, or a grant with a maximum hold, is timed from when this replica
// applied it, and the leader proposes Undelay or ExpireGrant, naming its
// mark, when the time is up. A new leader restarts every one of them in
// full, as it restarts the sessions' TTLs: it cannot know how much of a
// delay or a hold its predecessor had timed, and starting late only errs
// toward a lock unavailable for longer, never toward an early grant.
package expiry

import (
	"container/heap"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/seeded"
)

// Session is what the tracker needs to know of one session.
type Session struct {
	ID, KeepAlive uint64
	TTL           time.Duration
}

// Actions are what the tracker proposes. Both must not block: they propose
// asynchronously, and the tracker asks again every retry until the state
// shows the effect.
type Actions struct {
	// Start proposes LeaderStart for this replica's raft term.
	Start func(term uint64)
	// Expire proposes the expiry of session id at keepAlive, naming mark.
	Expire func(id, keepAlive, mark uint64)
	// Undelay proposes the end of lock name's lock-delay begun by the end
	// of grant token, naming mark.
	Undelay func(name string, token, mark uint64)
	// ExpireGrant proposes the end of grant token of lock (or, with
	// election, election) name, its maximum hold over, naming mark.
	ExpireGrant func(name string, election bool, token, mark uint64)
}

// Delay is a lock under a lock-delay: Token is the grant whose end began
// it, D its length.
type Delay struct {
	Name  string
	Token uint64
	D     time.Duration
}

// Hold is a grant with a maximum hold D.
type Hold struct {
	Name     string
	Election bool
	Token    uint64
	D        time.Duration
}

// Tracker decides when the leader proposes an expiry.
type Tracker struct {
	clock clock.Clock
	act   Actions
	retry time.Duration
	self  uint64 // this replica's ID, as LeaderStart names it

	mu        sync.Mutex
	sessions  map[uint64]sessionTimer
	delays    map[string]*entry // locks under a lock-delay, by name
	holds     map[uint64]*entry // grants with a maximum hold, by token
	due       deadlines         // only while armed
	leader    bool
	term      uint64    // the raft term this replica leads, while leader
	mark      uint64    // index of this leader's LeaderStart; 0 until it applied
	nextStart time.Time // when to propose LeaderStart (again), while unarmed
	kick      chan struct{}
}

// sessionTimer is what the tracker knows of one session: its latest
// keep-alive, its TTL and, while armed, the bucket that times it.
type sessionTimer struct {
	keepAlive uint64
	ttl       time.Duration
	bucket    *bucket
}

// bucket times the sessions renewed by one keep-alive entry that share a
// TTL, from when this replica applied it (or, after a restart of every
// timer, the sessions of a TTL).
type bucket struct {
	ttl  time.Duration
	ids  []uint64 // its sessions, some of which may have moved on
	live int      // how many of ids it still times
}

// entry is one timer of a lock: a lock-delay or a maximum hold.
type entry struct {
	kind     entryKind
	delay    Delay // kindDelay
	hold     Hold  // kindHold
	deadline time.Time
	gen      uint64 // bumped on every change, so stale heap items are skipped
}

type entryKind uint8

const (
	kindDelay entryKind = iota + 1
	kindHold
)

// length is how long the entry's timer runs.
func (e *entry) length() time.Duration {
	if e.kind == kindDelay {
		return e.delay.D
	}
	return e.hold.D
}

// New returns the tracker of replica self. While it leads, it calls
// act.Start until its LeaderStart applies, then act.Expire when a
// session's time is up, again every retry while the session stays.
func New(c clock.Clock, retry time.Duration, self uint64, act Actions) *Tracker {
	return &Tracker{clock: c, retry: retry, self: self, act: act,
		sessions: make(map[uint64]sessionTimer), delays: make(map[string]*entry), holds: make(map[uint64]*entry),
		kick: make(chan struct{}, 1)}
}

// armed reports whether this replica leads and its LeaderStart applied.
func (t *Tracker) armed() bool { return t.leader && t.mark != 0 }

// Touch records that this replica applied keep-alive index ka of session
// id, opened with ttl.
func (t *Tracker) Touch(id, ka uint64, ttl time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.sessions[id]
	t.leave(st)
	st = sessionTimer{keepAlive: ka, ttl: ttl}
	if t.armed() {
		b := &bucket{ttl: ttl}
		t.join(&st, id, b)
		t.push(item{at: t.clock.Now().Add(ttl), b: b})
	}
	t.sessions[id] = st
}

// TouchBatch records that this replica applied keep-alive index ka, which
// renewed sessions ids. Sessions it does not know (it learns each at its
// open, by Touch) are ignored.
func (t *Tracker) TouchBatch(ka uint64, ids []uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	armed := t.armed()
	var buckets []*bucket // by TTL: a batch's sessions mostly share one
	for _, id := range ids {
		st, ok := t.sessions[id]
		if !ok {
			continue
		}
		t.leave(st)
		st.keepAlive, st.bucket = ka, nil
		if armed {
			i := slices.IndexFunc(buckets, func(b *bucket) bool { return b.ttl == st.ttl })
			if i < 0 {
				i = len(buckets)
				buckets = append(buckets, &bucket{ttl: st.ttl, ids: make([]uint64, 0, len(ids))})
			}
			t.join(&st, id, buckets[i])
		}
		t.sessions[id] = st
	}
	now := t.clock.Now()
	for _, b := range buckets {
		t.push(item{at: now.Add(b.ttl), b: b})
	}
}

// join makes b time session id, whose timer is st.
func (t *Tracker) join(st *sessionTimer, id uint64, b *bucket) {
	st.bucket = b
	b.ids = append(b.ids, id)
	b.live++
}

// leave stops st's bucket timing it; a bucket that times nobody any more
// lets its IDs go at once rather than when it fires.
func (t *Tracker) leave(st sessionTimer) {
	if b := st.bucket; b != nil {
		if b.live--; b.live == 0 {
			b.ids = nil
		}
	}
}

// Remove forgets an ended session.
func (t *Tracker) Remove(id uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if st, ok := t.sessions[id]; ok {
		t.leave(st)
		delete(t.sessions, id)
	}
}

// Delayed records that this replica applied the start of a lock-delay: it
// replaces any earlier delay of the same lock, and runs in full from now.
func (t *Tracker) Delayed(d Delay) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &entry{kind: kindDelay, delay: d}
	t.delays[d.Name] = e
	t.begin(e)
}

// Undelayed forgets the lock-delay of lock name begun by token.
func (t *Tracker) Undelayed(name string, token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.delays[name]; e != nil && e.delay.Token == token {
		delete(t.delays, name)
	}
}

// Held records that this replica applied a grant with a maximum hold; it
// runs in full from now.
func (t *Tracker) Held(h Hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &entry{kind: kindHold, hold: h}
	t.holds[h.Token] = e
	t.begin(e)
}

// begin runs e, a lock-delay or hold just applied, in full from now. The
// heap times it only while this replica's timers are armed; restartAll
// starts it afresh when they are.
func (t *Tracker) begin(e *entry) {
	e.deadline = t.clock.Now().Add(e.length())
	if t.armed() {
		t.push(item{at: e.deadline, e: e})
	}
}

// Freed forgets grant token, which ended.
func (t *Tracker) Freed(token uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.holds, token)
}

// Reset replaces everything known, after the state was restored from a
// snapshot whose leader mark is mark; every session starts a full TTL now,
// and every delay and maximum hold runs in full from now.
func (t *Tracker) Reset(sessions []Session, delays []Delay, holds []Hold, mark uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sessions = make(map[uint64]sessionTimer, len(sessions))
	for _, s := range sessions {
		t.sessions[s.ID] = sessionTimer{keepAlive: s.KeepAlive, ttl: s.TTL}
	}
	t.delays = make(map[string]*entry, len(delays))
	for _, d := range delays {
		t.delays[d.Name] = &entry{kind: kindDelay, delay: d}
	}
	t.holds = make(map[uint64]*entry, len(holds))
	for _, h := range holds {
		t.holds[h.Token] = &entry{kind: kindHold, hold: h}
	}
	if t.mark != mark {
		t.disarm() // another leader started meanwhile
	}
	t.restartAll()
}

// SetLeader tells the tracker whether this replica leads, and in which raft
// term. A promotion (or a new term) proposes LeaderStart; no session expires
// until it applied.
func (t *Tracker) SetLeader(leader bool, term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if leader == t.leader && (!leader || term == t.term) {
		return
	}
	t.leader, t.term = leader, term
	t.disarm()
}

// LeaderStarted reports that the LeaderStart entry of replica owner for
// term applied at index. If it is this leader's own, the timers start;
// if not, another leader's mark is current and this replica's expiries
// would be refused, so it waits for its own.
func (t *Tracker) LeaderStarted(index, owner, term uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.leader && owner == t.self && term == t.term {
		t.mark = index
		t.restartAll()
		return
	}
	t.disarm()
}

func (t *Tracker) disarm() {
	t.mark = 0
	t.due = t.due[:0]
	t.nextStart = time.Time{}
	t.wake()
}

func (t *Tracker) restartAll() {
	now := t.clock.Now()
	if seeded.On(seeded.LeaderTimersAtOnce) {
		now = now.Add(-24 * time.Hour)
	}
	armed := t.armed()
	t.due = t.due[:0]
	restart := func(e *entry) {
		e.deadline = now.Add(e.length())
		e.gen++
		if armed {
			t.due = append(t.due, item{at: e.deadline, e: e, gen: e.gen})
		}
	}
	// Every session starts a full TTL now: one bucket per TTL. Expire names
	// each session's own keep-alive, so a bucket need not share one.
	buckets := map[time.Duration]*bucket{}
	for id, st := range t.sessions {
		st.bucket = nil
		if armed {
			b := buckets[st.ttl]
			if b == nil {
				b = &bucket{ttl: st.ttl}
				buckets[st.ttl] = b
				t.due = append(t.due, item{at: now.Add(st.ttl), b: b})
			}
			t.join(&st, id, b)
		}
		t.sessions[id] = st
	}
	for _, e := range t.delays {
		restart(e)
	}
	for _, e := range t.holds {
		restart(e)
	}
	heap.Init(&t.due)
	t.wake()
}

// timers counts the entries timed.
func (t *Tracker) timers() int { return len(t.sessions) + len(t.delays) + len(t.holds) }

// push adds it to the heap (stamping an entry's item with its generation).
func (t *Tracker) push(it item) {
	if it.e != nil {
		it.gen = it.e.gen
	}
	if len(t.due) > 4*t.timers()+64 { // drop the stale items of renewed sessions and changed timers
		live := t.due[:0]
		for _, it := range t.due {
			if it.current(t) {
				live = append(live, it)
			}
		}
		clear(t.due[len(live):])
		t.due = live
		heap.Init(&t.due)
	}
	heap.Push(&t.due, it)
	if t.due[0] == it {
		t.wake()
	}
}

func (t *Tracker) wake() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// Run fires the timers until stop is closed.
func (t *Tracker) Run(stop <-chan struct{}) {
	timer := t.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := t.fire()
		timer.Stop()
		timer.Reset(wait)
		select {
		case <-stop:
			return
		case <-timer.C():
		case <-t.kick:
		}
	}
}

// fire proposes LeaderStart or the expiries that are due, and returns how
// long to sleep.
func (t *Tracker) fire() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.leader {
		return time.Hour
	}
	now := t.clock.Now()
	if t.mark == 0 {
		if !now.Before(t.nextStart) {
			t.act.Start(t.term)
			t.nextStart = now.Add(t.retry)
		}
		return t.nextStart.Sub(now)
	}
	for len(t.due) > 0 {
		it := t.due[0]
		if !it.current(t) {
			heap.Pop(&t.due)
			continue
		}
		if it.at.After(now) {
			return it.at.Sub(now)
		}
		heap.Pop(&t.due)
		if b := it.b; b != nil {
			// Expire what the bucket still times; retry for those until
			// the state shows them gone (Remove) or renewed (they leave).
			kept := b.ids[:0]
			for _, id := range b.ids {
				if st, ok := t.sessions[id]; ok && st.bucket == b {
					t.act.Expire(id, st.keepAlive, t.mark)
					kept = append(kept, id)
				}
			}
			clear(b.ids[len(kept):])
			b.ids = kept
			if len(kept) > 0 {
				heap.Push(&t.due, item{at: now.Add(t.retry), b: b})
			}
			continue
		}
		switch e := it.e; e.kind {
		case kindDelay:
			t.act.Undelay(e.delay.Name, e.delay.Token, t.mark)
		case kindHold:
			t.act.ExpireGrant(e.hold.Name, e.hold.Election, e.hold.Token, t.mark)
		}
		heap.Push(&t.due, item{at: now.Add(t.retry), e: it.e, gen: it.gen})
	}
	return time.Hour
}

// Len returns the number of sessions tracked.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sessions)
}

// Pending returns the number of lock-delays and maximum holds tracked.
func (t *Tracker) Pending() (delays, holds int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.delays), len(t.holds)
}

// item is one deadline in the heap: a bucket's, or an entry's of
// generation gen.
type item struct {
	at  time.Time
	b   *bucket
	e   *entry
	gen uint64
}

func (it item) current(t *Tracker) bool {
	if it.b != nil {
		return it.b.live > 0
	}
	if it.e.gen != it.gen {
		return false
	}
	if it.e.kind == kindDelay {
		return t.delays[it.e.delay.Name] == it.e
	}
	return t.holds[it.e.hold.Token] == it.e
}

type deadlines []item

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].at.Before(d[j].at) }
func (d deadlines) Swap(i, j int)      { d[i], d[j] = d[j], d[i] }
func (d *deadlines) Push(x any)        { *d = append(*d, x.(item)) }
func (d *deadlines) Pop() any {
	old := *d
	it := old[len(old)-1]
	old[len(old)-1] = item{}
	*d = old[:len(old)-1]
	return it
}
