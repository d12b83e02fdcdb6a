package shard

import (
	"fmt"

	"github.com/lni/dragonboat/v4/raftio"

	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/lockapi"
)

// leaderChanged runs on Dragonboat's event goroutine when the known leader
// changed.
func (r *Shard) leaderChanged(old uint64, info raftio.LeaderInfo) {
	if info.LeaderID == 0 {
		r.Logger().Debug("fencelock: raft leader lost", "was", old, "term", info.Term)
		return
	}
	r.Ops.LeaderChanges.Add(1)
	r.Logger().Info("fencelock: raft leader changed", "leader", info.LeaderID, "term", info.Term)
}

// opsStatus fills the fields of Status that come from Dragonboat's local
// view of the membership.
func (r *Shard) opsStatus(st *groupcore.Status) {
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

// RemovedFromGroup ends everything local once the group removed this
// replica: Dragonboat has stopped it, so nothing would ever complete.
func (r *Shard) RemovedFromGroup() {
	if r.Ops.Removed.Swap(true) {
		return
	}
	if r.host.MovedOff(r) && r.host.OwnGroupsOnly() {
		// The group table moved the group's voters off this host, which
		// runs only its own groups: a mirror takes over (package grouptable's watcher).
		err := MovedOff(r.Name())
		r.Gone.Store(&err)
		r.Logger().Info("fencelock: the group moved its voters off this replica, as the group table says; it is reached through a replica that runs it from now on")
		r.tracker.SetLeader(false, 0)
		r.prop.LeaderChanged()
		r.host.GroupTableChanged()
		return
	}
	if r.host.MovedOff(r) {
		// The group table moved the group's voters off this host: the
		// host runs on, without this group (package grouptable's watcher stops it).
		err := fmt.Errorf("%w: %q no longer runs on replica %d: SetVoters moved its voters off it", lockapi.ErrGroupMoved, r.Name(), r.cfg.ReplicaID)
		r.Gone.Store(&err)
		r.Logger().Info("fencelock: the group moved its voters off this replica, as the group table says; it stops here")
		if d, ok := r.Sink.(groupcore.Dropper); ok {
			d.Dropped(err)
		} else {
			r.Sink.Removed()
		}
		r.tracker.SetLeader(false, 0)
		r.prop.LeaderChanged()
		r.host.GroupTableChanged()
		return
	}
	r.Logger().Warn("fencelock: this replica was removed from the group; close it and delete its Dir")
	r.Sink.Removed()
	r.tracker.SetLeader(false, 0)
	r.prop.LeaderChanged() // entries in flight will never complete
}

// snapshotSaved records that this replica wrote a snapshot of the state at
// index (Dragonboat's own event does not carry the index).
func (r *Shard) snapshotSaved(index uint64) {
	for {
		cur := r.Ops.SnapshotIndex.Load()
		if index <= cur || r.Ops.SnapshotIndex.CompareAndSwap(cur, index) {
			return
		}
	}
}

// Counters returns the counters, and the state's counts from this
// replica's copy of the state (no I/O).
func (r *Shard) Counters() groupcore.Counters { return r.Ops.Counters(r.StaleRead) }
