package session

import (
	"context"

	"sync"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/seeded"
)

// router is one group's side of the Host: the group's replica reports what
// it applies here (replica.Sink, on its apply goroutine), and the router
// hands each event to the part it concerns, if that part lives in this
// process, and to the watches of the names it touches.
type router struct {
	h           *Host
	group       string
	ctx         context.Context // the Host's, cancelled too once the group is dropped here
	cancel      context.CancelFunc
	renew       *renewer     // keeps the group's parts alive, in batches
	watches     *watches     // Observe calls by election
	lockWatches *lockWatches // Watch calls by lock (and queue positions)
	contention  contention   // this process's lock calls in the group

	// route is how the group's parts' background commands reach it: the
	// group's replica of the moment (a shard, or a mirror where this
	// replica does not run the group), looked up at each call, so that a
	// group moving on or off this replica keeps its parts alive. One value
	// for every part, so the renewer batches them.
	route Route

	mu    sync.RWMutex
	parts map[uint64]*Part // the parts that live on this replica, by ID
	ran   bool             // the renewer was started
}

var _ replica.Sink = (*router)(nil)

func newRouter(h *Host, group string) *router {
	rt := &router{h: h, group: group, watches: newWatches(), lockWatches: newLockWatches(),
		parts: make(map[uint64]*Part)}
	rt.ctx, rt.cancel = context.WithCancel(h.ctx)
	rt.renew = newRenewer(rt)
	rt.route = RouteFunc(func(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
		r, err := rt.replica(context.Background())
		if err != nil {
			return fsm.Result{}, err
		}
		return r.Propose(ctx, cmd)
	})
	return rt
}

// replica returns the group's replica.
//
// Once the Host is closing it fails with Close's error: a Node's Close
// ends its sessions here without ending them at the group (as a crash
// would, so that a restarted process can resume them), and a call made
// after that, such as the Resign of a leader loop whose term just ended
// here, must not reach the group through the replica, which stops only
// after the sessions do.
func (rt *router) replica(ctx context.Context) (Group, error) {
	select {
	case <-rt.h.closed: // closed after closeErr is set, before any session ends
		return nil, rt.h.closeErr
	default:
	}
	return rt.h.Group(ctx, rt.group)
}

// goBackground runs f in the background unless the Host is closing; the
// group's replica's Close waits for it.
func (rt *router) goBackground(f func()) bool { return rt.h.Go(rt.group, f) }

// newPart makes the holder's side of s's session id in this group, opened
// with nonce.
func (rt *router) newPart(s *Session, id, nonce uint64) *Part {
	route := rt.route
	if s.o.Route != nil {
		route = s.o.Route(route)
	}
	return &Part{
		s: s, rt: rt, id: id, nonce: nonce, ttl: s.o.TTL, margin: s.o.Margin, clock: rt.h.cfg.Clock,
		route:   route,
		done:    make(chan struct{}),
		nextSeq: 1,
		pending: make(map[uint64]struct{}),
		waiters: make(map[uint64]*waiter),
		grants:  make(map[uint64]*Grant),
		lease:   lease{life: s.o.TTL - seeded.Margin(s.o.Margin)},
	}
}

// start makes p live on this replica: its events reach it, its deadline
// timer runs and its keep-alives start a period after sent. With
// registered, p is in rt.parts already (a resume registers first).
func (rt *router) start(p *Part, sent clock.Instant, registered bool) error {
	rt.h.mu.RLock()
	closing := rt.h.closing
	rt.h.mu.RUnlock()
	if closing {
		return replica.ErrClosed
	}
	rt.mu.Lock()
	if !registered {
		rt.parts[p.id] = p
	}
	run := !rt.ran
	rt.ran = true
	rt.mu.Unlock()
	if run && !rt.goBackground(rt.renew.run) {
		return replica.ErrClosed
	}
	p.mu.Lock()
	p.timer = p.clock.AfterFunc(p.lease.deadline.Sub(clock.Boot(p.clock)), p.checkDeadline)
	p.mu.Unlock()
	if !p.s.o.External { // else KeepAlive renews it
		rt.renew.add(p, sent)
	}
	return nil
}

// localParts returns the parts that live on this replica.
func (rt *router) localParts() []*Part {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	local := make([]*Part, 0, len(rt.parts))
	for _, p := range rt.parts {
		local = append(local, p)
	}
	return local
}

// local returns the part with this ID if it lives on this replica.
func (rt *router) local(id uint64) *Part {
	rt.mu.RLock()
	defer rt.mu.RUnlock()
	return rt.parts[id]
}

// forget drops p once the group is done with it.
func (rt *router) forget(p *Part) {
	rt.renew.remove(p)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.parts[p.id] == p {
		delete(rt.parts, p.id)
	}
}

// Applied routes each event to the part it concerns, if that part lives
// here: this is how exactly the granted waiter, and nobody else, wakes.
func (rt *router) Applied(index uint64, events []fsm.Event) {
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case fsm.EventTouched, fsm.EventRenewed, fsm.EventLeaderStarted:
			continue
		case fsm.EventQueued, fsm.EventUnqueued:
			rt.lockWatches.touch(queueKey(e.Name, e.Election))
			continue
		case fsm.EventGranted, fsm.EventFreed:
			rt.lockWatches.touch(e.Name)
		case fsm.EventElected, fsm.EventDeposed, fsm.EventProclaimed:
			rt.watches.applied(index, e)
		case fsm.EventSessionEnded:
			if e.Reason == fsm.ReasonExpired && rt.local(e.Session) != nil {
				rt.h.log.Warn("fencelock: the group expired a session of this replica", "session", e.Session, "group", rt.group)
			}
		}
		if p := rt.local(e.Session); p != nil {
			p.deliver(e)
		}
	}
	rt.watches.notify()
}

// Restored brings every local part and observer in line with a state
// restored from a snapshot.
func (rt *router) Restored(st *fsm.State) {
	for _, p := range rt.localParts() {
		p.reconcile(st)
	}
	rt.watches.restored(st)
	rt.lockWatches.touchAll()
}

// Idle reports whether nothing of this process uses the group now: no
// part lives here and nobody observes or watches in it (replica.Idler: a
// mirror of the group may then stop until the group is used again).
func (rt *router) Idle() bool {
	rt.mu.RLock()
	parts := len(rt.parts)
	rt.mu.RUnlock()
	rt.watches.mu.Lock()
	watches := len(rt.watches.m)
	rt.watches.mu.Unlock()
	rt.lockWatches.mu.Lock()
	lockWatches := len(rt.lockWatches.m)
	rt.lockWatches.mu.Unlock()
	return parts == 0 && watches == 0 && lockWatches == 0
}

// Removed ends everything local once the group removed this replica.
func (rt *router) Removed() {
	for _, p := range rt.localParts() {
		p.end(replica.ErrRemoved)
		rt.forget(p)
	}
}

// Dropped ends everything local once the group stopped running here for
// good (the group table dropped it, or moved it off this replica): the
// parts with err, and the router's background work; a group created again
// under the name gets a router of its own. The replica of the group waits
// for that work before it stops.
func (rt *router) Dropped(err error) {
	rt.cancel()
	for _, p := range rt.localParts() {
		p.end(err)
		rt.forget(p)
	}
	rt.h.mu.Lock()
	if rt.h.routers[rt.group] == rt {
		delete(rt.h.routers, rt.group)
	}
	rt.h.mu.Unlock()
}

// deliver applies one event to the local part it concerns (at the end of a
// test's pause, if one is on).
func (p *Part) deliver(e *fsm.Event) {
	ev := *e
	var since clock.Instant
	if e.MaxHold != 0 {
		since = p.heldSince() // now, on the apply goroutine, not after a pause
	}
	p.later(func() { p.applyEvent(&ev, since) })
}

func (p *Part) applyEvent(e *fsm.Event, since clock.Instant) {
	if p.resuming(e) {
		return
	}
	switch e.Kind {
	case fsm.EventGranted:
		p.granted(e.Seq, e.Name, lockMode(e), e.Token, "", since)
	case fsm.EventFreed:
		p.grantEnded(e.Token, reasonErr(e.Reason))
	case fsm.EventSessionEnded:
		p.endedAs.CompareAndSwap(endedHere, endedThere)
		p.end(reasonErr(e.Reason))
		p.rt.forget(p)
	case fsm.EventElected:
		p.granted(e.Seq, e.Name, electionMode, e.Token, e.Value, since)
	case fsm.EventDeposed:
		p.grantEnded(e.Token, depositionErr(e.Reason))
	case fsm.EventProclaimed:
		p.proclaimed(e.Token, e.Value)
	case fsm.EventKept:
		p.kept(e)
	case fsm.EventKeptQueued:
		p.keptQueued(e)
	case fsm.EventDropped:
		p.dropped(e.Seq)
	}
}

// reconcile brings p in line with a state restored from a snapshot: the
// entries it covered were never applied here, so their grants, frees and
// proclamations were never reported.
func (p *Part) reconcile(st *fsm.State) {
	// A part waiting for its resume is checked first: a replica that lags
	// (restarted, catching up) may restore a snapshot from before the
	// session was even opened, and a part expired for that would miss the
	// grants its resume keeps a moment later (it applies after the
	// snapshot), leaving a Session without a lock its group holds for it.
	// Whether the session lives is its resume's reply to say.
	if p.resume.Load() != 0 {
		p.reconcileResume(st)
		return
	}
	if _, ok := st.Session(p.id); !ok {
		p.later(p.expired)
		return
	}
	p.mu.Lock()
	seqs := make([]uint64, 0, len(p.waiters))
	for seq, w := range p.waiters {
		if w.grant == nil {
			seqs = append(seqs, seq)
		}
	}
	held := make([]*Grant, 0, len(p.grants))
	for _, g := range p.grants {
		held = append(held, g)
	}
	p.mu.Unlock()
	// st is only valid during this call: decide now, act (maybe) later.
	// The grants it reports were applied after everything this replica
	// applied before: heldSince bounds when.
	since := p.heldSince()
	var actions []func()
	for _, seq := range seqs {
		if name, token, ok := st.Grant(p.id, seq); ok {
			l := st.Lock(name)
			mode := grantMode{shared: l.Shared, permits: int(l.Permits)}
			actions = append(actions, func() { p.granted(seq, name, mode, token, "", since) })
		} else if e, ok := st.Leading(p.id, seq); ok {
			actions = append(actions, func() { p.granted(seq, e.Name, electionMode, e.Token, e.Value, since) })
		} else if st.Sealed() {
			// The seal that withdrew it was in the entries the snapshot
			// covered: nothing will grant it.
			actions = append(actions, func() { p.dropped(seq) })
		}
	}
	for _, g := range held {
		if !g.election {
			if !st.Holds(p.id, g.name, g.token) {
				actions = append(actions, func() { p.grantEnded(g.token, ErrNotHeld) })
			}
			continue
		}
		e := st.Election(g.name)
		if !e.Led || e.Token != g.token || e.Session != p.id {
			actions = append(actions, func() { p.grantEnded(g.token, ErrNotLeader) })
		} else {
			actions = append(actions, func() { p.proclaimed(g.token, e.Value) })
		}
	}
	p.later(func() {
		for _, f := range actions {
			f()
		}
	})
}
