package fencelock

import (
	"fmt"

	"github.com/fencelock/fencelock/internal/replica"
)

// Placement is which named groups a replica runs a raft replica (a shard)
// of; see Config.Placement.
type Placement uint8

const (
	// PlaceEveryGroup, the default, runs every named group on this
	// replica: as a voter where the group's voters name it, else as a
	// non-voting replica, which stores and applies the group's log. A
	// session here proposes and reads every group locally and hears its
	// events locally; each group's log costs this replica its disk, CPU
	// and memory whether or not its sessions use the group.
	PlaceEveryGroup Placement = iota
	// PlaceOwnGroups runs a named group only where this replica is one of
	// its voters (the default group runs everywhere). A session here
	// reaches any other group through a replica that runs it: a mirror of
	// the group, fed over the replicas' own connections (the raft port,
	// its TLS and handshake), carries its proposals and its linearizable
	// reads there, and the group's events back, so locks, leases, grant
	// delivery and views work as with a local replica. Each call on such
	// a group costs a round trip to that replica on top of the group's
	// own; a replica's disk, CPU and memory grow with the groups it votes
	// in, not with all of them. A group's leader never adds such a replica
	// as a non-voting one. When SetVoters moves a group onto this replica,
	// it starts the group's shard (and its sessions move to it); when it
	// moves the group off, the shard stops and its sessions go on through
	// a mirror.
	PlaceOwnGroups
)

func (p Placement) String() string {
	switch p {
	case PlaceEveryGroup:
		return "PlaceEveryGroup"
	case PlaceOwnGroups:
		return "PlaceOwnGroups"
	}
	return fmt.Sprintf("Placement(%d)", uint8(p))
}

// replicaPlacement is p for internal/replica; p must be valid.
func (p Placement) replicaPlacement() replica.Placement {
	if p == PlaceOwnGroups {
		return replica.PlaceOwn
	}
	return replica.PlaceEvery
}

// checkPlacement refuses an unknown Placement.
func (c *Config) checkPlacement() error {
	if c.Placement != PlaceEveryGroup && c.Placement != PlaceOwnGroups {
		return fmt.Errorf("%w: Placement %d is neither PlaceEveryGroup nor PlaceOwnGroups", ErrInvalidConfig, uint8(c.Placement))
	}
	return nil
}
