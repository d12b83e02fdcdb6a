package replica

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
// host has seen the table set, it keeps a marker in Dir (groups.go): from
// then on its groups are the table's, and a Config.Groups that differs is
// logged, never obeyed.
//
// A group's voters move to the table's one change at a time, on the
// group's leader (moveVoters, from reconcile): a new voter is added as a
// non-voting replica (every host of the deployment is one already), is
// promoted once it has caught up, and only when every new voter votes are
// the old ones removed, each only after the table, read again, still
// removes it: a removed replica ID can never come back.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/grouptable"
	"github.com/fencelock/fencelock/internal/replica/shard"
)

// tableState is the host's view of the group table.
type tableState struct {
	cur   atomic.Pointer[grouptable.View] // as last read; nil before the first read
	mode  atomic.Bool                     // the Dir's groups follow the table
	nudge chan struct{}                   // a table command applied, or a snapshot restored

	mu       sync.Mutex
	diff     string               // the Config.Groups difference last logged
	failed   map[uint64]time.Time // shards whose start failed here, and when
	seedDone bool                 // this host's seed was answered (or is not needed)
	seedOp   uint64               // the seed's operation ID, kept across its retries
}

func (t *tableState) init(mode bool) {
	t.mode.Store(mode)
	t.nudge = make(chan struct{}, 1)
	t.failed = make(map[uint64]time.Time)
}

// changed wakes the watcher; it runs on the default group's apply
// goroutine and never blocks.
func (t *tableState) changed() {
	select {
	case t.nudge <- struct{}{}:
	default:
	}
}

// entry returns the table's entry for g's group, if the table is set and
// has g's group on g's shard.
func (t *tableState) entry(g Group) (fsm.GroupEntry, bool) {
	v := t.cur.Load()
	if v == nil || !v.Set {
		return fsm.GroupEntry{}, false
	}
	e, ok := v.Find(g.Name())
	return e, ok && e.Shard == g.ShardID()
}

// Timing of the watcher: a table change nudges it at once; it reads the
// table again every tableRefresh anyway (a nudge lost to a read that
// failed, a start that failed), and sooner while a seed is pending or the
// last read failed.
const (
	tableRefresh   = 5 * time.Second
	tableRetry     = time.Second
	tableReadLimit = 10 * time.Second
	// startRetry is how long a group whose start failed here waits before
	// the next attempt.
	startRetry = 30 * time.Second
	// removeDataLimit bounds the removal of a stopped group's raft data.
	removeDataLimit = 30 * time.Second
)

// watchTable is the host's watcher of the group table; it returns when the
// host closes.
func (h *Host) watchTable() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-h.closed
		cancel()
	}()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-h.closed:
			return
		case <-h.tab.nudge:
		case <-t.C:
		}
		next := tableRefresh
		if !h.refreshTable(ctx) {
			next = tableRetry
		}
		t.Reset(next)
	}
}

// refreshTable reads the table and acts on it; false means it should be
// tried again soon.
func (h *Host) refreshTable(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, tableReadLimit)
	defer cancel()
	v, err := h.readTable(rctx)
	if err != nil {
		h.log.Debug("fencelock: reading the group table failed; retried", "err", err)
		return false
	}
	if !v.Set {
		return h.seed(rctx)
	}
	h.followTable(ctx, v)
	return true
}

// followTable makes the groups this host runs the table's v.
func (h *Host) followTable(ctx context.Context, v grouptable.View) {
	if !h.tab.mode.Load() {
		h.setMu.Lock()
		err := h.updateGroupsFile(func(f *groupsFile) { f.Table = true })
		h.setMu.Unlock()
		if err != nil {
			h.log.Warn("fencelock: cannot keep in Dir that this replica follows the group table; retried", "err", err)
			return
		}
		h.tab.mode.Store(true)
		h.log.Info("fencelock: the deployment's named groups are the group table's from now on; Config.Groups only seeded it", "groups", len(v.Groups))
	}
	h.tab.cur.Store(&v)
	h.logConfigDiff(v)
	for _, r := range h.groups()[1:] {
		e, ok := v.Find(r.Name())
		switch {
		case !ok || e.Shard != r.ShardID():
			h.stopGroup(r, fmt.Errorf("%w: %q", ErrGroupDropped, r.Name()), false)
		case h.own() && slices.Contains(e.Removed, h.cfg.ReplicaID) && (r.Ops.Removed.Load() || removedUnheard(r) || h.removalConfirmed(ctx, r, e)):
			h.stopGroup(r, shard.MovedOff(r.Name()), true)
		case slices.Contains(e.Removed, h.cfg.ReplicaID) && (r.Ops.Removed.Load() || h.removalConfirmed(ctx, r, e)):
			h.stopGroup(r, fmt.Errorf("%w: %q no longer runs on replica %d: SetVoters moved its voters off it", ErrGroupMoved, r.Name(), h.cfg.ReplicaID), false)
		default:
			r.SetVoters(e.Voters)
		}
	}
	h.followMirrors(v)
	for _, e := range v.Groups {
		if h.running(e.Name) == nil && !slices.Contains(e.Removed, h.cfg.ReplicaID) {
			if h.own() && !slices.Contains(e.Voters, h.cfg.ReplicaID) {
				continue // reached through a mirror, when used
			}
			h.startGroup(e)
		}
	}
	h.leadersChanged() // the group leaders' reconcile moves the voters
}

// removedUnheard reports whether r, whose voters the table moved off this
// host, has heard no leader for a long while: a replica the leader removed
// may never learn of it (the entry that removes it commits without it),
// and a host that runs only its own groups then reaches the group through
// a mirror instead of a shard that no longer hears it.
func removedUnheard(r *Replica) bool {
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
func (h *Host) removalConfirmed(ctx context.Context, r *Replica, e fsm.GroupEntry) bool {
	since := r.LeaderlessSince()
	if since == 0 || time.Since(time.Unix(0, since)) < r.ElectionTimeout() || h.calls == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*h.cfg.ProposalTimeout)
	defer cancel()
	ask := slices.DeleteFunc(slices.Clone(e.Voters), func(id uint64) bool { return id == h.cfg.ReplicaID })
	m, err := h.membersRemote(ctx, r.Name(), r.ShardID(), ask)
	if err != nil {
		r.Logger().Debug("fencelock: the group table removes this replica from the group, and no voter confirmed it yet; asked again", "err", err)
		return false
	}
	return slices.Contains(m.Removed, h.cfg.ReplicaID)
}

// logConfigDiff logs, once per difference, how this host's Config.Groups
// differs from the table, which rules.
func (h *Host) logConfigDiff(v grouptable.View) {
	var parts []string
	for _, gc := range h.cfg.Groups {
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
		if !slices.ContainsFunc(h.cfg.Groups, func(gc GroupConfig) bool { return gc.Name == e.Name }) {
			parts = append(parts, fmt.Sprintf("%s: in the table, not in Config.Groups", e.Name))
		}
	}
	diff := strings.Join(parts, "; ")
	h.tab.mu.Lock()
	defer h.tab.mu.Unlock()
	if diff == h.tab.diff {
		return
	}
	h.tab.diff = diff
	if diff != "" && len(h.cfg.Groups) > 0 {
		h.log.Warn("fencelock: Config.Groups differs from the deployment's group table, which rules (change groups with CreateGroup, DropGroup and SetVoters)",
			"differences", diff)
	}
}

// startGroup starts this host's replica of table entry e: as one of its
// bootstrap voters, or else as a non-voting replica that joins (the
// group's leader adds it).
func (h *Host) startGroup(e fsm.GroupEntry) {
	h.setMu.Lock()
	defer h.setMu.Unlock()
	select {
	case <-h.closed:
		return
	default:
	}
	if h.running(e.Name) != nil {
		return
	}
	h.tab.mu.Lock()
	failedAt, failed := h.tab.failed[e.Shard]
	h.tab.mu.Unlock()
	if failed && time.Since(failedAt) < startRetry {
		return
	}
	ng := namedGroup{Name: e.Name, Shard: e.Shard}
	for _, m := range e.Bootstrap {
		ng.Voters = append(ng.Voters, m.ID)
	}
	ng.Group = namedDigest(h.cfg.DeploymentID, e.Name, ng.Voters)
	if slices.Contains(ng.Voters, h.cfg.ReplicaID) {
		ng.Bootstrap = make(map[uint64]string, len(e.Bootstrap))
		for _, m := range e.Bootstrap {
			ng.Bootstrap[m.ID] = m.Addr
		}
	}
	if ng.Shard == GroupShardID(ng.Name) {
		ng.Shard = 0
	}
	// Dir first: once the shard started, a restart must find it there.
	if err := h.updateGroupsFile(func(f *groupsFile) { f.Groups = setNamed(f.Groups, ng) }); err != nil {
		h.log.Warn("fencelock: cannot keep a new group in Dir; not started here, retried", "group", e.Name, "err", err)
		return
	}
	sink := h.sinks(e.Name)
	mr := h.mirror(e.Name)
	if mr != nil {
		// The mirror feeds the group's Sink until the shard has caught
		// up with it (handover.go): the shard's Sink holds its events
		// back meanwhile (held).
		sink = &holdSink{inner: sink}
	}
	r := namedReplica(h, ng, sink)
	r.SetVoters(e.Voters)
	if err := r.Start(h.nh); err != nil {
		r.Stop()
		r.Wait()
		h.tab.mu.Lock()
		h.tab.failed[e.Shard] = time.Now()
		h.tab.mu.Unlock()
		h.log.Warn("fencelock: a group of the table could not start here; retried later", "group", e.Name, "err", startError(h.cfg, e.Name, err))
		return
	}
	h.gset.Store(h.gset.Load().with(r, true))
	if mr != nil {
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			h.handover(mr, r)
		}()
	}
	role := "non-voting"
	if ng.Bootstrap != nil {
		role = "voter"
	}
	r.Logger().Info("fencelock: group started here, as the group table says", "as", role, "voters", e.Voters)
}

// stopGroup stops this host's replica r for good: its calls and its
// sessions' parts end with why, its shard stops and its raft data is
// removed, and Dir forgets it. With mirror (a host that runs only its own
// groups, which the table moved off this one), the sessions' parts go on:
// a mirror of the group takes over from the shard, its calls in flight
// fail with why (ErrUnavailable: retried, they go through the mirror).
func (h *Host) stopGroup(r *Replica, why error, mirror bool) {
	h.setMu.Lock()
	defer h.setMu.Unlock()
	select {
	case <-h.closed:
		return
	default:
	}
	if h.running(r.Name()) != r {
		return
	}
	h.gset.Store(h.gset.Load().with(r, false))
	r.Gone.Store(&why)
	switch d, ok := r.Sink.(Dropper); {
	case mirror:
	case ok:
		d.Dropped(why)
	default:
		r.Sink.Removed()
	}
	r.Stop()
	if err := h.nh.StopShard(r.ShardID()); err != nil && !errors.Is(err, dragonboat.ErrShardNotFound) {
		r.Logger().Warn("fencelock: stopping a group that no longer runs here", "err", err)
	}
	r.Wait()
	if mirror {
		if e, ok := h.tab.entry(r); ok {
			h.mirrorAfter(r, e)
		}
	}
	// Dir forgets the group before its data goes: a crash in between
	// leaves data nothing starts again, never a record that would start
	// the group afresh, on empty data, under this replica's old ID.
	if err := h.updateGroupsFile(func(f *groupsFile) {
		f.Groups = slices.DeleteFunc(f.Groups, func(g namedGroup) bool { return g.Name == r.Name() && g.shard() == r.ShardID() })
	}); err != nil {
		r.Logger().Warn("fencelock: cannot forget in Dir a group that no longer runs here; its raft data stays", "err", err)
		r.Logger().Info("fencelock: group stopped here for good", "why", why)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), removeDataLimit)
	defer cancel()
	if err := h.nh.SyncRemoveData(ctx, r.ShardID(), h.cfg.ReplicaID); err != nil {
		r.Logger().Warn("fencelock: the raft data of a group that no longer runs here stays in Dir", "err", err)
	}
	r.Logger().Info("fencelock: group stopped here for good", "why", why)
}

// mirrorAfter makes a mirror take over group r (table entry e) from its
// shard, which this host stopped running (stopGroup); the caller holds
// setMu. A shard that stopped before it took over from the group's mirror
// here (the table moved the group onto this host and straight off again,
// handover unfinished) leaves that mirror in place: still feeding the
// group's Sink, it goes on; one the handover had already retired is
// stopped, and the new mirror starts from what the Sink has seen of
// either. Never two mirrors of a group, nor one that Close would not stop.
func (h *Host) mirrorAfter(r *Replica, e fsm.GroupEntry) {
	delivered := r.AppliedIndex.Load()
	if m := h.mirror(r.Name()); m != nil && m.ShardID() == r.ShardID() {
		old := &m.Core
		seen, over := m.Handover()
		delivered = max(delivered, seen)
		if !over {
			old.SetVoters(e.Voters)
			old.Logger().Info("fencelock: the group's shard here stopped before it took over from the mirror; the mirror goes on")
			return
		}
		why := shard.MovedOff(r.Name())
		old.Gone.Store(&why)
		if !h.goBackground(func() {
			m.Stop()
			m.Wait()
		}) {
			return // closing: Close stops it
		}
		h.setMirror(r.Name(), nil)
	}
	h.setMirror(r.Name(), h.newMirror(namedGroup{Name: r.Name(), Shard: r.ShardID()}, e.Voters, delivered))
}

// updateGroupsFile changes the groups file of Dir; the caller holds setMu.
func (h *Host) updateGroupsFile(change func(*groupsFile)) error {
	path := filepath.Join(h.cfg.Dir, groupsFileName)
	f, err := readGroups(path)
	if err != nil {
		return err
	}
	change(&f)
	return writeGroups(path, f)
}

// setNamed returns groups with ng in place of the group of its name.
func setNamed(groups []namedGroup, ng namedGroup) []namedGroup {
	out := slices.DeleteFunc(slices.Clone(groups), func(g namedGroup) bool { return g.Name == ng.Name })
	return append(out, ng)
}

// seed proposes, once, that the table be this host's Config.Groups, if it
// has any and does not follow the table yet; false means it should be
// tried again soon.
func (h *Host) seed(ctx context.Context) bool {
	h.tab.mu.Lock()
	done := h.tab.seedDone || h.tab.mode.Load() || len(h.cfg.Groups) == 0
	if h.tab.seedOp == 0 {
		h.tab.seedOp = grouptable.NewOpID()
	}
	op := h.tab.seedOp
	h.tab.mu.Unlock()
	if done {
		return true
	}
	specs, err := h.seedSpecs(ctx)
	if err != nil {
		h.log.Warn("fencelock: cannot seed the group table from Config.Groups; retried", "err", err)
		return false
	}
	res, err := h.groups()[0].Propose(ctx, fsm.Command{Kind: fsm.KindGroupSeed, Op: op, Groups: specs})
	if err != nil {
		h.log.Debug("fencelock: seeding the group table failed; retried", "err", err)
		return false
	}
	h.tab.mu.Lock()
	h.tab.seedDone = true
	h.tab.mu.Unlock()
	switch res.Status {
	case fsm.OK:
		h.log.Info("fencelock: group table seeded from Config.Groups", "groups", len(specs))
	case fsm.NotApplied: // another replica's seed, or a create, came first
	default:
		h.log.Warn("fencelock: the group table refused this replica's Config.Groups as its seed", "status", res.Status, "value", res.Value)
	}
	h.tab.changed()
	return true
}

// seedSpecs are this host's Config.Groups as the table's seed: each on the
// shard its name gives, with its voters' addresses as this host
// bootstrapped them, or as the deployment has them.
func (h *Host) seedSpecs(ctx context.Context) ([]fsm.GroupSpec, error) {
	m, err := h.groups()[0].RaftMembership(ctx)
	if err != nil {
		return nil, err
	}
	addrs := make(map[uint64]string, len(m.Nodes)+len(m.NonVotings))
	maps.Copy(addrs, m.NonVotings)
	maps.Copy(addrs, m.Nodes)
	for _, r := range h.groups()[1:] {
		maps.Copy(addrs, r.Bootstrapped())
	}
	specs := make([]fsm.GroupSpec, 0, len(h.cfg.Groups))
	for _, gc := range h.cfg.Groups {
		g := fsm.GroupSpec{Name: gc.Name, Shard: GroupShardID(gc.Name), Voters: slices.Sorted(slices.Values(gc.Voters))}
		if r := h.running(gc.Name); r != nil {
			if _, voters := r.Identity(); voters != nil {
				// A group this host runs with other voters than
				// Config.Groups says (loadGroups warned) is seeded as it
				// runs.
				g.Voters = slices.Clone(voters)
			}
		}
		for _, id := range g.Voters {
			addr, ok := addrs[id]
			if !ok {
				return nil, fmt.Errorf("group %q: voter %d is not a member of the deployment", gc.Name, id)
			}
			g.Bootstrap = append(g.Bootstrap, fsm.GroupMember{ID: id, Addr: addr})
		}
		specs = append(specs, g)
	}
	return specs, nil
}

// FollowsTable reports whether this host runs the group table's groups
// (it has seen the table set), rather than its Config.Groups.
func (h *Host) FollowsTable() bool { return h.tab.mode.Load() }
