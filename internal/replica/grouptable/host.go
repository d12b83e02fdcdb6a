package grouptable

import (
	"context"
	"log/slog"
	"time"

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
	// OwnGroupsOnly reports whether this host runs only its own groups
	// (PlaceOwnGroups), reaching the others through a mirror.
	OwnGroupsOnly() bool
	// Closed is closed once the host's Close has begun.
	Closed() <-chan struct{}
	// Shards is every shard this host runs, the default group's first.
	Shards() []*shard.Shard
	// StartGroup starts this host's replica of table entry e, unless it
	// runs it already or its start failed a moment ago; StopGroup stops
	// s for good, with why, and with mirror a mirror takes over from it.
	StartGroup(e fsm.GroupEntry)
	StopGroup(s *shard.Shard, why error, mirror bool)
	// FollowMirrors stops the mirrors of groups table v dropped and gives
	// the others v's voters.
	FollowMirrors(v View)
	// KeepFollowing keeps in the host's Dir that its groups follow the
	// table from now on.
	KeepFollowing() error
	// LeadersChanged tells the host's leaders to reconcile their groups'
	// voters with the table (MoveVoters).
	LeadersChanged()
	// ConfigGroups are this host's Config.Groups, each's name and voters
	// as configured; SeedSpecs the same as the table's seed.
	ConfigGroups() []fsm.GroupSpec
	SeedSpecs(ctx context.Context) ([]fsm.GroupSpec, error)
	// CanCall reports whether this host's transport carries calls to
	// other replicas (MembersRemote); ProposalTimeout is its
	// Config.ProposalTimeout.
	CanCall() bool
	ProposalTimeout() time.Duration
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
