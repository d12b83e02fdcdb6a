package replica

// The host's side of its shards (package shard): it makes one per group it
// runs, starts and stops it, hears Dragonboat's events for every shard and
// hands each its own, and answers the calls a shard makes of its host
// (shard.Host, through shardHost). A shard reaches its host only through
// those calls; the host reaches a shard through its exported methods.

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/mirror"
	"github.com/fencelock/fencelock/internal/replica/shard"
)

// newReplica prepares the replica of one group; the Host starts its shard.
func newReplica(h *Host, name string, id uint64, sink Sink) *Replica {
	cfg := h.cfg
	return shard.New(shardHost{h}, shard.Config{ReplicaID: cfg.ReplicaID, RTT: cfg.RTT, ProposalTimeout: cfg.ProposalTimeout,
		ElectionTicks: cfg.ElectionTicks, HeartbeatTicks: cfg.HeartbeatTicks, SnapshotEntries: cfg.SnapshotEntries,
		CompactionOverhead: cfg.CompactionOverhead, Logger: cfg.Logger, Clock: cfg.Clock, OnApplied: cfg.OnApplied}, name, id, sink)
}

// shardHost is the host as its shards see it (shard.Host): the calls
// below, and no more.
type shardHost struct{ h *Host }

func (a shardHost) Replaced(ctx context.Context, r *Replica, err error) shard.Group {
	if g := a.h.replaced(ctx, r, err); g != nil {
		return g
	}
	return nil
}
func (a shardHost) Reached(id uint64, d time.Duration) bool { return a.h.peers.reached(id, d) }
func (a shardHost) PeerReads(id uint64) (fsm.Gate, bool)    { return a.h.peers.readsOf(id) }
func (a shardHost) Reads() fsm.Gate                         { return a.h.reads() }
func (a shardHost) RefuseOldBuilds() error                  { return a.h.peers.refuseOldBuilds() }
func (a shardHost) KeepGate(name string, g fsm.Gate) error  { return a.h.keepGate(name, g) }
func (a shardHost) StopShard(id uint64) error               { return a.h.stopShard(id) }
func (a shardHost) NodeHostInfo() *dragonboat.NodeHostInfo  { return a.h.nodeHostInfo() }
func (a shardHost) DefaultGroup() *Replica                  { return a.h.groups()[0] }
func (a shardHost) DefaultIdentity() string                 { return a.h.peers.group() }
func (a shardHost) GoBackground(f func()) bool              { return a.h.goBackground(f) }
func (a shardHost) Close()                                  { a.h.Close() }
func (a shardHost) GroupTableChanged()                      { a.h.table.Changed() }
func (a shardHost) OwnGroupsOnly() bool                     { return a.h.own() }
func (a shardHost) Voters(r *Replica) map[uint64]string     { return a.h.peers.refresh(r) }
func (a shardHost) RestoredMembers(name string, members map[uint64]string) map[uint64]string {
	return restoredMembers(a.h.restored, name, members)
}
func (a shardHost) MovedOff(r *Replica) bool {
	e, ok := a.h.table.Entry(r)
	return ok && slices.Contains(e.Removed, a.h.cfg.ReplicaID)
}

// replaced returns, for a call on g that failed because the group's Group
// here was replaced (a mirror stopped unused, a shard whose voters moved
// off this host, a mirror whose group now runs here), the group's Group
// now; nil for any other failure. The call is then made again there, the
// same command: the group applies it at most once. Shard and mirror share
// this one retry of a replacement.
func (h *Host) replaced(ctx context.Context, g Group, err error) Group {
	if err == nil || !errors.Is(err, mirror.ErrIdle) && !errors.Is(err, shard.ErrMovedOff) && !errors.Is(err, shard.ErrMovedHere) {
		return nil
	}
	g2, lerr := h.Lookup(ctx, g.Name())
	if lerr != nil || g2 == g {
		return nil
	}
	return g2
}

// leaderListener receives Dragonboat's leader updates for every shard of
// the host; it runs on a Dragonboat goroutine and must not block.
type leaderListener struct{ h *Host }

func (l leaderListener) LeaderUpdated(info raftio.LeaderInfo) {
	r := l.h.byShard(info.ShardID)
	if r == nil {
		return
	}
	if r.LeaderUpdated(info) {
		l.h.leadersChanged()
	}
}

// screen drops, from a batch received from a peer, the messages of groups
// whose replica here refused to take part, and refuses a group on a
// heartbeat that proves its log lost acknowledged entries (package shard's
// oldcopy.go says why: Shard.Refuse). It returns the messages to deliver;
// ok is false if it dropped any.
func (h *Host) screen(b pb.MessageBatch) (_ pb.MessageBatch, ok bool) {
	store := h.store.Load()
	if store == nil {
		return b, true
	}
	keep := -1 // messages kept so far, once one was dropped
	for i := range b.Requests {
		m := &b.Requests[i]
		drop := false
		if r := h.byShard(m.ShardID); r != nil && m.To == h.cfg.ReplicaID {
			if r.Refused() != nil {
				drop = true
			} else if m.Type == pb.Heartbeat {
				if last, known := store.LastIndex(m.ShardID, m.To); known && m.Commit > last {
					r.Refuse(m.From, m.Commit, last)
					drop = true
				}
			}
		}
		switch {
		case drop && keep < 0:
			keep = i
		case !drop && keep >= 0:
			b.Requests[keep] = *m
			keep++
		}
	}
	if keep < 0 {
		return b, true
	}
	b.Requests = b.Requests[:keep]
	return b, false
}

// stopShard stops the shard unless the NodeHost is closing.
func (h *Host) stopShard(shard uint64) error {
	h.nhMu.RLock()
	defer h.nhMu.RUnlock()
	if h.nhClosed {
		return nil
	}
	return h.nh.StopShard(shard)
}

// systemListener receives Dragonboat's system events on its event goroutine,
// for every shard of the host; it must not block.
type systemListener struct{ h *Host }

func (l systemListener) NodeDeleted(info raftio.NodeInfo) {
	if r := l.h.byShard(info.ShardID); r != nil && info.ReplicaID == l.h.cfg.ReplicaID {
		r.RemovedFromGroup()
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
