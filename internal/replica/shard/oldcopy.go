package shard

import (
	"fmt"

	"github.com/fencelock/fencelock/lockapi"
)

// A replica whose Dir is an older copy of itself (an operator copied back
// yesterday's Dir, a volume was restored from a snapshot, a disk lost
// writes it had acknowledged) has forgotten entries it acknowledged and
// votes it cast: entries its group counted as committed with its
// acknowledgement. Let back in, it could vote for a candidate that lacks
// them, or make a quorum without them, and a grant would be made twice with
// the same token. Its Dir ID is the same (it is a copy), so the Dir ID
// check (package datadir) cannot tell.
//
// Raft can tell, if its leader remembers: a leader's heartbeat carries the
// commit index capped at what the follower acknowledged (Dragonboat sends
// min(match, committed)), and an intact log always reaches what it
// acknowledged. A heartbeat whose commit index is beyond this replica's log
// is proof that the log lost acknowledged entries. (Dragonboat itself
// panics on it, "invalid commitTo index", taking the whole process down.)
// The host's screen (internal/replica) catches it before Dragonboat sees
// the message, and calls Refuse: the group's replica here stops taking part
// (every message of the group is dropped from then on, and its shard is
// stopped), and every call on it fails with an error wrapping
// ErrInvalidConfig that says so.
//
// What it cannot catch: a leader that does not remember what the replica
// acknowledged (the leader changed or restarted while the replica was
// down, so the leader's progress for it starts again at zero), and an older
// copy that the group never saw acknowledge anything beyond it. Those
// replicas catch up from the leader like a replica that was down for a
// while; what they forgot is their vote in past terms, which raft's
// election rule (a candidate must have every committed entry) mostly, but
// not always, makes harmless. The issue-level answer is not to restore a
// single replica's Dir from a copy at all: replace it (remove its ID, add a
// new one with an empty Dir), or restore the whole deployment from a backup
// (fencelock snapshot restore) into new Dirs.

// Refuse makes the group's replica here stop taking part: its log lost
// entries it acknowledged (see above): the group's leader leader counts
// entries up to acked as acknowledged, and the log here ends at last. It
// is called on the transport's receive path, so the shard is stopped in
// the background.
func (r *Shard) Refuse(leader, acked, last uint64) {
	err := fmt.Errorf("%w: %s: this replica's Dir is an older copy of itself (copied back, restored from a snapshot of the volume, or on a disk that lost writes): "+
		"replica %d, the group's leader, counts entries up to index %d as acknowledged by this replica, and its log ends at %d here. "+
		"It stopped taking part in the group, so that it neither votes nor acknowledges with the entries it lost. "+
		"Do not start it on this Dir again: remove replica %d from the group and add a replacement under a new ID with an empty Dir "+
		"(docs/operations.md, \"Replacing a host\"), or restore the whole deployment from a backup into new Dirs",
		lockapi.ErrInvalidConfig, GroupLabel(r.Name()), leader, acked, last, r.cfg.ReplicaID)
	if !r.refused.CompareAndSwap(nil, &err) {
		return
	}
	r.Logger().Error("fencelock: " + err.Error())
	go func() {
		// The Host's Close may be stopping it too; either way it stops,
		// once no read of its state machine is in flight (calls.go).
		r.calls.close()
		_ = r.host.StopShard(r.ShardID())
	}()
}

// Refused returns why the group's replica here stopped taking part (its
// Dir is an older copy of itself), or nil.
func (r *Shard) Refused() error {
	if e := r.refused.Load(); e != nil {
		return *e
	}
	return nil
}

// GroupLabel is "the default group" or `group "name"`.
func GroupLabel(name string) string {
	if name == "" {
		return "the default group"
	}
	return fmt.Sprintf("group %q", name)
}
