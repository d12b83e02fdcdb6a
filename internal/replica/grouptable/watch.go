package grouptable

// The group table (internal/fsm/grouptable.go) in the default group's
// state says which named groups the deployment runs, with their voters.
// Every host watches it: the default group's apply nudges the watcher when
// a table command applied (or a snapshot replaced the state), and the
// watcher, after a linearizable read of the table (so that it never acts on
// a state replayed only part way), starts the groups the host does not run
// yet and stops, for good, those the table dropped, without a restart.
//
// Until the table is set, a host runs the groups of its Config.Groups (the
// way of versions before the table), and proposes a Seed of them: the first
// seed applied sets the table, any later one changes nothing, so a replica
// started with another Config.Groups never makes a second table. Once this
// host has seen the table set, it keeps a marker in Dir (KeepFollowing): from
// then on its groups are the table's, and a Config.Groups that differs is
// logged, never obeyed.
//
// A group's voters move to the table's one change at a time, on the
// group's leader (MoveVoters, voters.go, from the host's reconcile): a new voter is added as a
// non-voting replica (every host of the deployment is one already), is
// promoted once it has caught up, and only when every new voter votes are
// the old ones removed, each only after the table, read again, still
// removes it: a removed replica ID can never come back.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/shard"
	"github.com/fencelock/fencelock/lockapi"
)

// Timing of the watcher: a table change nudges it at once; it reads the
// table again every tableRefresh anyway (a nudge lost to a read that
// failed, a start that failed), and sooner while a seed is pending or the
// last read failed.
const (
	tableRefresh   = 5 * time.Second
	tableRetry     = time.Second
	tableReadLimit = 10 * time.Second
)

// Watch is the host's watcher of the group table; it returns when the
// host closes.
func (t *Table) Watch() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-t.h.Closed()
		cancel()
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-t.h.Closed():
			return
		case <-t.nudge:
		case <-timer.C:
		}
		next := tableRefresh
		if !t.refreshTable(ctx) {
			next = tableRetry
		}
		timer.Reset(next)
	}
}

// refreshTable reads the table and acts on it; false means it should be
// tried again soon.
func (t *Table) refreshTable(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, tableReadLimit)
	defer cancel()
	v, err := t.read(rctx)
	if err != nil {
		t.h.Logger().Debug("fencelock: reading the group table failed; retried", "err", err)
		return false
	}
	if !v.Set {
		return t.seed(rctx)
	}
	t.followTable(ctx, v)
	return true
}

// followTable makes the groups this host runs the table's v.
func (t *Table) followTable(ctx context.Context, v View) {
	if !t.mode.Load() {
		err := t.h.KeepFollowing()
		if err != nil {
			t.h.Logger().Warn("fencelock: cannot keep in Dir that this replica follows the group table; retried", "err", err)
			return
		}
		t.mode.Store(true)
		t.h.Logger().Info("fencelock: the deployment's named groups are the group table's from now on; Config.Groups only seeded it", "groups", len(v.Groups))
	}
	t.cur.Store(&v)
	t.logConfigDiff(v)
	for _, r := range t.h.Shards()[1:] {
		e, ok := v.Find(r.Name())
		switch {
		case !ok || e.Shard != r.ShardID():
			t.h.StopGroup(r, fmt.Errorf("%w: %q", lockapi.ErrGroupDropped, r.Name()), false)
		case t.h.OwnGroupsOnly() && slices.Contains(e.Removed, t.h.ReplicaID()) && (r.Ops.Removed.Load() || removedUnheard(r) || t.removalConfirmed(ctx, r, e)):
			t.h.StopGroup(r, shard.MovedOff(r.Name()), true)
		case slices.Contains(e.Removed, t.h.ReplicaID()) && (r.Ops.Removed.Load() || t.removalConfirmed(ctx, r, e)):
			t.h.StopGroup(r, fmt.Errorf("%w: %q no longer runs on replica %d: SetVoters moved its voters off it", lockapi.ErrGroupMoved, r.Name(), t.h.ReplicaID()), false)
		default:
			r.SetVoters(e.Voters)
		}
	}
	t.h.FollowMirrors(v)
	for _, e := range v.Groups {
		if t.h.Running(e.Name) == nil && !slices.Contains(e.Removed, t.h.ReplicaID()) {
			if t.h.OwnGroupsOnly() && !slices.Contains(e.Voters, t.h.ReplicaID()) {
				continue // reached through a mirror, when used
			}
			t.h.StartGroup(e)
		}
	}
	t.h.LeadersChanged() // the group leaders' reconcile moves the voters
}

// removedUnheard reports whether r, whose voters the table moved off this
// host, has heard no leader for a long while: a replica the leader removed
// may never learn of it (the entry that removes it commits without it),
// and a host that runs only its own groups then reaches the group through
// a mirror instead of a shard that no longer hears it.
func removedUnheard(r *shard.Shard) bool {
	since := r.LeaderlessSince()
	return since != 0 && time.Since(time.Unix(0, since)) > 2*r.Patience()
}

// removalConfirmed reports whether one of the group's voters (table
// entry e's) reads, linearizably, this replica removed from r's group: a
// replica removed while it was down, or cut off, never hears of it from
// the group (the entry that removes it commits without it, and its
// messages are dropped), under any placement, and would run a group
// without a leader for good. It asks only once r has had no leader for an
// election timeout (a replica that hears its leader learns of its removal
// by applying it), and only the group can say: a replica that the table
// removes but raft has not removed yet (the leader removes it once the new
// voters vote) may still count for the group's quorum, and must not stop.
func (t *Table) removalConfirmed(ctx context.Context, r *shard.Shard, e fsm.GroupEntry) bool {
	since := r.LeaderlessSince()
	if since == 0 || time.Since(time.Unix(0, since)) < r.ElectionTimeout() || !t.h.CanCall() {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*t.h.ProposalTimeout())
	defer cancel()
	ask := slices.DeleteFunc(slices.Clone(e.Voters), func(id uint64) bool { return id == t.h.ReplicaID() })
	m, err := t.h.MembersRemote(ctx, r.Name(), r.ShardID(), ask)
	if err != nil {
		r.Logger().Debug("fencelock: the group table removes this replica from the group, and no voter confirmed it yet; asked again", "err", err)
		return false
	}
	return slices.Contains(m.Removed, t.h.ReplicaID())
}

// logConfigDiff logs, once per difference, how this host's Config.Groups
// differs from the table, which rules.
func (t *Table) logConfigDiff(v View) {
	configGroups := t.h.ConfigGroups()
	var parts []string
	for _, gc := range configGroups {
		e, ok := v.Find(gc.Name)
		voters := slices.Sorted(slices.Values(gc.Voters))
		switch {
		case !ok:
			parts = append(parts, fmt.Sprintf("%s: in Config.Groups, not in the table", gc.Name))
		case !slices.Equal(voters, e.Voters):
			parts = append(parts, fmt.Sprintf("%s: voters %v in Config.Groups, %v in the table", gc.Name, voters, e.Voters))
		}
	}
	for _, e := range v.Groups {
		if !slices.ContainsFunc(configGroups, func(gc fsm.GroupSpec) bool { return gc.Name == e.Name }) {
			parts = append(parts, fmt.Sprintf("%s: in the table, not in Config.Groups", e.Name))
		}
	}
	diff := strings.Join(parts, "; ")
	t.mu.Lock()
	defer t.mu.Unlock()
	if diff == t.diff {
		return
	}
	t.diff = diff
	if diff != "" && len(configGroups) > 0 {
		t.h.Logger().Warn("fencelock: Config.Groups differs from the deployment's group table, which rules (change groups with CreateGroup, DropGroup and SetVoters)",
			"differences", diff)
	}
}

// seed proposes, once, that the table be this host's Config.Groups, if it
// has any and does not follow the table yet; false means it should be
// tried again soon.
func (t *Table) seed(ctx context.Context) bool {
	t.mu.Lock()
	done := t.seedDone || t.mode.Load() || len(t.h.ConfigGroups()) == 0
	if t.seedOp == 0 {
		t.seedOp = NewOpID()
	}
	op := t.seedOp
	t.mu.Unlock()
	if done {
		return true
	}
	specs, err := t.h.SeedSpecs(ctx)
	if err != nil {
		t.h.Logger().Warn("fencelock: cannot seed the group table from Config.Groups; retried", "err", err)
		return false
	}
	res, err := t.h.DefaultGroup().Propose(ctx, fsm.Command{Kind: fsm.KindGroupSeed, Op: op, Groups: specs})
	if err != nil {
		t.h.Logger().Debug("fencelock: seeding the group table failed; retried", "err", err)
		return false
	}
	t.mu.Lock()
	t.seedDone = true
	t.mu.Unlock()
	switch res.Status {
	case fsm.OK:
		t.h.Logger().Info("fencelock: group table seeded from Config.Groups", "groups", len(specs))
	case fsm.NotApplied: // another replica's seed, or a create, came first
	default:
		t.h.Logger().Warn("fencelock: the group table refused this replica's Config.Groups as its seed", "status", res.Status, "value", res.Value)
	}
	t.Changed()
	return true
}
