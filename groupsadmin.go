package fencelock

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/internal/replica"
)

// GroupInfo is one named group of the deployment's group table.
type GroupInfo struct {
	Name string
	// Voters are the voters the table gives the group, in increasing
	// order. After SetVoters the group's raft membership moves to them one
	// change at a time; MembersOf shows where it is.
	Voters []uint64
	// Removed are the replica IDs SetVoters took off the group, in
	// increasing order: they never run it again.
	Removed []uint64
	// ShardID is the group's raft shard ID: derived from the name for a
	// group of Config.Groups, drawn at random for one CreateGroup made, so
	// that a group created again under a dropped group's name is another
	// raft group.
	ShardID uint64
}

// Groups returns the deployment's named groups, in name order, as a
// linearizable read of the group table (held by the default group, so it
// needs the default group's quorum). Before the table is set (a deployment
// whose replicas' versions predate it, not all upgraded yet), it returns
// the groups this replica runs from its Config.Groups.
func (n *Node) Groups(ctx context.Context) ([]GroupInfo, error) {
	entries, set, err := n.host.GroupTable(ctx)
	if err != nil {
		return nil, err
	}
	var out []GroupInfo
	if !set {
		for _, r := range n.host.Replicas()[1:] {
			out = append(out, GroupInfo{Name: r.Name(), Voters: r.ConfiguredVoters(), ShardID: r.ShardID()})
		}
		return out, nil
	}
	for _, e := range entries {
		out = append(out, GroupInfo{Name: e.Name, Voters: e.Voters, Removed: e.Removed, ShardID: e.Shard})
	}
	return out, nil
}

// CreateGroup adds a named group to the running deployment, with no
// restart: the default group records it in the group table, and every
// replica starts it as soon as it applies the change (as a voter where
// g.Voters names it, else non-voting). It returns once this replica runs
// the group; its voters elect a leader within a few election timeouts, and
// calls naming "...@"+g.Name wait for that as they wait for any leader. A
// replica that has not applied the change yet answers ErrUnknownGroup for
// a moment. Readiness (Ready, /readyz) never waits for a new group.
//
// g.Name is 1 to 32 of [a-z0-9-] (else ErrInvalidGroupName); g.Voters are
// 1, 3 or 5 distinct members of the deployment (voting or not in the
// default group: add a new host with AddNonVoting first), else
// ErrInvalidVoters. A name the table has is ErrGroupExists. The call is
// safe to retry: a retry after an answer lost to a leader change applies
// once (and then finds ErrGroupExists, as any later create would).
func (n *Node) CreateGroup(ctx context.Context, g GroupConfig) error {
	err := n.host.CreateGroup(ctx, g.Name, g.Voters)
	if errors.Is(err, replica.ErrTooManyGroups) {
		return fmt.Errorf("%w: %w", ErrLimitExceeded, err)
	}
	return err
}

// DropOption changes what DropGroup does.
type DropOption func(*dropOptions)

type dropOptions struct{ force bool }

// ForceDrop drops a group that holds locks: once the group is sealed (see
// DropGroup), its locks and leaderships are revoked (their grants end with
// ErrRevoked); then the group is dropped.
func ForceDrop() DropOption { return func(o *dropOptions) { o.force = true } }

// DropGroup removes a named group from the running deployment, with no
// restart: the default group removes it from the group table, and every
// replica stops it and deletes its raft data as soon as it applies the
// change. It returns once this replica no longer runs the group; calls
// naming the group then fail with ErrUnknownGroup, and those in flight, and
// the group's parts of this replica's sessions, with ErrGroupDropped.
//
// A group that holds a lock or a leadership is refused with
// ErrGroupHoldsLocks, unless ForceDrop is given; nothing changes then. A
// drop grants nothing: it first seals the group, which withdraws the
// group's queued requests and candidacies, and from then on the group
// answers every Acquire and Campaign, new or retried, with
// ErrGroupDropped and grants nothing, whether or not the drop itself ever
// applies. The waiting calls end with ErrGroupDropped at once. A lock
// granted between the check for locks and the seal (without ForceDrop)
// ends with the group, with its Done (ErrGroupDropped), never by a silent
// loss. In a group whose gate is below log version 11 (a rolling upgrade
// not finished), which cannot be sealed, the queued requests are withdrawn
// with the older commands and their calls end when the drop applies; a
// call that asks the group in the moment before the drop ends with the
// group. A group
// not in the table is ErrUnknownGroup. Call it on a replica that runs the
// group (every replica does but those SetVoters moved it off: ErrGroupMoved).
func (n *Node) DropGroup(ctx context.Context, name string, opts ...DropOption) error {
	var o dropOptions
	for _, opt := range opts {
		opt(&o)
	}
	return n.host.DropGroup(ctx, name, o.force)
}

// SetVoters gives a named group other voters, with no restart, keeping its
// quorum throughout: the group table records them at once, and the group's
// leader moves its raft membership one change at a time: each new voter
// is added as a non-voting replica (every replica of the deployment is one
// already), promoted once it has caught up, and only when every new voter
// votes are the old voters removed. SetVoters returns once the group's
// voters are exactly voters (or, called on a replica the move takes off
// the group, once that replica was removed, which comes after every new
// voter votes). If ctx ends first the move goes on without the call
// (ErrUnavailable and ctx's error); MembersOf shows where it is.
//
// While a new voter catches up the group needs a quorum of its old voters
// and, from its promotion until the old voter's removal, of both: a group
// moving off a dead voter stays available as long as the others and the
// new voter run.
//
// A replica taken off a group stops running it for good (a removed raft
// ID never comes back): its sessions' parts there end with ErrGroupMoved,
// and its calls naming the group fail, until placement lets a replica
// reach a group it does not run. voters are 1, 3 or 5 distinct members of
// the deployment, none taken off the group before (else ErrInvalidVoters);
// a group not in the table is ErrUnknownGroup. It is idempotent.
func (n *Node) SetVoters(ctx context.Context, group string, voters []uint64) error {
	return n.host.SetVoters(ctx, group, voters)
}

// ReplaceReplica moves every group off replica old onto replica new: each
// named group old votes in gets new in its place (SetVoters, one group
// after the other), then, in the default group, new is promoted to voter
// if old was one, and old is removed from the deployment for good
// (RemoveReplica). It is the replacement of a dead host in one call: add
// the new host with AddNonVoting and start it (Config{Join: true}) first;
// new must be a member of the deployment (else ErrInvalidVoters). Every
// group keeps its quorum throughout as long as its other voters and new
// run. A call that failed part way can be repeated: what is done is done.
func (n *Node) ReplaceReplica(ctx context.Context, old, new uint64) error {
	return n.host.ReplaceReplica(ctx, old, new)
}
