package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/replica"
)

// Membership is a group's membership as of a linearizable read.
type Membership struct {
	Group     string            // the group described; "" for the default group
	Voters    map[uint64]string // voting replicas: ID -> raft address
	NonVoting map[uint64]string // non-voting replicas: ID -> raft address
	// Removed lists, in increasing order, the IDs removed from the group.
	// They can never be used again.
	Removed []uint64
	// ConfigChangeIndex is the raft log index of the last applied membership
	// change: it rises with every change.
	ConfigChangeIndex uint64
}

// Members returns the default group's membership: the deployment's
// replicas. A named group's voters are the group table's (SetVoters), and
// every other member of the deployment runs it non-voting. It is a
// linearizable read: it reflects every change completed before it began. On a replica that is
// catching up it returns once the replica has caught up to that point.
func (n *Node) Members(ctx context.Context) (Membership, error) {
	return n.MembersOf(ctx, "")
}

// MembersOf returns group's membership ("" is the default group, as
// Members): a named group's Voters are the group table's voters once
// SetVoters' moves are done, and its NonVoting the deployment's other
// replicas once that group's leader added them. It is a linearizable read
// of that group, so it needs that group's quorum, not the default group's;
// on a replica that does not run the group (PlaceOwnGroups), it is read at
// one of the group's voters, and fails with ErrUnavailable, naming each,
// if none answers. A group this deployment does not run fails with
// ErrUnknownGroup.
func (n *Node) MembersOf(ctx context.Context, group string) (Membership, error) {
	m, err := n.h.Members(ctx, group)
	if err != nil {
		return Membership{}, err
	}
	out := toMembership(m)
	out.Group = group
	return out, nil
}

func toMembership(m replica.Membership) Membership {
	return Membership{Voters: m.Voters, NonVoting: m.NonVoting, Removed: m.Removed, ConfigChangeIndex: m.ConfigChangeIndex}
}

// AddReplica makes replica id, reachable at addr, a voting member. A new ID
// is first added as a non-voting replica, then promoted; an ID that is
// already a non-voting replica is promoted (addr must be its address).
// Start the new replica with Config{Join: true}: it runs every named group
// of the group table as a non-voting replica, which each group's leader
// adds once the replica is a member of the default group. To make it a
// voter of named groups too, use SetVoters, or ReplaceReplica to take a
// dead replica's place in every group at once.
//
// A voter that has not caught up counts toward the quorum without being able
// to acknowledge anything. When the group is already short of a replica
// (replacing a dead host), add the new one with AddNonVoting, start it, wait
// until it has caught up (Members on it returns), and only then call
// AddReplica: the group stays available throughout.
//
// Membership changes are applied one at a time: AddReplica retries while
// another change is in progress, until ctx ends. It is idempotent: adding a
// voter that already has this ID and address returns nil. An ID that was
// removed is refused with ErrIDRemoved; an ID or address already used
// otherwise, with ErrMembership.
func (n *Node) AddReplica(ctx context.Context, id uint64, addr string) error {
	return n.r.AddReplica(ctx, id, addr)
}

// AddNonVoting adds replica id, reachable at addr, as a non-voting member:
// it receives and applies the log like every replica, so the sessions of its
// process get the same API and guarantees, but it neither votes nor counts
// toward the quorum. Use it to run many application instances against a
// group of 3 or 5 voters. Start the new replica with Config{Join: true}.
//
// Like AddReplica, it retries while another change is in progress, is
// idempotent, and refuses a removed ID with ErrIDRemoved. A voter cannot be
// made non-voting: remove it instead (ErrMembership).
func (n *Node) AddNonVoting(ctx context.Context, id uint64, addr string) error {
	return n.r.AddNonVoting(ctx, id, addr)
}

// RemoveReplica removes replica id, voting or not, from the default group
// for good: its ID can never be used again. Each named group's leader then
// removes it from the group where it runs non-voting; a voter of a named
// group stays one until SetVoters moves the group off it (ReplaceReplica
// does both). The removed replica stops taking part at
// once; if it is still running, its sessions end and its calls fail with
// ErrRemoved, and its process should Close it and delete its Dir.
//
// Removing a voter shrinks the quorum: remove a dead voter only after its
// replacement has been added (see AddReplica). The last voter cannot be
// removed (ErrMembership). RemoveReplica is idempotent: removing an ID that
// was removed returns nil; an ID that never was a member is ErrMembership.
func (n *Node) RemoveReplica(ctx context.Context, id uint64) error {
	return n.r.RemoveReplica(ctx, id)
}
