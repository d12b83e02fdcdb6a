package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// sink is the replica's view of its Node (replica.Sink): what the replica
// applies reaches the sessions and observers of this process through it, on
// the apply goroutine.
type sink struct{ n *Node }

// Applied routes each event to the session it concerns, if that session
// lives here: this is how exactly the granted waiter, and nobody else,
// wakes.
func (k sink) Applied(index uint64, events []fsm.Event) {
	n := k.n
	for i := range events {
		e := &events[i]
		switch e.Kind {
		case fsm.EventTouched, fsm.EventRenewed, fsm.EventLeaderStarted:
			continue
		case fsm.EventQueued, fsm.EventUnqueued:
			n.lockWatches.touch(queueKey(e.Name, e.Election))
			continue
		case fsm.EventGranted, fsm.EventFreed:
			n.lockWatches.touch(e.Name)
		case fsm.EventElected, fsm.EventDeposed, fsm.EventProclaimed:
			n.watches.applied(index, e)
		case fsm.EventSessionEnded:
			if e.Reason == fsm.ReasonExpired && n.local(e.Session) != nil {
				n.log.Warn("fencelock: the group expired a session of this replica", "session", e.Session)
			}
		}
		if s := n.local(e.Session); s != nil {
			s.deliver(e)
		}
	}
	n.watches.notify()
}

// Restored brings every local session and observer in line with a state
// restored from a snapshot.
func (k sink) Restored(st *fsm.State) {
	for _, s := range k.n.localSessions() {
		s.reconcile(st)
	}
	k.n.watches.restored(st)
	k.n.lockWatches.touchAll()
}

// Removed ends everything local once the group removed this replica.
func (k sink) Removed() {
	for _, s := range k.n.localSessions() {
		s.end(ErrRemoved)
		k.n.forget(s)
	}
}

// deliver applies one event to the local session it concerns (at the end of
// a testhook.Pause, if one is on).
func (s *Session) deliver(e *fsm.Event) {
	ev := *e
	var since clock.Instant
	if e.MaxHold != 0 {
		since = s.heldSince() // now, on the apply goroutine, not after a pause
	}
	s.later(func() { s.applyEvent(&ev, since) })
}

func (s *Session) applyEvent(e *fsm.Event, since clock.Instant) {
	if s.resuming(e) {
		return
	}
	switch e.Kind {
	case fsm.EventGranted:
		s.granted(e.Seq, e.Name, lockMode(e), e.Token, "", since)
	case fsm.EventFreed:
		s.grantEnded(e.Token, reasonErr(e.Reason))
	case fsm.EventSessionEnded:
		s.end(reasonErr(e.Reason))
		s.n.forget(s)
	case fsm.EventElected:
		s.granted(e.Seq, e.Name, electionMode, e.Token, e.Value, since)
	case fsm.EventDeposed:
		s.grantEnded(e.Token, depositionErr(e.Reason))
	case fsm.EventProclaimed:
		s.proclaimed(e.Token, e.Value)
	case fsm.EventKept:
		s.kept(e)
	}
}

// reconcile brings s in line with a state restored from a snapshot: the
// entries it covered were never applied here, so their grants, frees and
// proclamations were never reported.
func (s *Session) reconcile(st *fsm.State) {
	if _, ok := st.Session(s.id); !ok {
		s.later(s.expired)
		return
	}
	if s.resume.Load() != 0 {
		s.reconcileResume(st)
		return
	}
	s.mu.Lock()
	seqs := make([]uint64, 0, len(s.waiters))
	for seq, w := range s.waiters {
		if w.grant == nil {
			seqs = append(seqs, seq)
		}
	}
	held := make([]*grant, 0, len(s.grants))
	for _, g := range s.grants {
		held = append(held, g)
	}
	s.mu.Unlock()
	// st is only valid during this call: decide now, act (maybe) later.
	// The grants it reports were applied after everything this replica
	// applied before: heldSince bounds when.
	since := s.heldSince()
	var actions []func()
	for _, seq := range seqs {
		if name, token, ok := st.Grant(s.id, seq); ok {
			l := st.Lock(name)
			mode := grantMode{shared: l.Shared, permits: int(l.Permits)}
			actions = append(actions, func() { s.granted(seq, name, mode, token, "", since) })
		} else if e, ok := st.Leading(s.id, seq); ok {
			actions = append(actions, func() { s.granted(seq, e.Name, electionMode, e.Token, e.Value, since) })
		}
	}
	for _, g := range held {
		if !g.election {
			if !st.Holds(s.id, g.name, g.token) {
				actions = append(actions, func() { s.grantEnded(g.token, ErrNotHeld) })
			}
			continue
		}
		e := st.Election(g.name)
		if !e.Led || e.Token != g.token || e.Session != s.id {
			actions = append(actions, func() { s.grantEnded(g.token, ErrNotLeader) })
		} else {
			actions = append(actions, func() { s.proclaimed(g.token, e.Value) })
		}
	}
	s.later(func() {
		for _, f := range actions {
			f()
		}
	})
}

func reasonErr(r fsm.Reason) error {
	switch r {
	case fsm.ReasonExpired:
		return ErrSessionExpired
	case fsm.ReasonClosed:
		return ErrSessionClosed
	case fsm.ReasonCancelled:
		return context.Canceled
	case fsm.ReasonRevoked:
		return ErrRevoked
	case fsm.ReasonMaxHold:
		return ErrMaxHoldExceeded
	}
	return ErrNotHeld
}
