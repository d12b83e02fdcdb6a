package shard

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/expiry"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

// observer is the state machine's view of its replica (fsm.Observer,
// fsm.SnapshotObserver and fsm.TooNewObserver). It is unexported, and so is the package, so that
// nothing outside the library can feed the expiry timers or the sessions
// an event the log never held.
type observer struct{ r *Shard }

func (o observer) Applied(index uint64, cmds []fsm.Command, events []fsm.Event) {
	o.r.Ops.CountEntry(cmds)
	if o.r.ShardID() == DefaultShard {
		for i := range events {
			if events[i].Kind == fsm.EventGroupTable {
				o.r.host.GroupTableChanged()
				break
			}
		}
	}
	if f := o.r.cfg.OnApplied; f != nil {
		f(testhook.Applied{Group: o.r.Name(), Index: index, Cmds: slices.Clone(cmds), Events: cloneEvents(events)})
	}
	o.r.applied(index, events)
}

// Entry feeds the mirrors this replica serves (package serve).
func (o observer) Entry(index uint64, data []byte) { o.r.subs.Publish(index, data) }

func (o observer) Restored(st *fsm.State) {
	// The mirrors it feeds miss the entries the snapshot covered: they
	// subscribe again, for a snapshot of their own.
	o.r.subs.End(errors.New("the serving replica restored a snapshot"))
	if o.r.ShardID() == DefaultShard {
		o.r.host.GroupTableChanged()
	}
	o.r.restored(st)
}
func (o observer) TooNew(index uint64, err error) { o.r.tooNew(index, err) }

func (o observer) SnapshotSaved(index uint64, bytes int64, took time.Duration) {
	o.r.snapshotSaved(index)
	o.r.snaps.saved(index, bytes, took)
}
func (o observer) SnapshotRestored(index uint64, took time.Duration) {
	o.r.snaps.restored(index, took)
}

func (r *Shard) applied(index uint64, events []fsm.Event) {
	r.AppliedIndex.Store(index)
	for i := range events {
		e := &events[i]
		r.Ops.Count(e)
		switch e.Kind {
		case fsm.EventTouched:
			r.tracker.Touch(e.Session, e.Index, time.Duration(e.TTL))
		case fsm.EventRenewed:
			r.tracker.TouchBatch(e.Index, e.Sessions)
		case fsm.EventLeaderStarted:
			if e.Group != 0 {
				r.SetGroupID(e.Group)
			}
			r.tracker.LeaderStarted(e.Index, e.Owner, e.Term)
		case fsm.EventSessionEnded:
			r.tracker.Remove(e.Session)
		case fsm.EventGranted, fsm.EventElected:
			if e.MaxHold != 0 {
				r.tracker.Held(expiry.Hold{Name: e.Name, Election: e.Kind == fsm.EventElected, Token: e.Token,
					D: time.Duration(e.MaxHold)})
			}
		case fsm.EventFreed, fsm.EventDeposed:
			r.tracker.Freed(e.Token)
		case fsm.EventDelayed:
			r.tracker.Delayed(expiry.Delay{Name: e.Name, Token: e.Token, D: time.Duration(e.TTL)})
		case fsm.EventUndelayed:
			r.tracker.Undelayed(e.Name, e.Token)
		case fsm.EventGateRaised:
			r.setGate(e.Gate)
		}
	}
	r.Sink.Applied(index, events)
}

func (r *Shard) restored(st *fsm.State) {
	r.AppliedIndex.Store(st.Index())
	r.restoredIndex.Store(st.Index())
	if id := st.GroupID(); id != 0 {
		r.SetGroupID(id)
	}
	r.setGate(st.Gate())
	infos := st.Sessions()
	sessions := make([]expiry.Session, len(infos))
	for i, s := range infos {
		sessions[i] = expiry.Session{ID: s.ID, KeepAlive: s.KeepAlive, TTL: time.Duration(s.TTL)}
	}
	ds, gs := st.Timers()
	delays := make([]expiry.Delay, len(ds))
	for i, d := range ds {
		delays[i] = expiry.Delay{Name: d.Name, Token: d.Token, D: time.Duration(d.Delay)}
	}
	holds := make([]expiry.Hold, len(gs))
	for i, g := range gs {
		holds[i] = expiry.Hold{Name: g.Name, Election: g.Election, Token: g.Token, D: time.Duration(g.MaxHold)}
	}
	r.tracker.Reset(sessions, delays, holds, st.LeaderMark())
	r.Sink.Restored(st)
}

// proposeExpire and proposeLeaderStart are the expiry tracker's actions on
// the leader; they must not block, so the proposal runs in the background.
// The tracker asks again until the state shows the effect.
func (r *Shard) proposeExpire(id, keepAlive, mark uint64) {
	r.proposeInBackground(fsm.Command{Kind: fsm.KindExpire, Session: id, Target: keepAlive, Mark: mark})
}

func (r *Shard) proposeUndelay(name string, token, mark uint64) {
	r.proposeInBackground(fsm.Command{Kind: fsm.KindUndelay, Name: name, Token: token, Mark: mark})
}

func (r *Shard) proposeExpireGrant(name string, election bool, token, mark uint64) {
	r.proposeInBackground(fsm.Command{Kind: fsm.KindExpireGrant, Name: name, Election: election, Token: token, Mark: mark})
}

func (r *Shard) proposeLeaderStart(term uint64) {
	// The nonce becomes the group's ID if this is the group's first
	// LeaderStart; it must be unpredictable across bootstraps, not secret.
	nonce := rand.Uint64() | 1
	r.proposeInBackground(fsm.Command{Kind: fsm.KindLeaderStart, Owner: r.cfg.ReplicaID, Term: term, Nonce: nonce})
}

func (r *Shard) proposeInBackground(cmd fsm.Command) {
	r.Go(func() {
		ctx, cancel := context.WithTimeout(r.Context(), r.cfg.ProposalTimeout)
		defer cancel()
		if _, err := r.Propose(ctx, cmd); err != nil {
			r.Logger().Debug("fencelock: leader's proposal not applied; it retries", "kind", cmd.Kind, "session", cmd.Session, "err", err)
		}
	})
}

// snapStats records this replica's snapshot timings for the benchmark
// (internal/testhook.SnapshotStats).
type snapStats struct {
	mu sync.Mutex
	s  testhook.Snapshots
}

func (s *snapStats) saved(index uint64, bytes int64, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s.Saves++
	s.s.LastSave, s.s.LastSaveBytes, s.s.LastSaveIndex = took, bytes, index
}

func (s *snapStats) restored(index uint64, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.s.Restores++
	s.s.LastRestore, s.s.RestoredIndex = took, index
}

// Snapshots returns the snapshot timings, for the benchmark.
func (r *Shard) Snapshots() testhook.Snapshots {
	r.snaps.mu.Lock()
	defer r.snaps.mu.Unlock()
	return r.snaps.s
}

// cloneEvents copies events for a hook that keeps them: the slice and the
// sessions of an EventRenewed are the state machine's until the call ends.
func cloneEvents(events []fsm.Event) []fsm.Event {
	out := slices.Clone(events)
	for i := range out {
		out[i].Sessions = slices.Clone(out[i].Sessions)
	}
	return out
}
