package replica

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/raftio"

	"github.com/fencelock/fencelock/internal/fsm"
)

// ops is what a replica records for its operators: whether it was removed,
// its latest snapshot, and counters. Everything is atomic: the apply and
// proposal paths update it without locks or allocations.
type ops struct {
	removed       atomic.Bool
	snapshotIndex atomic.Uint64

	entries, commands, keepAlives atomic.Uint64
	keepAliveEntries, renewals    atomic.Uint64
	grants, releases, expiries    atomic.Uint64
	leaderChanges, connFailures   atomic.Uint64
	proposals                     latency
}

// countEntry records one applied entry and its commands.
func (r *Replica) countEntry(cmds []fsm.Command) {
	o := &r.ops
	o.entries.Add(1)
	o.commands.Add(uint64(len(cmds)))
	var ka, renewed uint64
	for i := range cmds {
		switch cmds[i].Kind {
		case fsm.KindKeepAlive:
			ka++
			renewed++
		case fsm.KindKeepAliveBatch:
			ka++
			renewed += uint64(len(cmds[i].Renew))
		}
	}
	if ka != 0 {
		o.keepAlives.Add(ka)
		o.keepAliveEntries.Add(1)
		o.renewals.Add(renewed)
	}
}

// count records one applied event.
func (r *Replica) count(e *fsm.Event) {
	o := &r.ops
	switch e.Kind {
	case fsm.EventGranted:
		o.grants.Add(1)
	case fsm.EventFreed:
		if e.Reason == fsm.ReasonReleased {
			o.releases.Add(1)
		}
	case fsm.EventSessionEnded:
		if e.Reason == fsm.ReasonExpired {
			o.expiries.Add(1)
		}
	}
}

// leaderChanged runs on Dragonboat's event goroutine when the known leader
// changed.
func (r *Replica) leaderChanged(old uint64, info raftio.LeaderInfo) {
	if info.LeaderID == 0 {
		r.log.Debug("fencelock: raft leader lost", "was", old, "term", info.Term)
		return
	}
	r.ops.leaderChanges.Add(1)
	r.log.Info("fencelock: raft leader changed", "leader", info.LeaderID, "term", info.Term)
}

// opsStatus fills the fields of Status that come from Dragonboat's local
// view of the membership.
func (r *Replica) opsStatus(st *Status) {
	st.Removed = r.ops.removed.Load()
	st.LastSnapshotIndex = max(r.ops.snapshotIndex.Load(), r.restoredIndex.Load())
	info := r.nodeHostInfo()
	if info == nil {
		return
	}
	for _, s := range info.ShardInfoList {
		if s.ShardID != r.shard || s.Pending {
			continue
		}
		st.NonVoting = s.IsNonVoting
		st.ConfigChangeIndex = s.ConfigChangeIndex
		st.Voters = make(map[uint64]string, len(s.Replicas))
		for id, addr := range s.Replicas {
			st.Voters[id] = addr
		}
	}
}

// removedFromGroup ends everything local once the group removed this
// replica: Dragonboat has stopped it, so nothing would ever complete.
func (r *Replica) removedFromGroup() {
	if r.ops.removed.Swap(true) {
		return
	}
	if e, ok := r.host.tab.entry(r); ok && slices.Contains(e.Removed, r.cfg.ReplicaID) && r.host.own() {
		// The group table moved the group's voters off this host, which
		// runs only its own groups: a mirror takes over (table.go).
		err := movedOff(r.name)
		r.gone.Store(&err)
		r.log.Info("fencelock: the group moved its voters off this replica, as the group table says; it is reached through a replica that runs it from now on")
		r.tracker.SetLeader(false, 0)
		r.prop.LeaderChanged()
		r.host.tab.changed()
		return
	}
	if e, ok := r.host.tab.entry(r); ok && slices.Contains(e.Removed, r.cfg.ReplicaID) {
		// The group table moved the group's voters off this host: the
		// host runs on, without this group (table.go stops it).
		err := fmt.Errorf("%w: %q no longer runs on replica %d: SetVoters moved its voters off it", ErrGroupMoved, r.name, r.cfg.ReplicaID)
		r.gone.Store(&err)
		r.log.Info("fencelock: the group moved its voters off this replica, as the group table says; it stops here")
		if d, ok := r.sink.(Dropper); ok {
			d.Dropped(err)
		} else {
			r.sink.Removed()
		}
		r.tracker.SetLeader(false, 0)
		r.prop.LeaderChanged()
		r.host.tab.changed()
		return
	}
	r.log.Warn("fencelock: this replica was removed from the group; close it and delete its Dir")
	r.sink.Removed()
	r.tracker.SetLeader(false, 0)
	r.prop.LeaderChanged() // entries in flight will never complete
}

// systemListener receives Dragonboat's system events on its event goroutine,
// for every shard of the host; it must not block.
type systemListener struct{ h *Host }

func (l systemListener) NodeDeleted(info raftio.NodeInfo) {
	if r := l.h.byShard(info.ShardID); r != nil && info.ReplicaID == r.cfg.ReplicaID {
		r.removedFromGroup()
	}
}

// snapshotSaved records that this replica wrote a snapshot of the state at
// index (Dragonboat's own event does not carry the index).
func (r *Replica) snapshotSaved(index uint64) {
	for {
		cur := r.ops.snapshotIndex.Load()
		if index <= cur || r.ops.snapshotIndex.CompareAndSwap(cur, index) {
			return
		}
	}
}

// ConnectionFailed counts on the default group: a connection carries every
// group's traffic between two hosts.
func (l systemListener) ConnectionFailed(info raftio.ConnectionInfo) {
	l.h.groups()[0].ops.connFailures.Add(1)
}

func (l systemListener) MembershipChanged(info raftio.NodeInfo) {
	if r := l.h.byShard(info.ShardID); r != nil {
		r.log.Debug("fencelock: membership changed")
	}
}

func (systemListener) NodeHostShuttingDown()                       {}
func (systemListener) SnapshotCreated(raftio.SnapshotInfo)         {}
func (systemListener) SnapshotRecovered(raftio.SnapshotInfo)       {}
func (systemListener) SnapshotReceived(raftio.SnapshotInfo)        {}
func (systemListener) NodeUnloaded(raftio.NodeInfo)                {}
func (systemListener) NodeReady(raftio.NodeInfo)                   {}
func (systemListener) ConnectionEstablished(raftio.ConnectionInfo) {}
func (systemListener) SendSnapshotStarted(raftio.SnapshotInfo)     {}
func (systemListener) SendSnapshotCompleted(raftio.SnapshotInfo)   {}
func (systemListener) SendSnapshotAborted(raftio.SnapshotInfo)     {}
func (systemListener) SnapshotCompacted(raftio.SnapshotInfo)       {}
func (systemListener) LogCompacted(raftio.EntryInfo)               {}
func (systemListener) LogDBCompacted(raftio.EntryInfo)             {}

// latencyBounds are the upper bounds of the proposal latency buckets: from
// one fsync on a fast disk to a proposal that waited out elections.
var latencyBounds = [...]time.Duration{
	250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// latency is a fixed-bucket histogram updated with atomics: observing costs
// a clock read and three atomic adds.
type latency struct {
	buckets [len(latencyBounds) + 1]atomic.Uint64 // the last counts the rest
	sum     atomic.Int64                          // nanoseconds
}

func (h *latency) since(start time.Time) { h.observe(time.Since(start)) }

func (h *latency) observe(d time.Duration) {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sum.Add(int64(d))
}

// snapshot returns the histogram with cumulative bucket counts.
func (h *latency) snapshot() Histogram {
	out := Histogram{Buckets: make([]Bucket, len(latencyBounds))}
	var total uint64
	for i, b := range latencyBounds {
		total += h.buckets[i].Load()
		out.Buckets[i] = Bucket{UpperBound: b, Count: total}
	}
	out.Count = total + h.buckets[len(latencyBounds)].Load()
	out.Sum = time.Duration(h.sum.Load())
	return out
}

// Histogram is a latency histogram with cumulative buckets (the root's
// Histogram documents it).
type Histogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets []Bucket
}

// Bucket counts the observations up to UpperBound.
type Bucket struct {
	UpperBound time.Duration
	Count      uint64
}

// Counters are what Stats reports of this replica's own work.
type Counters struct {
	Entries, Commands, KeepAlives, KeepAliveEntries, Renewals     uint64
	Grants, Releases, Expiries, LeaderChanges, ConnectionFailures uint64
	ProposalLatency                                               Histogram
	Sessions, LocksHeld, Waiters                                  int // from this replica's copy of the state
}

// Counters returns the counters, and the state's counts from this
// replica's copy of the state (no I/O).
func (r *Replica) Counters() Counters { return r.ops.counters(r.StaleRead) }

// counters are the counters, with the state's counts read by staleRead:
// the shard's copy of the state, or the mirror's.
func (o *ops) counters(staleRead func(fsm.Query) (any, error)) Counters {
	c := Counters{
		Entries:            o.entries.Load(),
		Commands:           o.commands.Load(),
		KeepAlives:         o.keepAlives.Load(),
		KeepAliveEntries:   o.keepAliveEntries.Load(),
		Renewals:           o.renewals.Load(),
		Grants:             o.grants.Load(),
		Releases:           o.releases.Load(),
		Expiries:           o.expiries.Load(),
		LeaderChanges:      o.leaderChanges.Load(),
		ConnectionFailures: o.connFailures.Load(),
		ProposalLatency:    o.proposals.snapshot(),
	}
	type counts struct{ sessions, locks, waiting int }
	v, err := staleRead(fsm.Query(func(s *fsm.State) any {
		var n counts
		n.sessions, n.locks, n.waiting = s.Counts()
		return n
	}))
	if n, ok := v.(counts); ok && err == nil {
		c.Sessions, c.LocksHeld, c.Waiters = n.sessions, n.locks, n.waiting
	}
	return c
}
