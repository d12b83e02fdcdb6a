package replica

import (
	"fmt"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/gate"
)

// The version gate (internal/fsm/version.go), as a replica takes part in it:
//
//   - each host announces in its Hello the newest log and snapshot versions
//     it reads (peering.Hello.Codec, Snapshot; absent: fsm.Baseline:
//     gate.Announced), and keeps what each peer announced (peers.reads);
//   - the leader of each group raises the group's gate (proposes
//     fsm.KindGate) once every voter and non-voting member of the group
//     has announced more than the gate: raiseGate, on a timer and whenever
//     a peer announces something new;
//   - every entry is written at the group's gate as applied here
//     (proposer), and a command whose kind needs more fails before it is
//     proposed with fsm.ErrVersionGated, naming the replicas the group
//     waits for (gatedError);
//   - a peer that announces less than a group it runs already writes is
//     refused in the handshake (checkReads), so a downgraded replica is told
//     why instead of failing on entries it cannot read;
//   - and, since a connection's handshake runs only when it opens and a
//     member may be added between the leader's read of the membership and
//     its raise, no entry or snapshot is sent to a peer of a newer version
//     than it announced (gate.Screen, answered by screenHost);
//   - a replica that meets an entry or a snapshot it cannot read stops on
//     it (fsm's Update fails) and says so in our words first (tooNew); the
//     gates it has seen are kept in Dir (gate.Record), so that a build
//     that cannot read them refuses to start instead of replaying its log
//     up to that entry again.
//
// The shard's parts (raiseGate, gatedError, tooNew) are package shard's
// versions.go, and ask this host what they need through shard.Host
// (PeerReads, Reads, KeepGate, RefuseOldBuilds).

// reads is what this host announces it reads: its build's, unless a test
// set Config.Reads to stand for an older build.
func (h *Host) reads() fsm.Gate {
	if h.cfg.Reads != (fsm.Gate{}) {
		return h.cfg.Reads
	}
	return fsm.Reads()
}

// recordReads keeps what replica id announced, and wakes the groups'
// leaders when it changed. The handshake calls it for every connection (the
// in-process network for every batch), so an unchanged announcement costs a
// map read.
func (p *peers) recordReads(id uint64, g fsm.Gate) {
	if old, ok := p.reads.Load(id); ok && old.(fsm.Gate) == g {
		return
	}
	p.reads.Store(id, g)
	for _, r := range p.h.groups() {
		r.NudgeGate()
	}
}

// readsOf returns what replica id last announced, if it was heard from.
func (p *peers) readsOf(id uint64) (fsm.Gate, bool) {
	v, ok := p.reads.Load(id)
	if !ok {
		return fsm.Gate{}, false
	}
	return v.(fsm.Gate), true
}

// checkReads refuses a peer that reads less than a group it runs (the
// default group, and the named groups its Hello lists) writes as applied
// here: it could not read the group's entries, and a build before the gate
// would skip them as corrupt.
func (p *peers) checkReads(h peering.Hello) error {
	reads := gate.Announced(h)
	for _, r := range p.h.groups() {
		if r.Name() != "" && !slices.ContainsFunc(h.Groups, func(g peering.GroupHello) bool { return g.Name == r.Name() }) {
			continue
		}
		if g := r.Gate(); !reads.Covers(g) {
			return fmt.Errorf("replica %d at %s reads log versions up to %d and snapshot versions up to %d, but %s writes %v: "+
				"it cannot read the group's entries. Run a build on replica %d that reads them "+
				"(a replica cannot go back to a build older than what its groups write: docs/operations.md, \"Upgrading\")",
				h.Replica, h.Addr, reads.Codec, reads.Snapshot, gate.GroupName(r.Name()), g, h.Replica)
		}
	}
	return nil
}

// keepGate records in Dir that group name writes g (versionRecord.keep)
// and, for a gate above the baseline, that a build from before the gate
// must not start on this Dir (peers.refuseOldBuilds): that build checks no
// versions, and would replay the log skipping the entries it cannot read.
func (h *Host) keepGate(name string, g fsm.Gate) error {
	if err := h.versions.Keep(name, g); err != nil {
		return err
	}
	if fsm.Baseline.Covers(g) {
		return nil
	}
	return h.peers.refuseOldBuilds()
}

// warnTooNew logs, at most once a minute per peer and group, that r's
// entries (what, of the version named) are not sent to replica id.
func (h *Host) warnTooNew(id uint64, r *Replica, reads fsm.Gate, what string) {
	key := [2]uint64{id, r.ShardID()}
	now := time.Now()
	if last, ok := h.tooNewWarned.Load(key); ok && now.Sub(last.(time.Time)) < time.Minute {
		return
	}
	h.tooNewWarned.Store(key, now)
	r.Logger().Warn(fmt.Sprintf("fencelock: replica %d reads log versions up to %d and snapshot versions up to %d, but %s writes %s: "+
		"its entries are not sent to it, and it falls behind until it runs a build that reads them", id, reads.Codec, reads.Snapshot, gate.GroupName(r.Name()), what))
}

// screenHost is h as its transport's screen (gate.Screen) reaches it.
type screenHost struct{ h *Host }

func (s screenHost) Reads(id uint64) (fsm.Gate, bool) { return s.h.peers.readsOf(id) }

func (s screenHost) Writes(shard uint64) (fsm.Gate, bool) {
	if r := s.h.byShard(shard); r != nil {
		return r.Gate(), true
	}
	return fsm.Gate{}, false
}

func (s screenHost) TooNew(shard, id uint64, reads fsm.Gate, what string) {
	if r := s.h.byShard(shard); r != nil {
		s.h.warnTooNew(id, r, reads, what)
	}
}
