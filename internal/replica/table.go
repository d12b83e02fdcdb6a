package replica

// The host's side of following the group table (package grouptable, whose
// watcher reads it and decides): starting this host's replica of a group
// the table names (startGroup), stopping one it dropped or moved off this
// host for good (stopGroup, and mirrorAfter when a mirror takes over), the
// groups kept in Dir as the table has them (updateGroupsFile), and this
// host's Config.Groups as the table's seed (seedSpecs).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/shard"
)

// startFailures are the shards whose start failed here, and when
// (startGroup tries each again after startRetry).
type startFailures struct {
	mu     sync.Mutex
	failed map[uint64]time.Time
}

const (
	// startRetry is how long a group whose start failed here waits before
	// the next attempt.
	startRetry = 30 * time.Second
	// removeDataLimit bounds the removal of a stopped group's raft data.
	removeDataLimit = 30 * time.Second
)

// startGroup starts this host's replica of table entry e: as one of its
// bootstrap voters, or else as a non-voting replica that joins (the
// group's leader adds it).
func (h *Host) startGroup(e fsm.GroupEntry) {
	h.setMu.Lock()
	defer h.setMu.Unlock()
	if h.closing() {
		return
	}
	if h.running(e.Name) != nil {
		return
	}
	h.starts.mu.Lock()
	failedAt, failed := h.starts.failed[e.Shard]
	h.starts.mu.Unlock()
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
		h.starts.mu.Lock()
		h.starts.failed[e.Shard] = time.Now()
		h.starts.mu.Unlock()
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
	if h.closing() {
		return
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
		if e, ok := h.table.Entry(r); ok {
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
func (h *Host) FollowsTable() bool { return h.table.FollowsTable() }
