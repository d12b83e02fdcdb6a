package replica

// The host's side of the group table (package grouptable): the table's
// operations called through the host's exported API, and the host's answers
// to the calls the table makes of it (grouptable.Host, through tableHost).
// The table reaches its host only through those calls. What follows the
// table here (the watcher, starting and stopping groups, the seed) is
// table.go's.

import (
	"context"
	"log/slog"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/grouptable"
)

// ErrTooManyGroups wraps a create refused because the table holds
// fsm.MaxGroups groups already (grouptable.ErrTooManyGroups).
var ErrTooManyGroups = grouptable.ErrTooManyGroups

// GroupTable returns the group table as of a linearizable read of the
// default group: its groups in name order, and whether it was ever set.
// Before it is set, the deployment runs its replicas' Config.Groups.
func (h *Host) GroupTable(ctx context.Context) ([]fsm.GroupEntry, bool, error) {
	return h.table.GroupTable(ctx)
}

// Reachable returns every group a call on this host can name
// (grouptable.Table.Reachable).
func (h *Host) Reachable(ctx context.Context) ([]string, error) { return h.table.Reachable(ctx) }

// CreateGroup adds group name with voters to the table, and returns once
// this host runs it (the root's CreateGroup documents the contract).
func (h *Host) CreateGroup(ctx context.Context, name string, voters []uint64) error {
	return h.table.CreateGroup(ctx, name, voters)
}

// DropGroup removes group name from the table, and returns once it no
// longer runs on this host (the root's DropGroup documents the contract).
func (h *Host) DropGroup(ctx context.Context, name string, force bool) error {
	return h.table.DropGroup(ctx, name, force)
}

// SetVoters makes voters group name's voters in the table, and returns once
// the group's raft membership has moved to them (the root's SetVoters
// documents the contract).
func (h *Host) SetVoters(ctx context.Context, name string, voters []uint64) error {
	return h.table.SetVoters(ctx, name, voters)
}

// ReplaceReplica moves every group off replica old onto replica new, then
// removes old from the deployment (the root's ReplaceReplica documents the
// contract).
func (h *Host) ReplaceReplica(ctx context.Context, old, new uint64) error {
	return h.table.ReplaceReplica(ctx, old, new)
}

// readTable reads the table linearizably.
func (h *Host) readTable(ctx context.Context) (grouptable.View, error) {
	return grouptable.Read(ctx, h.groups()[0])
}

// tableHost is the host as the group table sees it (grouptable.Host): the
// calls below, and no more.
type tableHost struct{ h *Host }

func (a tableHost) DefaultGroup() *Replica                       { return a.h.groups()[0] }
func (a tableHost) Running(name string) *Replica                 { return a.h.running(name) }
func (a tableHost) Names() []string                              { return a.h.Groups() }
func (a tableHost) ReplicaID() uint64                            { return a.h.cfg.ReplicaID }
func (a tableHost) Logger() *slog.Logger                         { return a.h.log }
func (a tableHost) OwnGroupsOnly() bool                          { return a.h.own() }
func (a tableHost) Closed() <-chan struct{}                      { return a.h.closed }
func (a tableHost) Shards() []*Replica                           { return a.h.groups() }
func (a tableHost) StartGroup(e fsm.GroupEntry)                  { a.h.startGroup(e) }
func (a tableHost) StopGroup(r *Replica, why error, mirror bool) { a.h.stopGroup(r, why, mirror) }
func (a tableHost) FollowMirrors(v grouptable.View)              { a.h.followMirrors(v) }
func (a tableHost) LeadersChanged()                              { a.h.leadersChanged() }
func (a tableHost) CanCall() bool                                { return a.h.calls != nil }
func (a tableHost) ProposalTimeout() time.Duration               { return a.h.cfg.ProposalTimeout }
func (a tableHost) AckedLately(shard, id uint64) bool {
	return a.h.prog.ackedWithin(shard, id, a.h.freshness())
}
func (a tableHost) AckedIndex(shard, id uint64) uint64                     { return a.h.prog.index(shard, id) }
func (a tableHost) Live(id uint64) bool                                    { return a.h.live(id) }
func (a tableHost) SeedSpecs(ctx context.Context) ([]fsm.GroupSpec, error) { return a.h.seedSpecs(ctx) }
func (a tableHost) MembersRemote(ctx context.Context, name string, shard uint64, ask []uint64) (Membership, error) {
	return a.h.membersRemote(ctx, name, shard, ask)
}

// KeepFollowing keeps in Dir that this host's groups are the table's from
// now on (the groups file's marker, groups.go).
func (a tableHost) KeepFollowing() error {
	a.h.setMu.Lock()
	defer a.h.setMu.Unlock()
	return a.h.updateGroupsFile(func(f *groupsFile) { f.Table = true })
}

// ConfigGroups are Config.Groups, each's name and voters as configured.
func (a tableHost) ConfigGroups() []fsm.GroupSpec {
	out := make([]fsm.GroupSpec, 0, len(a.h.cfg.Groups))
	for _, gc := range a.h.cfg.Groups {
		out = append(out, fsm.GroupSpec{Name: gc.Name, Voters: gc.Voters})
	}
	return out
}
