package shard

import (
	"context"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Host is what a shard asks of the host it runs on, and no more (the host
// is its one maker): the shard reaches its host through these calls, not
// through the host's fields.
type Host interface {
	// Replaced is the group's maker now, if a call on s failed because s
	// was replaced (its voters moved off this host), else nil.
	Replaced(ctx context.Context, s *Shard, err error) Group
	// Reached reports whether replica id was heard from within d.
	Reached(id uint64, d time.Duration) bool
	// PeerReads is what replica id last announced it reads, if it was
	// heard from; Reads what this host announces.
	PeerReads(id uint64) (fsm.Gate, bool)
	Reads() fsm.Gate
	// RefuseOldBuilds marks the host's Dir against builds from before the
	// version gate; KeepGate records in it that group name writes g.
	RefuseOldBuilds() error
	KeepGate(name string, g fsm.Gate) error
	// StopShard stops Dragonboat's shard id unless the NodeHost is closing.
	StopShard(id uint64) error
	// NodeHostInfo is Dragonboat's local view of the membership, nil once
	// the host's Close has begun.
	NodeHostInfo() *dragonboat.NodeHostInfo
	// DefaultGroup is the default group's shard here; DefaultIdentity its
	// bootstrap identity (Shard.Group).
	DefaultGroup() *Shard
	DefaultIdentity() string
	// GoBackground runs f on the host's background work unless it is
	// closing; Close closes the host and every group on it.
	GoBackground(f func()) bool
	Close()
	// GroupTableChanged tells the host that the default group applied an
	// entry or a snapshot that may change the group table.
	GroupTableChanged()
	// MovedOff reports whether the group table moved s's group's voters
	// off this host; OwnGroupsOnly whether this host runs only its own
	// groups (a mirror then takes over from a shard moved off).
	MovedOff(s *Shard) bool
	OwnGroupsOnly() bool
	// Voters reads s's voters as applied here, nil if unknown.
	Voters(s *Shard) map[uint64]string
	// RestoredMembers is the members map s starts with given its
	// bootstrap members: none for a group imported into this Dir.
	RestoredMembers(name string, members map[uint64]string) map[uint64]string
}

// Group is what a call on a shard that was replaced is made again on: the
// group's maker now (a mirror, once the shard's voters moved off).
type Group interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Read(ctx context.Context, q fsm.Query) (any, error)
	StaleRead(q fsm.Query) (any, error)
}
