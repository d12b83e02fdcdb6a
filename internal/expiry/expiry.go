// Package expiry holds the leader-side session timers.
//
// Every replica records, in its own memory, the monotonic time at which it
// applied each session's latest keep-alive. Only the raft leader acts on it:
// when a session's TTL has passed since that moment, it proposes
// Expire(session, keep-alive index), which the state machine applies only if
// no newer keep-alive arrived. On promotion every timer restarts at "now", so
// each session gets a full TTL after a leader change: its holder could not
// renew during the election. A deposed leader's late Expire is harmless, as it
// names the keep-alive it judged.
package expiry

import (
	"container/heap"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
)

// Session is what the tracker needs to know of one session.
type Session struct {
	ID, KeepAlive uint64
	TTL           time.Duration
}

// Tracker decides when the leader proposes an expiry.
type Tracker struct {
	clock  clock.Clock
	expire func(id, keepAlive uint64) // proposes asynchronously
	retry  time.Duration

	mu       sync.Mutex
	sessions map[uint64]*entry
	due      deadlines // only while leader
	leader   bool
	kick     chan struct{}
}

type entry struct {
	Session
	deadline time.Time
	gen      uint64 // bumped on every change, so stale heap items are skipped
}

// New returns a tracker that calls expire, which must not block, when a
// session's time is up on the leader; it calls it again every retry while
// the session stays.
func New(c clock.Clock, retry time.Duration, expire func(id, keepAlive uint64)) *Tracker {
	return &Tracker{clock: c, retry: retry, expire: expire,
		sessions: make(map[uint64]*entry), kick: make(chan struct{}, 1)}
}

// Touch records that this replica applied keep-alive index ka of session id.
func (t *Tracker) Touch(id, ka uint64, ttl time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.sessions[id]
	if e == nil {
		e = &entry{}
		t.sessions[id] = e
	}
	e.Session = Session{ID: id, KeepAlive: ka, TTL: ttl}
	e.deadline = t.clock.Now().Add(ttl)
	e.gen++
	if t.leader {
		t.push(e.deadline, e)
	}
}

// Remove forgets an ended session.
func (t *Tracker) Remove(id uint64) {
	t.mu.Lock()
	delete(t.sessions, id)
	t.mu.Unlock()
}

// Reset replaces everything known, after the state was restored from a
// snapshot; every session starts a full TTL now.
func (t *Tracker) Reset(sessions []Session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sessions = make(map[uint64]*entry, len(sessions))
	for _, s := range sessions {
		t.sessions[s.ID] = &entry{Session: s}
	}
	t.restartAll()
}

// SetLeader tells the tracker whether this replica leads. A promotion
// restarts every timer at now.
func (t *Tracker) SetLeader(leader bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if leader == t.leader {
		return
	}
	t.leader = leader
	t.restartAll()
}

func (t *Tracker) restartAll() {
	now := t.clock.Now()
	t.due = t.due[:0]
	for _, e := range t.sessions {
		e.deadline = now.Add(e.TTL)
		e.gen++
		if t.leader {
			t.due = append(t.due, item{at: e.deadline, e: e, gen: e.gen})
		}
	}
	heap.Init(&t.due)
	t.wake()
}

func (t *Tracker) push(at time.Time, e *entry) {
	if len(t.due) > 4*len(t.sessions)+64 { // drop the stale items of renewed sessions
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
	heap.Push(&t.due, item{at: at, e: e, gen: e.gen})
	if t.due[0].e == e {
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

// fire proposes the expiries that are due and returns how long to sleep.
func (t *Tracker) fire() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.leader {
		return time.Hour
	}
	now := t.clock.Now()
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
		t.expire(it.e.ID, it.e.KeepAlive)
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

type item struct {
	at  time.Time
	e   *entry
	gen uint64
}

func (it item) current(t *Tracker) bool { return t.sessions[it.e.ID] == it.e && it.e.gen == it.gen }

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
