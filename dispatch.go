package fencelock

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/fencelock/fencelock/internal/expiry"
	"github.com/fencelock/fencelock/internal/fsm"
)

// fsmObserver is the state machine's view of its Node: the fsm calls it on
// the apply goroutine. It is unexported so that nothing outside the library
// can feed the expiry timers or the sessions an event the log never held.
type fsmObserver struct{ n *Node }

func (o fsmObserver) Applied(index uint64, events []fsm.Event) { o.n.onApplied(index, events) }
func (o fsmObserver) Restored(st *fsm.State)                   { o.n.onRestored(st) }
func (o fsmObserver) SnapshotSaved(index uint64, bytes int64, took time.Duration) {
	o.n.onSnapshotSaved(index, bytes, took)
}
func (o fsmObserver) SnapshotRestored(index uint64, took time.Duration) {
	o.n.onSnapshotRestored(index, took)
}

// onApplied runs on the apply goroutine for every entry. Each event goes to
// the session it concerns, if that session lives here: this is how exactly
// the granted waiter, and nobody else, wakes.
func (n *Node) onApplied(index uint64, events []fsm.Event) {
	n.applied.Store(index)
	for i := range events {
		e := &events[i]
		n.count(e)
		switch e.Kind {
		case fsm.EventTouched:
			n.tracker.Touch(e.Session, e.Index, time.Duration(e.TTL))
			continue
		case fsm.EventLeaderStarted:
			if e.Group != 0 {
				n.groupID.Store(e.Group)
			}
			n.tracker.LeaderStarted(e.Index, e.Owner, e.Term)
			continue
		case fsm.EventSessionEnded:
			n.tracker.Remove(e.Session)
		case fsm.EventElected, fsm.EventDeposed, fsm.EventProclaimed:
			n.watches.applied(index, e)
		}
		if s := n.local(e.Session); s != nil {
			s.handle(e)
		}
	}
	n.watches.notify()
}

// onRestored runs when a snapshot replaced the state, skipping entries
// whose events were never seen: the timers restart and every local session
// is brought in line with the state.
func (n *Node) onRestored(st *fsm.State) {
	n.applied.Store(st.Index())
	n.restoredIndex.Store(st.Index())
	if id := st.GroupID(); id != 0 {
		n.groupID.Store(id)
	}
	infos := st.Sessions()
	sessions := make([]expiry.Session, len(infos))
	for i, s := range infos {
		sessions[i] = expiry.Session{ID: s.ID, KeepAlive: s.KeepAlive, TTL: time.Duration(s.TTL)}
	}
	n.tracker.Reset(sessions, st.LeaderMark())
	for _, s := range n.localSessions() {
		s.reconcile(st)
	}
	n.watches.restored(st)
}

// proposeExpire and proposeLeaderStart are the expiry tracker's actions on
// the leader; they must not block, so the proposal runs in the background.
// The tracker asks again until the state shows the effect.
func (n *Node) proposeExpire(id, keepAlive, mark uint64) {
	n.proposeInBackground(fsm.Command{Kind: fsm.KindExpire, Session: id, Target: keepAlive, Mark: mark})
}

func (n *Node) proposeLeaderStart(term uint64) {
	// The nonce becomes the group's ID if this is the group's first
	// LeaderStart; it must be unpredictable across bootstraps, not secret.
	nonce := rand.Uint64() | 1
	n.proposeInBackground(fsm.Command{Kind: fsm.KindLeaderStart, Owner: n.cfg.ReplicaID, Term: term, Nonce: nonce})
}

func (n *Node) proposeInBackground(cmd fsm.Command) {
	n.goBackground(func() {
		ctx, cancel := context.WithTimeout(n.ctx, n.cfg.ProposalTimeout)
		defer cancel()
		if _, err := n.propose(ctx, cmd); err != nil {
			n.log.Debug("fencelock: leader's proposal not applied; it retries", "kind", cmd.Kind, "session", cmd.Session, "err", err)
		}
	})
}

// handle applies one event to the local session it concerns (at the end of
// a testhook.Pause, if one is on).
func (s *Session) handle(e *fsm.Event) {
	ev := *e
	s.later(func() { s.handleNow(&ev) })
}

func (s *Session) handleNow(e *fsm.Event) {
	switch e.Kind {
	case fsm.EventGranted:
		s.granted(e.Seq, e.Name, false, e.Token, "")
	case fsm.EventFreed:
		s.ended(e.Token, reasonErr(e.Reason))
	case fsm.EventSessionEnded:
		s.end(reasonErr(e.Reason))
		s.n.forget(s)
	case fsm.EventElected:
		s.granted(e.Seq, e.Name, true, e.Token, e.Value)
	case fsm.EventDeposed:
		s.ended(e.Token, depositionErr(e.Reason))
	case fsm.EventProclaimed:
		s.proclaimed(e.Token, e.Value)
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
	var actions []func()
	for _, seq := range seqs {
		if name, token, ok := st.Grant(s.id, seq); ok {
			actions = append(actions, func() { s.granted(seq, name, false, token, "") })
		} else if e, ok := st.Leading(s.id, seq); ok {
			actions = append(actions, func() { s.granted(seq, e.Name, true, e.Token, e.Value) })
		}
	}
	for _, g := range held {
		if !g.election {
			if !st.Holds(s.id, g.name, g.token) {
				actions = append(actions, func() { s.ended(g.token, ErrNotHeld) })
			}
			continue
		}
		e := st.Election(g.name)
		if !e.Led || e.Token != g.token || e.Session != s.id {
			actions = append(actions, func() { s.ended(g.token, ErrNotLeader) })
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
	}
	return ErrNotHeld
}
