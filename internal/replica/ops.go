package replica

import (
	"fmt"
	"slices"

	"github.com/lni/dragonboat/v4/raftio"
)

// leaderChanged runs on Dragonboat's event goroutine when the known leader
// changed.
func (r *Replica) leaderChanged(old uint64, info raftio.LeaderInfo) {
	if info.LeaderID == 0 {
		r.Logger().Debug("fencelock: raft leader lost", "was", old, "term", info.Term)
		return
	}
	r.Ops.LeaderChanges.Add(1)
	r.Logger().Info("fencelock: raft leader changed", "leader", info.LeaderID, "term", info.Term)
}

// opsStatus fills the fields of Status that come from Dragonboat's local
// view of the membership.
func (r *Replica) opsStatus(st *Status) {
	st.Removed = r.Ops.Removed.Load()
	st.LastSnapshotIndex = max(r.Ops.SnapshotIndex.Load(), r.restoredIndex.Load())
	info := r.nodeHostInfo()
	if info == nil {
		return
	}
	for _, s := range info.ShardInfoList {
		if s.ShardID != r.ShardID() || s.Pending {
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
	if r.Ops.Removed.Swap(true) {
		return
	}
	if e, ok := r.host.tab.entry(r); ok && slices.Contains(e.Removed, r.cfg.ReplicaID) && r.host.own() {
		// The group table moved the group's voters off this host, which
		// runs only its own groups: a mirror takes over (table.go).
		err := movedOff(r.Name())
		r.Gone.Store(&err)
		r.Logger().Info("fencelock: the group moved its voters off this replica, as the group table says; it is reached through a replica that runs it from now on")
		r.tracker.SetLeader(false, 0)
		r.prop.LeaderChanged()
		r.host.tab.changed()
		return
	}
	if e, ok := r.host.tab.entry(r); ok && slices.Contains(e.Removed, r.cfg.ReplicaID) {
		// The group table moved the group's voters off this host: the
		// host runs on, without this group (table.go stops it).
		err := fmt.Errorf("%w: %q no longer runs on replica %d: SetVoters moved its voters off it", ErrGroupMoved, r.Name(), r.cfg.ReplicaID)
		r.Gone.Store(&err)
		r.Logger().Info("fencelock: the group moved its voters off this replica, as the group table says; it stops here")
		if d, ok := r.Sink.(Dropper); ok {
			d.Dropped(err)
		} else {
			r.Sink.Removed()
		}
		r.tracker.SetLeader(false, 0)
		r.prop.LeaderChanged()
		r.host.tab.changed()
		return
	}
	r.Logger().Warn("fencelock: this replica was removed from the group; close it and delete its Dir")
	r.Sink.Removed()
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
		cur := r.Ops.SnapshotIndex.Load()
		if index <= cur || r.Ops.SnapshotIndex.CompareAndSwap(cur, index) {
			return
		}
	}
}

// ConnectionFailed counts on the default group: a connection carries every
// group's traffic between two hosts.
func (l systemListener) ConnectionFailed(info raftio.ConnectionInfo) {
	l.h.groups()[0].Ops.ConnFailures.Add(1)
}

func (l systemListener) MembershipChanged(info raftio.NodeInfo) {
	if r := l.h.byShard(info.ShardID); r != nil {
		r.Logger().Debug("fencelock: membership changed")
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

// Counters returns the counters, and the state's counts from this
// replica's copy of the state (no I/O).
func (r *Replica) Counters() Counters { return r.Ops.Counters(r.StaleRead) }
