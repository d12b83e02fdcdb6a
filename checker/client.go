package checker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// client is one application process: it keeps a session on its replica and
// loops over acquire (or try-acquire) -> fenced writes -> release, or, as an
// election client, over campaign -> fenced writes and proclamations ->
// resign (elect.go).
type client struct {
	id    int
	e     *env
	rng   *rand.Rand
	home  uint64 // the replica it prefers
	slow  bool   // holds slowLock for two TTLs each time
	delay bool   // a slow client whose session has a lock-delay (lockDelay)
	// external: its session is renewed only by its own KeepAlive calls
	// (WithExternalKeepAlive), made by keep, as a remote client's
	// heartbeats would; it takes no pauses (ClientFreeze), since its
	// keeper would go on calling.
	external bool
	keep     *keeper
	where    atomic.Uint64 // node, for the nemesis to read
	// pinned: a fault cuts its replica off and waits for the group to
	// expire its session; it restarts nowhere else meanwhile (a resume on
	// a replica that reaches the group would keep the session alive).
	// restartMu is held across a restart and by pin, so that a fault never
	// pins a client whose restart is under way and then cuts off the
	// replica it is leaving (resume.go).
	restartMu sync.Mutex
	pinned    bool
	elect     bool // campaigns in elections instead of taking locks
	role      role // a recipe client's (recipe.go); roleNone otherwise
	n         int  // election clients: the number of its last value (nextValue)
	sess      *fencelock.Session
	node      uint64  // the replica sess lives on
	held      *belief // the lock it believes it holds, or the term it believes it leads

	mu    sync.Mutex
	pause *pauseRequest // from the nemesis, taken at the next write
}

type pauseRequest struct {
	d    time.Duration
	done chan struct{} // closed once the pause began
}

// belief is a client's view that it holds a lock or leads an election. The
// checker requires it to be gone (released, or Done closed) whenever the
// lock (election) is granted to someone else: the holder stops first.
type belief struct {
	c         *client
	session   uint64
	name      string // the lock's name, or the election's key
	token     uint64
	done      <-chan struct{}
	lock      *fencelock.Lock       // for a lock
	lead      *fencelock.Leadership // for an election
	node      uint64                // the replica its session lives on
	at        time.Time             // when it was granted
	paused    bool                  // its process is paused: it believes nothing meanwhile
	releasing bool
	revoked   bool // an operator is revoking it, ending its session, or did: it may learn late
	shared    bool // a shared grant: AcquireShared's, or a semaphore's permit
	permits   int  // a semaphore's permit count; 0 for a lock
}

// beliefs are every client's beliefs, by lock name or election key.
type beliefs struct {
	mu sync.Mutex
	m  map[string]map[int]*belief
	// revoking selects the beliefs an operator's revocation in flight may
	// hit (operator.go): a belief granted meanwhile is marked too.
	revoking []*func(*belief) bool
	// gone are the grants whose holder dropped its belief after finding
	// Done closed, by lock name and token: lost to it (check.go, lost),
	// whether or not its session lives on.
	gone map[grantRef]bool
}

type grantRef struct {
	name  string
	token uint64
}

// granted records c's new grant (b's name, token, done and lock or lead
// set), after checking that every other holder of the lock (leader of the
// election) has stopped.
func (e *env) granted(c *client, b *belief) *belief {
	e.beliefs.mu.Lock()
	defer e.beliefs.mu.Unlock()
	name := b.name
	holding := 0 // other semaphore holders that have not stopped
	for id, o := range e.beliefs.m[name] {
		// Only an earlier grant (a lower token) must have stopped. A call
		// can return a grant the group already ended and passed on (its
		// replica applied the grant, not yet its end): that grant is the
		// stale one, and its own Done closes once the end is applied. A
		// holder an operator's revocation (or session end) ended may learn
		// of it after the next grant: exempt are only the grants the
		// group's log shows an operator ended, never a successor a
		// revocation in flight saw granted.
		if id == c.id || o.paused || o.releasing || o.token > b.token ||
			o.revoked && e.applied.endedByOperator(name, o.token) {
			continue
		}
		select {
		case <-o.done:
			continue
		default:
		}
		switch {
		case b.permits > 0:
			holding++
		case !b.shared || !o.shared:
			e.h.violation("holder does not stop first: client %d granted %q token %d (shared=%v) while client %d still holds token %d (shared=%v)",
				c.id, name, b.token, b.shared, id, o.token, o.shared)
			e.h.suspectGrants(name, o.token, b.token)
		}
	}
	if b.permits > 0 && holding >= b.permits {
		e.h.violation("holders do not stop first: client %d granted a permit of %q (%d permits) token %d while %d others still hold",
			c.id, name, b.permits, b.token, holding)
	}
	if e.beliefs.m[name] == nil {
		e.beliefs.m[name] = map[int]*belief{}
	}
	b.c, b.session, b.node, b.at = c, c.sessionID(), c.node, time.Now()
	for _, match := range e.beliefs.revoking {
		if (*match)(b) {
			b.revoked = true
		}
	}
	// A grant whose replica lagged can reach its caller after an
	// operator's revocation of it applied and returned, its mark gone:
	// the log says so.
	if e.applied.endedByOperator(name, b.token) {
		b.revoked = true
	}
	e.beliefs.m[name][c.id] = b
	return b
}

// sessionID returns the ID of c's session, 0 if it has none.
func (c *client) sessionID() uint64 {
	if c.sess == nil {
		return 0
	}
	return c.sess.ID()
}

func (e *env) update(b *belief, f func(*belief)) {
	e.beliefs.mu.Lock()
	defer e.beliefs.mu.Unlock()
	f(b)
}

func (e *env) drop(b *belief) {
	e.beliefs.mu.Lock()
	defer e.beliefs.mu.Unlock()
	if e.beliefs.m[b.name][b.c.id] == b {
		delete(e.beliefs.m[b.name], b.c.id)
	}
	if closed(b.done) {
		if e.beliefs.gone == nil {
			e.beliefs.gone = map[grantRef]bool{}
		}
		e.beliefs.gone[grantRef{b.name, b.token}] = true
	}
}

func (c *client) run(ctx context.Context) {
	if c.elect {
		c.campaignLoop(ctx)
		return
	}
	if c.role != roleNone {
		c.recipeLoop(ctx)
		return
	}
	defer c.setKeeper(nil)
	for ctx.Err() == nil {
		if !c.ensureSession(ctx) {
			continue
		}
		name := slowLock
		if !c.slow {
			name = lockNames[c.rng.IntN(len(lockNames))]
		}
		kind := OpAcquire
		// One slow client's session has a lock-delay: a TryAcquire of
		// their lock while delayed is refused with nobody holding it,
		// which no history of grants and releases explains.
		if c.rng.IntN(4) == 0 && !c.slow {
			kind = OpTryAcquire
		}
		i := c.e.h.begin(Op{Client: c.id, Node: c.node, Kind: kind, Lock: name, Session: c.sess.ID()})
		timeout := c.e.opTimeout
		if c.slow { // the other slow client may hold the lock for 2 TTLs
			timeout = 4 * c.e.ttl
		}
		actx, cancel := context.WithTimeout(c.e.h.track(ctx, i), timeout)
		var l *fencelock.Lock
		var err error
		if kind == OpTryAcquire {
			l, err = c.sess.TryAcquire(actx, name)
		} else {
			l, err = c.sess.Acquire(actx, name)
		}
		cancel()
		switch {
		case err == nil:
			c.e.h.end(i, Granted, l.Token())
		case errors.Is(err, fencelock.ErrLocked):
			c.e.h.end(i, Locked, 0)
			c.sleep(ctx, time.Duration(1+c.rng.IntN(10))*time.Millisecond)
			continue
		default:
			c.e.h.end(i, Unknown, 0)
			// A call the group may still apply stays open in the history
			// for good. Told that its group has no quorum (which a replica
			// says early, without waiting for the deadline), a client backs
			// off as an application would, rather than fill the history
			// with such calls and the model's search with their orders.
			pause := 20 * time.Millisecond
			if errors.Is(err, fencelock.ErrNoQuorum) {
				pause = c.e.opTimeout
			}
			c.sleep(ctx, pause)
			continue
		}
		c.held = c.e.granted(c, &belief{name: name, token: l.Token(), done: l.Done(), lock: l})
		if c.keep != nil {
			c.keep.watch(l)
		}
		if c.critical(ctx) {
			c.release(ctx)
		}
	}
}

// critical writes to the lock's register through the Fencer a few times,
// checking Done before each write as an application should. It reports
// whether the client should release the lock now.
func (c *client) critical(ctx context.Context) bool {
	b := c.held
	// Slow clients hold their lock for two TTLs, so that faults catch
	// holders in the middle of a critical section.
	writes, gap := 3, 2*time.Millisecond
	if c.slow {
		writes, gap = 40, c.e.ttl/20
	}
	return c.steps(ctx, writes, gap, func() bool { return c.write(b) })
}

// steps runs n steps of a grant's holder (critical, term), gap apart: each
// one first takes a pending pause (then the holder gives the grant up), stops
// on ctx (keeping the grant, for the final check), may restart the client's
// replica, and ends once the grant is lost; step reports false when the
// holder should give the grant up. steps reports whether it should.
func (c *client) steps(ctx context.Context, n int, gap time.Duration, step func() bool) bool {
	b := c.held
	for range n {
		if c.external { // takes no pause: requestPause gives up on it
		} else if p := c.takePause(); p != nil {
			c.paused(ctx, p)
			return true
		}
		if ctx.Err() != nil {
			return false // stopping: keep the grant, for the final check
		}
		if c.rng.IntN(restartOdds) == 0 && !c.restartUnlessPinned(ctx) {
			return false
		}
		select {
		case <-b.done:
			c.e.drop(b)
			c.held = nil
			return false
		default:
		}
		if !step() {
			return true
		}
		c.sleep(ctx, gap) // the work between steps
	}
	return true
}

// write makes one fenced write; false if the resource refused the token.
// A reader's or a permit's step is not a write (recipe.go).
func (c *client) write(b *belief) bool {
	if c.role == roleReader || c.role == rolePermit {
		return c.step(b)
	}
	err := c.e.fencer.Do(b.name, b.token, func() error {
		c.e.h.write(b.name, c.id, b.token)
		return nil
	})
	if err != nil {
		c.e.h.refusedWrite()
		return false
	}
	return true
}

// takePause returns the pause a fault asked c for, if any, and clears it.
func (c *client) takePause() *pauseRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pause
	c.pause = nil
	return p
}

// requestPause asks c to pause at its next write; it reports false if c
// did not take the request within d.
func (c *client) requestPause(ctx context.Context, p *pauseRequest, d time.Duration) bool {
	c.mu.Lock()
	c.pause = p
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	untaken := c.pause == p
	if untaken {
		c.pause = nil
	}
	c.mu.Unlock()
	if untaken {
		return false
	}
	<-p.done // taken meanwhile: it is pausing
	return true
}

// paused simulates a stop-the-world pause of the client's process in the
// middle of its critical section, longer than its TTL; on waking it writes
// without looking at Done, as a process paused between its check and its
// write would, and its caller releases next. The Fencer must refuse that
// write if anyone wrote after it.
func (c *client) paused(ctx context.Context, p *pauseRequest) {
	b := c.held
	c.e.update(b, func(b *belief) { b.paused = true })
	testhook.Pause(c.sess)
	close(p.done)
	t := time.NewTimer(p.d) // the pause itself
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	t.Stop()
	testhook.Resume(c.sess)
	// Awake, it writes and then releases without looking at Done: its
	// belief stays exempt from "the holder stops first" until the release
	// marks it, since its part learns of the deadline that passed in the
	// pause only when the part's own goroutines run (the thaw runs the
	// deadline check in the background, as a woken process's timers fire),
	// and a grant returned meanwhile to another client is not the library's
	// fault. The fencer judges the write.
	c.write(b)
	c.e.update(b, func(b *belief) { b.paused, b.releasing = false, true })
}

// release releases the lock, or resigns the leadership, c holds.
func (c *client) release(ctx context.Context) {
	b := c.held
	c.held = nil
	c.e.update(b, func(b *belief) { b.releasing = true })
	kind := OpRelease
	if b.lead != nil {
		kind = OpResign
	}
	i := c.e.h.begin(Op{Client: c.id, Node: c.node, Kind: kind, Lock: b.name, Session: c.sess.ID(), Token: b.token})
	rctx, cancel := context.WithTimeout(c.e.h.track(context.WithoutCancel(ctx), i), c.e.opTimeout)
	var err error
	if b.lead != nil {
		err = b.lead.Resign(rctx)
	} else {
		err = b.lock.Release(rctx)
	}
	cancel()
	switch {
	case err == nil:
		c.e.h.end(i, OK, 0)
	case errors.Is(err, fencelock.ErrNotHeld), errors.Is(err, fencelock.ErrNotLeader):
		c.e.h.end(i, NotHeld, 0)
	default:
		c.e.h.end(i, Unknown, 0)
	}
	c.e.drop(b)
}

// ensureSession opens a session when the client has none that works.
func (c *client) ensureSession(ctx context.Context) bool {
	if c.sess != nil && c.sess.Err() == nil {
		return true
	}
	node, id := c.e.pickNode(c.home)
	if node == nil {
		c.sleep(ctx, 50*time.Millisecond)
		return false
	}
	sctx, cancel := context.WithTimeout(ctx, c.e.opTimeout)
	s, err := node.NewSession(sctx, append(c.sessionOptions(), fencelock.WithTTL(c.e.ttl))...)
	cancel()
	if err != nil {
		c.sleep(ctx, 50*time.Millisecond)
		return false
	}
	c.sess, c.node = s, id
	c.where.Store(id)
	c.e.addSession(s, id)
	if c.delay {
		c.e.delays(s.ID())
	}
	if c.external {
		c.setKeeper(startKeeper(c.e, s, id))
	}
	return true
}

func (c *client) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
