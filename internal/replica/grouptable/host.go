package grouptable

import (
	"context"
	"log/slog"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/shard"
	"github.com/fencelock/fencelock/internal/replica/wire"
)

// Host is what the group table asks of the host it runs on, and no more:
// the table reaches its host through these calls, not through the host's
// fields.
type Host interface {
	// DefaultGroup is the default group's shard here, which holds the
	// table; Running is this host's shard of group name, nil if it runs
	// none; Names every group this host runs, the default group ("")
	// first, then in name order (Host.Groups).
	DefaultGroup() *shard.Shard
	Running(name string) *shard.Shard
	Names() []string
	// ReplicaID is this host's replica ID; Logger its logger.
	ReplicaID() uint64
	Logger() *slog.Logger
	// FollowsTable reports whether this host runs the table's groups (it
	// has seen the table set); OwnGroupsOnly whether it runs only its own
	// groups (PlaceOwnGroups), reaching the others through a mirror.
	FollowsTable() bool
	OwnGroupsOnly() bool
	// Closed is closed once the host's Close has begun.
	Closed() <-chan struct{}
	// TableChanged wakes the host's watcher of the table.
	TableChanged()
	// SeedSpecs are this host's Config.Groups as the table's seed.
	SeedSpecs(ctx context.Context) ([]fsm.GroupSpec, error)
	// MembersRemote reads group name's (on shard) membership at one of
	// ask, for a host that does not run the group.
	MembersRemote(ctx context.Context, name string, shard uint64, ask []uint64) (wire.Membership, error)
	// AckedLately reports whether replica id answered this host's leader
	// of shard lately (an append or a heartbeat); AckedIndex is how far
	// it acknowledged the shard's log.
	AckedLately(shard, id uint64) bool
	AckedIndex(shard, id uint64) uint64
	// Live reports whether a group may be handed to replica id (the
	// balancer's test: heard from lately, and settled).
	Live(id uint64) bool
}
