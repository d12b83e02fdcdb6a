package fencelock

import (
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/raftio"

	"github.com/fencelock/fencelock/internal/fsm"
)

// ops is what a replica records for its operators: whether it was removed,
// its latest snapshot, and counters. Everything is atomic: the apply and
// proposal paths update it without locks or allocations.
type ops struct {
	removed       atomic.Bool
	snapshotIndex atomic.Uint64

	grants, releases, expiries  atomic.Uint64
	leaderChanges, connFailures atomic.Uint64
	proposals                   latency
}

// count records one applied event.
func (n *Node) count(e *fsm.Event) {
	o := &n.ops
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
			if n.local(e.Session) != nil {
				n.log.Warn("fencelock: the group expired a session of this replica", "session", e.Session)
			}
		}
	}
}

// leaderChanged runs on Dragonboat's event goroutine when the known leader
// changed.
func (n *Node) leaderChanged(old uint64, info raftio.LeaderInfo) {
	if info.LeaderID == 0 {
		n.log.Debug("fencelock: raft leader lost", "was", old, "term", info.Term)
		return
	}
	n.ops.leaderChanges.Add(1)
	n.log.Info("fencelock: raft leader changed", "leader", info.LeaderID, "term", info.Term)
}

// opsStatus fills the fields of Status that come from Dragonboat's local
// view of the membership.
func (n *Node) opsStatus(st *Status) {
	st.Removed = n.ops.removed.Load()
	st.LastSnapshotIndex = max(n.ops.snapshotIndex.Load(), n.restoredIndex.Load())
	select {
	case <-n.closed:
		return // the NodeHost may be closing
	default:
	}
	info := n.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
	if info == nil {
		return
	}
	for _, s := range info.ShardInfoList {
		if s.ShardID != shardID || s.Pending {
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
func (n *Node) removedFromGroup() {
	if n.ops.removed.Swap(true) {
		return
	}
	n.log.Warn("fencelock: this replica was removed from the group; close it and delete its Dir")
	for _, s := range n.localSessions() {
		s.end(ErrRemoved)
		n.forget(s)
	}
	n.tracker.SetLeader(false, 0)
	n.prop.LeaderChanged() // entries in flight will never complete
}

// systemListener receives Dragonboat's system events on its event goroutine;
// it must not block.
type systemListener struct{ n *Node }

func (l systemListener) NodeDeleted(info raftio.NodeInfo) {
	if info.ShardID == shardID && info.ReplicaID == l.n.cfg.ReplicaID {
		l.n.removedFromGroup()
	}
}

// snapshotSaved records that this replica wrote a snapshot of the state at
// index (Dragonboat's own event does not carry the index).
func (n *Node) snapshotSaved(index uint64) {
	for {
		cur := n.ops.snapshotIndex.Load()
		if index <= cur || n.ops.snapshotIndex.CompareAndSwap(cur, index) {
			return
		}
	}
}

func (l systemListener) ConnectionFailed(info raftio.ConnectionInfo) {
	l.n.ops.connFailures.Add(1)
}

func (l systemListener) MembershipChanged(info raftio.NodeInfo) {
	if info.ShardID == shardID {
		l.n.log.Debug("fencelock: membership changed")
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
