package shard

// The version gate as a shard takes part in it (the host's side, and what
// the gate is, are internal/replica's versions.go; the parts that need no
// shard are package gate's): the leader's raise of the versions its group
// writes (raiseGate), the refusal of a command the group cannot write yet
// (gated), the wait of one that prefers a newer version (preferGate), and
// what the replica says as it stops on an entry it cannot read (tooNew).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/gate"
)

// gateEvery is how often each group's leader looks whether it may raise
// the gate, besides when a peer announces new versions.
const gateEvery = time.Second

// setGate records the gate applied here (a KindGate, or a snapshot). The
// state's gate never falls, and neither does this view of it: the
// proposer writes at it.
func (r *Shard) setGate(g fsm.Gate) {
	var old *fsm.Gate
	for {
		old = r.Writes.Load()
		if old.Covers(g) {
			return
		}
		next := old.Max(g)
		if r.Writes.CompareAndSwap(old, &next) {
			g = next
			break
		}
	}
	r.Logger().Info("fencelock: "+gate.GroupName(r.Name())+" writes "+g.String(), "was", old.String())
	if err := r.host.KeepGate(r.Name(), g); err != nil {
		r.Logger().Warn("fencelock: cannot keep the versions the group writes in Dir; a build that cannot read them is refused by its peers rather than at its start", "err", err)
	}
}

// runGate raises the group's gate whenever this replica leads it and every
// member reads more than it: see raiseGate.
func (r *Shard) runGate(stop <-chan struct{}) {
	t := time.NewTicker(gateEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		case <-r.gateNudge:
		}
		r.raiseGate()
	}
}

// raiseGate proposes a KindGate when this replica leads the group, the
// group writes less than this build could, and every voter and non-voting
// member (gateMembers) has announced that it reads more: the gate rises to what all of them read, this replica
// included. It only proposes; the state decides, and every replica learns
// the new gate when it applies the command. A member that has not been
// heard from since this replica started holds the gate where it is.
func (r *Shard) raiseGate() {
	if r.LeaderID.Load() != r.cfg.ReplicaID {
		return
	}
	cur, own := r.Gate(), r.host.Reads()
	if cur.Covers(own) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), r.cfg.ProposalTimeout)
	defer cancel()
	ids, err := r.gateMembers(ctx)
	if err != nil {
		return
	}
	r.gateView.Store(&gateView{at: time.Now(), members: ids})
	target := own
	for _, id := range ids {
		if id == r.cfg.ReplicaID {
			continue
		}
		g, ok := r.host.PeerReads(id)
		if !ok {
			return
		}
		target = target.Min(g)
	}
	next := cur.Max(target)
	if next == cur || !next.Valid() || next.Codec < fsm.MinCodec(fsm.KindGate) {
		return
	}
	if !fsm.Baseline.Covers(next) {
		// The raise is the first entry a build from before the gate cannot
		// read: this Dir refuses such a build before it holds one.
		if err := r.host.RefuseOldBuilds(); err != nil {
			r.Logger().Warn("fencelock: cannot mark Dir against builds from before the version gate; the gate is not raised", "err", err)
			return
		}
	}
	if hold := r.holdRaise.Load(); hold != nil {
		(*hold)() // a test's: see TestingHoldGateRaise
	}
	r.Logger().Info("fencelock: every member of "+gate.GroupName(r.Name())+" reads "+next.String()+": raising the versions the group writes",
		"members", ids, "was", cur.String())
	if _, err := r.propose(ctx, fsm.Command{Kind: fsm.KindGate, Gate: next}); err != nil {
		r.Logger().Debug("fencelock: the gate's raise was not applied; the leader tries again", "err", err)
	}
}

// gateMembers are the replicas that must read what the group writes, in
// ID order: its voters and non-voting members (a linearizable read), and,
// for a named group, every host of the deployment (the default group's
// members), which the group's leader adds as non-voting members as it
// learns of them (reconcile): a host that joins after the gate rose would
// get entries it cannot read.
func (r *Shard) gateMembers(ctx context.Context) ([]uint64, error) {
	m, err := r.membership(ctx)
	if err != nil {
		return nil, err
	}
	ids := memberIDs(m)
	if def := r.host.DefaultGroup(); def != r {
		dm, err := def.membership(ctx)
		if err != nil {
			return nil, err
		}
		ids = append(ids, memberIDs(dm)...)
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	return ids, nil
}

// memberIDs are the voters and non-voting members of m, in ID order.
func memberIDs(m *dragonboat.Membership) []uint64 {
	ids := slices.Collect(maps.Keys(m.Nodes))
	ids = append(ids, slices.Collect(maps.Keys(m.NonVotings))...)
	ids = append(ids, slices.Collect(maps.Keys(m.Witnesses))...)
	slices.Sort(ids)
	return slices.Compact(ids)
}

// gateView is the membership a gated error names the members of: the last
// one the gate's leader loop or a gated call read.
type gateView struct {
	at      time.Time
	members []uint64
}

// gateViewAge is how long a gated call reuses the membership another read:
// a caller retrying a gated command must not cost a raft read each time.
const gateViewAge = 5 * time.Second

// gated checks cmd against the group's gate: nil if its kind may be
// written, else an error wrapping fsm.ErrVersionGated that says what it
// needs and which members the group waits for.
func (r *Shard) gated(ctx context.Context, cmd *fsm.Command) error {
	need, g := fsm.NeedsCodec(cmd), r.Gate()
	if need != 0 && need <= g.Codec {
		return nil
	}
	e := &gatedError{kind: cmd.Kind, need: need, group: r.Name(), writes: g}
	if need == 0 {
		return e
	}
	// Every member reads it, or has not been heard from yet (a deployment
	// just started): the leader raises the gate as soon as it hears from
	// them, so wait for that rather than fail a call made right after start.
	if r.noneOlder(ctx, e) && r.awaitGate(ctx, need) {
		return nil
	}
	return e
}

// noneOlder reports whether no member of the group is known to read less
// than e.need, so that waiting for the gate's raise may help; e records
// the members it waits for, or that the membership could not be read
// (false then).
func (r *Shard) noneOlder(ctx context.Context, e *gatedError) bool {
	view := r.gateView.Load()
	if view == nil || time.Since(view.at) > gateViewAge {
		rctx, cancel := context.WithTimeout(ctx, max(r.cfg.ProposalTimeout/4, time.Second))
		ids, err := r.gateMembers(rctx)
		cancel()
		if err == nil {
			view = &gateView{at: time.Now(), members: ids}
			r.gateView.Store(view)
		}
	}
	if view == nil {
		e.unread = true
		return false
	}
	older := false
	for _, id := range view.members {
		their, ok := r.host.Reads(), true
		if id != r.cfg.ReplicaID {
			their, ok = r.host.PeerReads(id)
		}
		switch {
		case !ok:
			e.waiting = append(e.waiting, fmt.Sprintf("replica %d (not heard from)", id))
		case their.Codec < e.need:
			older = true
			e.waiting = append(e.waiting, fmt.Sprintf("replica %d (reads up to %d)", id, their.Codec))
		}
	}
	return !older
}

// preferGate gives a command that carries what a newer log version adds
// but works without it (an open's parent, fsm.PrefersCodec) the chance to
// be written with it: while the group writes an older version and no
// member is known to read less, as right after a deployment starts, it
// waits for the leader's raise, bounded by ctx and gateRaiseWait. It never
// fails the call: the command is then written as the gate allows.
func (r *Shard) preferGate(ctx context.Context, cmd fsm.Command) {
	need := fsm.PrefersCodec(cmd)
	if need == 0 || r.Gate().Codec >= need {
		return
	}
	if last := r.preferGaveUp.Load(); last != 0 && time.Since(time.Unix(0, last)) < preferRetry {
		return // a member stays unheard from: do not make every open wait
	}
	if !r.noneOlder(ctx, &gatedError{kind: cmd.Kind, need: need, group: r.Name()}) {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, preferWait)
	defer cancel()
	if !r.awaitGate(wctx, need) && ctx.Err() == nil {
		r.preferGaveUp.Store(time.Now().UnixNano())
	}
}

// An open waits for the raise (preferGate) up to preferWait; once one
// waited in vain, the group's opens are written as the gate allows for
// preferRetry, so that a member down for good costs one wait, not one per
// open.
const (
	preferWait  = 3 * time.Second
	preferRetry = time.Minute
)

// gateRaiseWait bounds how long a command that no member is known to be
// unable to read waits for the group's leader to raise the gate to it: a
// deployment just started (or just upgraded) raises it within a second or
// two of its replicas connecting, and a call made meanwhile (a group
// created right after start) should wait for that rather than fail. A
// member that stays unheard from fails the call after it.
const gateRaiseWait = 10 * time.Second

// awaitGate waits until the group writes codec version need, for up to
// gateRaiseWait or until ctx ends; it reports whether it does.
func (r *Shard) awaitGate(ctx context.Context, need int) bool {
	ctx, cancel := context.WithTimeout(ctx, gateRaiseWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for r.Gate().Codec < need {
		select {
		case <-ctx.Done():
			return false
		case <-r.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// gatedError is a command refused by the gate (fsm.ErrVersionGated).
type gatedError struct {
	kind    fsm.Kind
	need    int
	group   string
	writes  fsm.Gate
	waiting []string // the members that do not read need, as "replica 2 (reads up to 8)"
	unread  bool     // the membership could not be read
}

func (e *gatedError) Error() string {
	if e.need == 0 {
		return fmt.Sprintf("%v: command kind %d is unknown to this build", fsm.ErrVersionGated, e.kind)
	}
	s := fmt.Sprintf("%v: %v needs log version %d; %s writes log version %d until every member reads %d",
		fsm.ErrVersionGated, e.kind, e.need, gate.GroupName(e.group), e.writes.Codec, e.need)
	switch {
	case e.unread:
		s += " (its membership could not be read to name who does not)"
	case len(e.waiting) > 0:
		s += "; it waits for " + strings.Join(e.waiting, ", ") + ": upgrade them"
	default:
		s += "; every member reads it now, and the group's leader raises the gate within seconds"
	}
	return s
}

func (e *gatedError) Unwrap() error { return fsm.ErrVersionGated }

// NudgeGate wakes the leader's loop that raises the gate (runGate): a
// peer announced new versions. It never blocks.
func (r *Shard) NudgeGate() {
	select {
	case r.gateNudge <- struct{}{}:
	default:
	}
}

// tooNew runs when the state machine met an entry or a snapshot this build
// cannot read, just before the replica stops on it: it says so in our
// words, and keeps it in Dir so that this build refuses the next start
// rather than replay the log up to the same entry.
func (r *Shard) tooNew(index uint64, err error) {
	var tn *fsm.TooNewError
	g := r.Gate()
	if errors.As(err, &tn) {
		if tn.What == "snapshot" {
			g.Snapshot = max(g.Snapshot, tn.Version)
		} else {
			g.Codec = max(g.Codec, tn.Version)
		}
	}
	at := ""
	if index != 0 {
		at = fmt.Sprintf(" at log index %d", index)
	}
	r.Logger().Error(fmt.Sprintf("fencelock: %s writes %s%s; this build reads up to %v: upgrade this replica. It stops now: "+
		"going on without the entry would leave it with another state than its group's", gate.GroupName(r.Name()), tooNewWhat(err), at, fsm.Reads()))
	if kerr := r.host.KeepGate(r.Name(), g); kerr != nil {
		r.Logger().Warn("fencelock: cannot keep the versions the group writes in Dir", "err", kerr)
	}
}

// tooNewWhat is "log version 10" from a TooNewError, or the error itself.
func tooNewWhat(err error) string {
	var tn *fsm.TooNewError
	if errors.As(err, &tn) {
		return fmt.Sprintf("%s version %d", tn.What, tn.Version)
	}
	return err.Error()
}
