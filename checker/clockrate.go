package checker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/testhook"
)

// SkewedHolderIsolated is HolderIsolated under clocks whose rates differ
// (Scenario.Rates): the default group's leadership moves to the replica
// whose clock runs fastest, a client on a replica whose clock runs slower
// is granted the slow lock, and that replica is cut off in the middle of
// its critical section. The leader times the session's TTL on
// its fast clock and the holder its deadline on its slow one, so the
// holder's deadline lands later, by real time, than its rate alone would
// put it. While the rates differ by less than margin/TTL the holder still
// stops first (check 2); beyond that, or with the margin dropped (lease =
// last send + TTL), the group grants the lock to the other slow client
// while the holder's Done is still open, and check 2 says so.
var SkewedHolderIsolated = Fault{"skewed-holder-isolated", func(ctx context.Context, e *env) error {
	fast := e.c.fastest()
	slow := func(id uint64) bool { return e.c.rate(id) < e.c.rate(fast) }
	if !slices.ContainsFunc(e.c.IDs(), slow) {
		return errors.New("the scenario gives its replicas no clock rates (Scenario.Rates)")
	}
	// The leader times the holder's session from the keep-alive it
	// applied, and a new leader restarts that timer in full: the default
	// group's leadership moves to the fast replica first, and the grant
	// must come under it. The leaders balancer would move it on if the fast
	// replica led another group while a replica led none, so every replica
	// leads one group (the named groups go to the others, in order): once
	// the holder's replica is cut off, the group it led goes to one of the
	// others, and neither has a peer below its share to hand a group to.
	leads := map[string]uint64{"": fast}
	rest := []uint64{}
	for _, id := range e.c.IDs() {
		if id != fast {
			rest = append(rest, id)
		}
	}
	for i, g := range e.c.groupNames()[1:] {
		if vs := e.c.voters(g); i < len(rest) && slices.Contains(vs, rest[i]) {
			leads[g] = rest[i]
		}
	}
	arranged := func() bool {
		for g, id := range leads {
			if n := e.c.Node(id); n == nil || groupLeader(n, g) != id {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(skewBound)
	for time.Now().Before(deadline) {
		for g, id := range leads {
			var others []uint64
			for _, o := range e.c.IDs() {
				if o != id {
					others = append(others, o)
				}
			}
			if err := leadersAway(ctx, e, []string{g}, others); err != nil {
				return err
			}
		}
		since := time.Now()
		for time.Since(since) < 4*e.ttl {
			if !arranged() {
				break // a leadership moved on: move it back
			}
			if b := e.recentHolder(slowLock, slow, since, e.ttl/5); b != nil && e.waitsElsewhere(b) {
				// Pinned, it restarts nowhere else; a restart under way
				// when it was found has moved it by now, and then the
				// replica to cut is no longer its own: look again.
				unpin := b.c.pin()
				if b = e.stillHolds(b); b == nil || !slow(b.node) || !e.waitsElsewhere(b) {
					unpin()
					if err := wait(ctx, 5*time.Millisecond); err != nil {
						return err
					}
					continue
				}
				defer unpin()
				cut := b.node
				// Cut it off just after a keep-alive of its session was
				// acknowledged, so that none is in flight: one the leader
				// applied but the holder never heard back about would
				// start the leader's timer later than the holder's.
				e.mu.Lock()
				s := e.sessions[b.session]
				e.mu.Unlock()
				if s != nil {
					acked := testhook.LastKeepAlive(s)
					for end := time.Now().Add(e.ttl / 2); !testhook.LastKeepAlive(s).After(acked) && time.Now().Before(end); {
						if err := wait(ctx, time.Millisecond); err != nil {
							return err
						}
					}
				}
				e.h.logf("skewed-holder-isolated: holder on replica %d (clock rate %v) cut off, leader on %d (rate %v)",
					cut, e.c.rate(cut), fast, e.c.rate(fast))
				e.c.Net.Isolate(e.c.Addr(cut))
				return partitioned(ctx, e, []uint64{cut})
			}
			if err := wait(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
	}
	e.h.logf("skewed-holder-isolated: no client on a slow replica was granted %q under a leader on %d within %v", slowLock, fast, skewBound)
	return nil
}}

// recentHolder returns a client's belief that it holds lock (election
// key) key on a replica on selects, granted after since and at most recent
// ago, neither paused nor releasing; nil if there is none.
func (e *env) recentHolder(key string, on func(uint64) bool, since time.Time, recent time.Duration) *belief {
	e.beliefs.mu.Lock()
	defer e.beliefs.mu.Unlock()
	for _, b := range e.beliefs.m[key] {
		if on(b.node) && !b.releasing && !b.paused && b.at.After(since) && time.Since(b.at) < recent {
			c := *b
			return &c
		}
	}
	return nil
}

// stillHolds returns a copy of b's client's belief if it is still b's
// grant, held and not given up; nil if not.
func (e *env) stillHolds(b *belief) *belief {
	e.beliefs.mu.Lock()
	defer e.beliefs.mu.Unlock()
	cur := e.beliefs.m[b.name][b.c.id]
	if cur == nil || cur.token != b.token || cur.releasing || cur.paused || closed(cur.done) {
		return nil
	}
	c := *cur
	return &c
}

// skewBound bounds how long SkewedHolderIsolated waits for its holder: the
// slow lock is granted every two TTLs, and only a grant to the slow client
// without a lock-delay, on a slow replica, with the other slow client on
// another (each restart moves them), serves: about one in four.
const skewBound = 60 * time.Second

// waitsElsewhere reports whether b's holder is the slow client without a
// lock-delay (a delay would hold the next grant back past any holder's
// deadline) and the other slow client, which waits for the lock, lives on
// another replica than b's (one cut off with it could not be granted).
func (e *env) waitsElsewhere(b *belief) bool {
	if b.c.delay {
		return false
	}
	for _, o := range e.clients {
		if o.slow && o != b.c && o.where.Load() == b.node {
			return false
		}
	}
	return true
}

// fastest returns the replica whose clock runs fastest; the lowest ID
// among equals.
func (c *Cluster) fastest() uint64 {
	ids := c.IDs()
	best := ids[0]
	for _, id := range ids {
		if c.rate(id) > c.rate(best) {
			best = id
		}
	}
	return best
}
