package grouptable

// The group table's operations: create, drop and re-vote a named group,
// and move every group off a replica. Each proposes its change to the
// default group (any replica takes it: a proposal is forwarded to the
// leader), with an operation ID that makes its retries apply once, and
// then waits until the change is in place as far as this host can see:
// the group runs here (create), no longer runs here (drop), or its raft
// membership is the table's (set voters).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/shard"
	"github.com/fencelock/fencelock/lockapi"
)

// ErrTooManyGroups wraps a create refused because the table holds
// fsm.MaxGroups groups already.
var ErrTooManyGroups = errors.New("fencelock: too many groups")

// pollEvery is how often an operation looks whether its change is in
// place: the membership and the running groups have no change signal that
// reaches a caller.
const pollEvery = 50 * time.Millisecond

// GroupTable returns the group table as of a linearizable read of the
// default group: its groups in name order, and whether it was ever set.
// Before it is set, the deployment runs its replicas' Config.Groups.
func (t *Table) GroupTable(ctx context.Context) ([]fsm.GroupEntry, bool, error) {
	v, err := t.read(ctx)
	if err != nil {
		return nil, false, err
	}
	return v.Groups, v.Set, nil
}

// Reachable returns every group a call on this host can name: the default
// group first, then in name order the groups it runs and, once the group
// table is set, the table's groups (a linearizable read of the default
// group), which include those a PlaceOwnGroups host reaches through a
// mirror and those created a moment ago that it has not started yet.
func (t *Table) Reachable(ctx context.Context) ([]string, error) {
	names := t.h.Names()
	if !t.FollowsTable() && !t.h.OwnGroupsOnly() {
		return names, nil // before the table: Config.Groups, all run here
	}
	groups, set, err := t.GroupTable(ctx)
	if err != nil {
		return nil, err
	}
	if !set {
		return names, nil
	}
	for _, e := range groups {
		if !slices.Contains(names, e.Name) {
			names = append(names, e.Name)
		}
	}
	slices.Sort(names[1:])
	return names, nil
}

// checkVoters returns voters sorted, or an error wrapping ErrInvalidVoters:
// 1, 3 or 5 distinct non-zero IDs. An even count is refused: it tolerates
// no more failures than the odd count below it, and needs a larger quorum.
func checkVoters(voters []uint64) ([]uint64, error) {
	vs := slices.Sorted(slices.Values(voters))
	switch len(vs) {
	case 1, 3, 5:
	default:
		return nil, fmt.Errorf("%w: %d voters; want 1, 3 or 5 (an even count tolerates no more failures than one fewer)", lockapi.ErrInvalidVoters, len(vs))
	}
	for i, id := range vs {
		if id == 0 {
			return nil, fmt.Errorf("%w: replica ID 0", lockapi.ErrInvalidVoters)
		}
		if i > 0 && vs[i-1] == id {
			return nil, fmt.Errorf("%w: replica %d listed twice", lockapi.ErrInvalidVoters, id)
		}
	}
	return vs, nil
}

// deploymentAddrs returns the default group's members, voting or not, and
// their addresses (a linearizable read).
func (t *Table) deploymentAddrs(ctx context.Context) (map[uint64]string, *dragonboat.Membership, error) {
	m, err := t.h.DefaultGroup().RaftMembership(ctx)
	if err != nil {
		return nil, nil, err
	}
	addrs := make(map[uint64]string, len(m.Nodes)+len(m.NonVotings))
	maps.Copy(addrs, m.NonVotings)
	maps.Copy(addrs, m.Nodes)
	return addrs, m, nil
}

// membersOf checks that every voter is a member of the deployment, and
// returns them with their addresses.
func membersOf(voters []uint64, addrs map[uint64]string) ([]fsm.GroupMember, error) {
	out := make([]fsm.GroupMember, 0, len(voters))
	for _, id := range voters {
		addr, ok := addrs[id]
		if !ok {
			return nil, fmt.Errorf("%w: replica %d is not a member of the deployment (add it first: fencelock members add --id N --addr HOST:PORT, POST /v1/members or Node.AddNonVoting; then start it)", lockapi.ErrInvalidVoters, id)
		}
		out = append(out, fsm.GroupMember{ID: id, Addr: addr})
	}
	return out, nil
}

// ensureTable seeds the table from this host's Config.Groups if it was
// never set, so that a change made before any seed does not make a table
// without the groups the deployment runs.
func (t *Table) ensureTable(ctx context.Context) (View, error) {
	v, err := t.read(ctx)
	if err != nil || v.Set {
		return v, err
	}
	specs, err := t.h.SeedSpecs(ctx)
	if err != nil {
		return v, fmt.Errorf("%w: the group table was never set, and this replica cannot seed it from its Config.Groups: %v", lockapi.ErrInvalidVoters, err)
	}
	if _, err := t.h.DefaultGroup().Propose(ctx, fsm.Command{Kind: fsm.KindGroupSeed, Op: NewOpID(), Groups: specs}); err != nil {
		return v, err
	}
	t.Changed()
	return t.read(ctx)
}

// CreateGroup adds group name with voters to the table, and returns once
// this host runs it (the root's CreateGroup documents the contract).
func (t *Table) CreateGroup(ctx context.Context, name string, voters []uint64) error {
	if !fsm.ValidGroupName(name) {
		return fmt.Errorf("%w: %q: want 1 to %d of [a-z0-9-]", lockapi.ErrInvalidGroupName, shard.Truncate(name, 40), fsm.MaxGroupNameLen)
	}
	vs, err := checkVoters(voters)
	if err != nil {
		return err
	}
	addrs, _, err := t.deploymentAddrs(ctx)
	if err != nil {
		return err
	}
	boot, err := membersOf(vs, addrs)
	if err != nil {
		return err
	}
	v, err := t.ensureTable(ctx)
	if err != nil {
		return err
	}
	if e, ok := v.Find(name); ok {
		return fmt.Errorf("%w: %q, with voters %v", lockapi.ErrGroupExists, name, e.Voters)
	}
	def := t.h.DefaultGroup()
	for range 3 { // a shard ID taken by another group: draw another
		spec := fsm.GroupSpec{Name: name, Shard: newShardID(name), Voters: vs, Bootstrap: boot}
		res, err := def.Propose(ctx, fsm.Command{Kind: fsm.KindGroupCreate, Op: NewOpID(), Groups: []fsm.GroupSpec{spec}})
		if err != nil {
			return err
		}
		switch {
		case res.Status == fsm.OK:
			t.h.Logger().Info("fencelock: group created", "group", name, "voters", vs)
			return t.awaitGroup(ctx, name, func(r *shard.Shard) bool { return r != nil && r.ShardID() == res.Value })
		case res.Status == fsm.Conflict:
			return fmt.Errorf("%w: %q", lockapi.ErrGroupExists, name)
		case res.Status == fsm.LimitExceeded:
			return fmt.Errorf("%w: the deployment has %d groups", ErrTooManyGroups, fsm.MaxGroups)
		case res.Status == fsm.Invalid && res.Value == fsm.GroupShardTaken:
			continue
		default:
			return fmt.Errorf("%w: the group table refused group %q: %v", lockapi.ErrInvalidVoters, name, res.Status)
		}
	}
	return fmt.Errorf("fencelock: create group %q: no free shard ID found", name)
}

// DropGroup removes group name from the table, and returns once it no
// longer runs on this host (the root's DropGroup documents the contract).
// The group is drained first (drain): sealed, which withdraws its queued
// requests and grants nothing more, and, with force, its grants revoked.
func (t *Table) DropGroup(ctx context.Context, name string, force bool) error {
	// A deployment whose table was never set (its gate not raised yet, or
	// just raised) names its Config.Groups: seed them first, as a create
	// does, so that a drop made right after start finds the group.
	v, err := t.ensureTable(ctx)
	if err != nil {
		return err
	}
	e, ok := v.Find(name)
	if !v.Set || !ok {
		return fmt.Errorf("%w: %q is not a group of the table", lockapi.ErrUnknownGroup, shard.Truncate(name, 64))
	}
	r := t.h.Running(name)
	if r == nil || r.ShardID() != e.Shard {
		return fmt.Errorf("%w: %q does not run on replica %d: call DropGroup on a replica that runs it", lockapi.ErrGroupMoved, name, t.h.ReplicaID())
	}
	if err := drain(ctx, r, force); err != nil {
		return err
	}
	res, err := t.h.DefaultGroup().Propose(ctx, fsm.Command{Kind: fsm.KindGroupDrop, Op: NewOpID(), Groups: []fsm.GroupSpec{{Name: name}}})
	if err != nil {
		return err
	}
	if res.Status != fsm.OK || res.Value != e.Shard {
		return fmt.Errorf("%w: %q was dropped by another call", lockapi.ErrUnknownGroup, name)
	}
	t.h.Logger().Info("fencelock: group dropped", "group", name)
	return t.awaitGroup(ctx, name, func(x *shard.Shard) bool { return x != r })
}

// drain empties group r before its drop, granting nothing. Once the
// first linearizable read found no grant (or with force), it seals the
// group (fsm.KindSeal): the seal withdraws every queued request and
// candidacy, whose callers end at once with ErrGroupDropped, and from it
// on every request is answered ErrGroupDropped and nothing is granted, so
// that no grant is made in the dying group whatever its clients do. With
// force, the grants made before the seal are then revoked (ErrRevoked).
// Without force a grant found by the first read refuses the drop,
// changing nothing; one made between that read and the seal ends with
// the group (its holder learns it from its Done: ErrGroupDropped).
//
// A group whose gate is below log version 11 cannot be sealed
// (fsm.ErrVersionGated): it is drained with the older commands instead
// (drainUnsealed), which leaves a call that asks the group in the moment
// before the drop applies to be queued or granted and to end with the
// group.
func drain(ctx context.Context, r *shard.Shard, force bool) error {
	d, err := readDraining(ctx, r)
	if err != nil {
		return err
	}
	if d.held > 0 && !force {
		return fmt.Errorf("%w: group %q holds %s: release or revoke them, or drop it with force", lockapi.ErrGroupHoldsLocks, r.Name(), shard.Plural(d.held, "lock or leadership"))
	}
	res, err := r.Propose(ctx, fsm.Command{Kind: fsm.KindSeal})
	switch {
	case errors.Is(err, fsm.ErrVersionGated):
		return drainUnsealed(ctx, r, force)
	case err != nil:
		return err
	case res.Status != fsm.OK:
		return fmt.Errorf("fencelock: group %q refused its seal: %v", r.Name(), res.Status)
	}
	r.Logger().Info("fencelock: a group being dropped is sealed, its queued requests withdrawn", "group", r.Name(), "withdrawn", res.Value)
	if !force {
		return nil
	}
	// Nothing is granted after the seal: one read finds every grant left.
	if d, err = readDraining(ctx, r); err != nil {
		return err
	}
	if err := proposeDrain(ctx, r, d.cmds); err != nil {
		return err
	}
	r.Logger().Info("fencelock: a sealed group being dropped revoked its grants", "group", r.Name(), "revoked", d.held)
	return nil
}

// draining is what fsm.State.Draining returns.
type draining struct {
	cmds []fsm.Command
	held int
}

// readDraining reads the commands that drain r's group (a linearizable
// read).
func readDraining(ctx context.Context, r *shard.Shard) (draining, error) {
	return read(ctx, r, func(st *fsm.State) draining {
		cmds, held := st.Draining()
		return draining{cmds: cmds, held: held}
	})
}

// proposeDrain proposes cmds (from readDraining) in order, each after the
// one before it applied, a revoke with an operation ID of its own.
func proposeDrain(ctx context.Context, r *shard.Shard, cmds []fsm.Command) error {
	for _, c := range cmds {
		if c.Kind == fsm.KindRevoke {
			c.Op = NewOpID() // applied once across its retries
		}
		if _, err := r.Propose(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// drainUnsealed is drain for a group whose gate is below log version 11,
// which cannot seal: its queued requests and candidacies are withdrawn,
// and then, with force, its grants revoked (fsm.State.Draining has the
// order that keeps a withdrawal or a revoke from granting a queue's head),
// until a linearizable read finds none. Without force a grant found by the
// first read refuses the drop (drain checked it); one made after it ends
// with the group. The withdrawn requests' callers wait on until their
// replica applies the drop, which ends them with ErrGroupDropped; a
// revoked grant ends with ErrRevoked.
//
// Each command is proposed after the one before it applied: a request
// queued meanwhile is found by the next read. Nothing in the group's own
// state says it is dying, so a call that queues or is granted after the
// last read, before the drop applies, ends with the group instead
// (ErrGroupDropped).
func drainUnsealed(ctx context.Context, r *shard.Shard, force bool) error {
	for range maxDrainRounds {
		d, err := readDraining(ctx, r)
		if err != nil {
			return err
		}
		if d.held > 0 && !force {
			// Granted since the check: it ends with the group (its holder
			// learns it from its Done), and what queues behind it is
			// withdrawn.
			d.cmds, d.held = d.cmds[:len(d.cmds)-d.held], 0
		}
		if len(d.cmds) == 0 {
			return nil
		}
		if err := proposeDrain(ctx, r, d.cmds); err != nil {
			return err
		}
		r.Logger().Info("fencelock: a group being dropped withdrew its queued requests and revoked its grants", "group", r.Name(),
			"withdrawn", len(d.cmds)-d.held, "revoked", d.held)
	}
	return nil // callers that keep asking: what they got ends with the group
}

// maxDrainRounds bounds drain's rounds, so that clients that keep asking
// the group (a retry loop, an election's candidates) cannot hold its drop
// off: after them, what they were granted or queued for meanwhile ends
// with the group (ErrGroupDropped).
const maxDrainRounds = 8

// SetVoters makes voters group name's voters in the table, and returns once
// the group's raft membership has moved to them (the root's SetVoters
// documents the contract).
func (t *Table) SetVoters(ctx context.Context, name string, voters []uint64) error {
	vs, err := checkVoters(voters)
	if err != nil {
		return err
	}
	v, err := t.ensureTable(ctx) // as DropGroup: the Config's groups first
	if err != nil {
		return err
	}
	e, ok := v.Find(name)
	if !v.Set || !ok {
		return fmt.Errorf("%w: %q is not a group of the table", lockapi.ErrUnknownGroup, shard.Truncate(name, 64))
	}
	addrs, _, err := t.deploymentAddrs(ctx)
	if err != nil {
		return err
	}
	if _, err := membersOf(vs, addrs); err != nil {
		return err
	}
	for _, id := range vs {
		if slices.Contains(e.Removed, id) {
			return fmt.Errorf("%w: replica %d was removed from group %q, and a removed replica never comes back: use a new replica ID", lockapi.ErrInvalidVoters, id, name)
		}
	}
	res, err := t.h.DefaultGroup().Propose(ctx, fsm.Command{Kind: fsm.KindGroupSetVoters, Op: NewOpID(),
		Groups: []fsm.GroupSpec{{Name: name, Voters: vs}}})
	if err != nil {
		return err
	}
	switch {
	case res.Status == fsm.NotApplied:
		return fmt.Errorf("%w: %q was dropped meanwhile", lockapi.ErrUnknownGroup, name)
	case res.Status == fsm.Invalid && res.Value == fsm.GroupVoterRemoved:
		return fmt.Errorf("%w: a voter of %v was removed from group %q meanwhile", lockapi.ErrInvalidVoters, vs, name)
	case res.Status != fsm.OK:
		return fmt.Errorf("%w: the group table refused voters %v for %q: %v", lockapi.ErrInvalidVoters, vs, name, res.Status)
	}
	if !slices.Equal(vs, e.Voters) {
		t.h.Logger().Info("fencelock: group's voters set; they move one change at a time", "group", name, "from", e.Voters, "to", vs)
	}
	t.Changed()
	ask := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(e.Voters), vs...))))
	return t.awaitVoters(ctx, name, res.Value, vs, ask)
}

// awaitVoters waits until group name on shard id has exactly voters, as a
// linearizable read of its membership shows; or, if this host is one of
// the voters the move removes, until the group stopped running here (its
// removal is the move's last step for it: it comes after every new voter
// votes). A host that does not run the group reads the membership at one
// of ask (its voters before and after the move).
func (t *Table) awaitVoters(ctx context.Context, name string, id uint64, voters, ask []uint64) error {
	for {
		r := t.h.Running(name)
		if r == nil && t.h.OwnGroupsOnly() {
			// A host that runs only its own groups watches the move where
			// it is one of the new voters once it runs the group, and
			// through a voter until then or if it is none.
			m, err := t.h.MembersRemote(ctx, name, id, ask)
			if err == nil && slices.Equal(slices.Sorted(maps.Keys(m.Voters)), voters) {
				return nil
			}
			if err := t.Pause(ctx); err != nil {
				return err
			}
			continue
		}
		if r == nil || r.ShardID() != id {
			if slices.Contains(voters, t.h.ReplicaID()) {
				return fmt.Errorf("%w: %q no longer runs here", lockapi.ErrGroupDropped, name)
			}
			return nil // moved off this host: every new voter votes
		}
		if e := r.Gone.Load(); e != nil && (errors.Is(*e, lockapi.ErrGroupMoved) || errors.Is(*e, shard.ErrMovedOff)) {
			return nil
		}
		m, err := r.RaftMembership(ctx)
		if err != nil {
			if e := r.Gone.Load(); e != nil && (errors.Is(*e, lockapi.ErrGroupMoved) || errors.Is(*e, shard.ErrMovedOff)) {
				return nil
			}
			if t.h.OwnGroupsOnly() && !slices.Contains(voters, t.h.ReplicaID()) {
				// Removed from the group, this replica may never hear the
				// group again (nor of its own removal): the move goes on at
				// the group's leader, and the table stops the group here.
				return nil
			}
			return err
		}
		if slices.Equal(slices.Sorted(maps.Keys(m.Nodes)), voters) {
			return nil
		}
		if err := t.Pause(ctx); err != nil {
			return err
		}
	}
}

// awaitGroup waits until done holds for this host's replica of group name
// (nil if it runs none), nudging the table's watcher.
func (t *Table) awaitGroup(ctx context.Context, name string, done func(*shard.Shard) bool) error {
	t.Changed()
	for !done(t.h.Running(name)) {
		if err := t.Pause(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Pause waits pollEvery, or fails with ctx's end (ErrUnavailable and
// ctx's error) or the host's closing.
func (t *Table) Pause(ctx context.Context) error {
	timer := time.NewTimer(pollEvery)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-t.h.Closed():
		return lockapi.ErrClosed
	case <-ctx.Done():
		return shard.Unavailable(ctx.Err(), errors.New("the change is under way; it goes on without this call"))
	}
}

// ReplaceReplica moves every group off replica old onto replica new, then
// removes old from the deployment (the root's ReplaceReplica documents the
// contract).
func (t *Table) ReplaceReplica(ctx context.Context, old, new uint64) error {
	if old == 0 || new == 0 || old == new {
		return fmt.Errorf("%w: replace %d with %d", lockapi.ErrInvalidVoters, old, new)
	}
	addrs, m, err := t.deploymentAddrs(ctx)
	if err != nil {
		return err
	}
	addr, ok := addrs[new]
	if !ok {
		return fmt.Errorf("%w: replica %d is not a member of the deployment (add it first: fencelock members add --id N --addr HOST:PORT, POST /v1/members or Node.AddNonVoting; then start it)", lockapi.ErrInvalidVoters, new)
	}
	if _, removed := m.Removed[old]; removed {
		return fmt.Errorf("%w: replica %d", lockapi.ErrIDRemoved, old)
	}
	v, err := t.ensureTable(ctx)
	if err != nil {
		return err
	}
	for _, e := range v.Groups {
		if !slices.Contains(e.Voters, old) {
			continue
		}
		voters := slices.DeleteFunc(slices.Clone(e.Voters), func(id uint64) bool { return id == old })
		if !slices.Contains(voters, new) {
			voters = append(voters, new)
		}
		if err := t.SetVoters(ctx, e.Name, voters); err != nil {
			return fmt.Errorf("group %q: %w", e.Name, err)
		}
	}
	def := t.h.DefaultGroup()
	if _, voter := m.Nodes[old]; voter {
		if err := def.AddReplica(ctx, new, addr); err != nil {
			return fmt.Errorf("the default group: %w", err)
		}
	}
	if err := def.RemoveReplica(ctx, old); err != nil {
		return fmt.Errorf("the default group: %w", err)
	}
	t.h.Logger().Info("fencelock: replica replaced in every group", "old", old, "new", new)
	return nil
}
