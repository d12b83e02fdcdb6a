package replica

// Named groups. Every host runs every named group (unless its Placement
// is PlaceOwn: placement.go, package mirror): a voter of a group
// bootstraps it with the addresses of the group's voters; every other host
// starts it as a non-voting replica that joins, and the group's leader adds
// it (SyncRequestAddNonVoting) once the host is in the default group's
// membership. So a session on any host proposes and reads locally and gets
// the group's apply events locally, while the group's availability depends
// only on its voters' quorum. The cost: every host stores and applies every
// group's log, and every group's leader sends its entries to every host.
//
// Which groups there are is the group table's to say (package grouptable), once it
// is set: Config.Groups only seeds it. Before that (a new deployment, or
// one upgraded from a version without the table), a host runs the groups
// of its Config.Groups, as below.
//
// A group's identity is its name and the voters it was bootstrapped with
// (with the DeploymentID), and its shard ID: a hash of the name for a
// group of Config.Groups, so every host agrees without coordination, and
// the table's own for a group created online. The handshake compares the
// identity of every group both sides run. The identities are kept in Dir
// (groupsFileName), with the table's marker once this host follows the
// table. Without the marker, a restart with other voters for a group is
// refused, a group new to Groups starts (it elects a leader once a quorum
// of its voters runs it), and removing a group is refused at Start while
// this host's copy of the group holds locks (retire). With it, the Dir's
// groups start, whatever Config.Groups says, and the table then starts and
// stops groups (package grouptable's watcher; table.go here).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/datadir"
	"github.com/fencelock/fencelock/internal/replica/grouptable"
)

// groupsFileName keeps the named groups' identities in Dir.
const groupsFileName = "fencelock-groups.json"

// GroupShardID is the Dragonboat shard ID of the group called name
// (grouptable.ShardID).
func GroupShardID(name string) uint64 { return grouptable.ShardID(name) }

// namedDigest is the identity of a named group.
func namedDigest(deployment uint64, name string, voters []uint64) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "fencelock named group v1\ndeployment %d\nname %s\nvoters %v\n", deployment, name, voters))
	return hex.EncodeToString(sum[:16])
}

type namedGroup struct {
	Name string `json:"name"`
	// Group is the identity (namedDigest) of the group: Voters are the
	// voters it was bootstrapped with.
	Group  string   `json:"group"`
	Voters []uint64 `json:"voters"`
	// Bootstrap is the members map this host bootstrapped the group with,
	// as a voter; nil on a host that joined it non-voting.
	Bootstrap map[uint64]string `json:"bootstrap,omitempty"`
	// Shard is the group's shard ID when it is not GroupShardID(Name): a
	// group the table created.
	Shard uint64 `json:"shard,omitempty"`
}

// shard is the group's shard ID.
func (g namedGroup) shard() uint64 {
	if g.Shard != 0 {
		return g.Shard
	}
	return GroupShardID(g.Name)
}

type groupsFile struct {
	Version int          `json:"version"`
	Groups  []namedGroup `json:"groups"`
	// Table is set once this host follows the group table: its groups are
	// the table's, whatever Config.Groups says.
	Table bool `json:"table,omitempty"`
}

// decodeGroups decodes the groups file's bytes: anything but a consistent
// list is an error.
func decodeGroups(path string, data []byte) (groupsFile, error) {
	var f groupsFile
	if err := datadir.DecodeFile(path, data, &f); err != nil {
		return groupsFile{}, err
	}
	if f.Version != 1 {
		return groupsFile{}, fmt.Errorf("%s is corrupt: version %d", path, f.Version)
	}
	seen := make(map[string]bool, len(f.Groups))
	shards := make(map[uint64]bool, len(f.Groups))
	for _, g := range f.Groups {
		if g.Name == "" || seen[g.Name] || g.Group == "" || len(g.Voters) == 0 || g.Shard == 1 || shards[g.shard()] {
			return groupsFile{}, fmt.Errorf("%s is corrupt: group %q", path, truncate(g.Name, 40))
		}
		seen[g.Name], shards[g.shard()] = true, true
		for id := range g.Bootstrap {
			if !slices.Contains(g.Voters, id) {
				return groupsFile{}, fmt.Errorf("%s is corrupt: group %q bootstraps with %d, not a voter", path, truncate(g.Name, 40), id)
			}
		}
	}
	return f, nil
}

func readGroups(path string) (groupsFile, error) {
	data, err := datadir.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return groupsFile{Version: 1}, nil
	}
	if err != nil {
		return groupsFile{}, err
	}
	return decodeGroups(path, data)
}

func writeGroups(path string, f groupsFile) error {
	data, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return datadir.WriteFile(path, data)
}

// loadNamed returns the named groups this host starts with: with the
// table's marker in Dir, the groups kept there (tableMode); else those of
// cfg (loadGroups), and those to retire. A joining replica new to the
// deployment starts none: it runs what the table says, once it learns it.
func loadNamed(cfg Config, def groupFile) (named, retired []namedGroup, tableMode bool, err error) {
	path := filepath.Join(cfg.Dir, groupsFileName)
	file, err := readGroups(path)
	if err != nil {
		return nil, nil, false, fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
	}
	if file.Table {
		return file.Groups, nil, true, nil
	}
	if cfg.Join {
		cfg.Groups = nil // its groups come from the table
	}
	named, retired, err = loadGroups(cfg, def)
	return named, retired, false, err
}

// namedReplica prepares this host's replica of ng, reporting to sink.
func namedReplica(h *Host, ng namedGroup, sink Sink) *Replica {
	r := newReplica(h, ng.Name, ng.shard(), sink)
	r.SetVoters(ng.Voters)
	r.SetIdentity(ng.Group, ng.Voters)
	r.Bootstrap(ng.Bootstrap, ng.Bootstrap == nil)
	return r
}

// loadGroups returns the named groups cfg runs, in its order, with their
// identities as kept in Dir (new ones are added to the file), and the
// groups the file knows that cfg no longer names.
//
// A group whose voters in cfg differ from those kept in Dir runs as kept,
// with a warning: its identity is the voters its replicas bootstrapped
// with, and its voters change only by SetVoters. Refusing to start would
// strand a replica whose Dir never followed the group table (its only run
// was cut off, or it is older than the table) once an operator moved the
// group's voters with SetVoters and wrote the new voters into every
// replica's Config.Groups: once the replica reads the table, the table
// rules (grouptable's followTable).
func loadGroups(cfg Config, def groupFile) (named, retired []namedGroup, err error) {
	path := filepath.Join(cfg.Dir, groupsFileName)
	file, err := readGroups(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
	}
	stored := make(map[string]namedGroup, len(file.Groups))
	for _, g := range file.Groups {
		stored[g.Name] = g
	}
	changed := false
	members := def.Members
	if len(members) == 0 {
		members = cfg.Members
	}
	for i, gc := range cfg.Groups {
		voters := slices.Sorted(slices.Values(gc.Voters))
		digest := namedDigest(cfg.DeploymentID, gc.Name, voters)
		if old, ok := stored[gc.Name]; ok {
			if old.Group != digest && cfg.Logger != nil {
				cfg.Logger.Warn(fmt.Sprintf("fencelock: Groups[%d] %q: Voters %v differ from the voters %v this replica first ran it with (kept in Dir); it runs the group as it first did until it reads the deployment's group table, which rules (a group's voters change only by SetVoters)",
					i, gc.Name, voters, old.Voters), "replica", cfg.ReplicaID)
			}
			named = append(named, old)
			continue
		}
		if cfg.Placement == PlaceOwn && !slices.Contains(voters, cfg.ReplicaID) {
			continue // reached through a mirror (placement.go)
		}
		ng := namedGroup{Name: gc.Name, Group: digest, Voters: voters}
		if slices.Contains(voters, cfg.ReplicaID) {
			ng.Bootstrap = make(map[uint64]string, len(voters))
			for _, v := range voters {
				addr, ok := members[v]
				if !ok {
					return nil, nil, fmt.Errorf("%w: Groups[%d] %q: voter %d is not one of the group's bootstrap Members", ErrInvalidConfig, i, gc.Name, v)
				}
				ng.Bootstrap[v] = addr
			}
		}
		named = append(named, ng)
		changed = true
	}
	for _, g := range file.Groups {
		if !slices.ContainsFunc(named, func(n namedGroup) bool { return n.Name == g.Name }) {
			retired = append(retired, g)
		}
	}
	if cfg.Join {
		// A joining replica keeps what it ran: its groups come from the
		// table.
		named, retired = append(named, retired...), nil
	}
	if changed {
		if err := writeGroups(path, groupsFile{Version: 1, Groups: append(slices.Clone(named), retired...)}); err != nil {
			return nil, nil, fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
		}
	}
	return named, retired, nil
}

// discard is the sink of a group being removed: nobody listens.
type discard struct{}

func (discard) Applied(uint64, []fsm.Event) {}
func (discard) Restored(*fsm.State)         {}
func (discard) Removed()                    {}

// retire finishes the removal of the groups Dir knows and the Config no
// longer names: each has been started from Dir, and is refused while its
// state here, once this replica has applied every entry it knows to be
// committed, holds a lock. A removal that passes stops the group here and
// forgets its identity; its raft data stays in Dir, so a group added back
// under the same name and voters resumes where it was.
func (h *Host) retire(leaving []*Replica, named []namedGroup) error {
	if len(leaving) == 0 {
		return nil
	}
	for _, r := range leaving {
		locks, err := r.LocalLocks(retireWait)
		if err != nil {
			return fmt.Errorf("%w: Groups: group %q, which this replica ran, is no longer configured, and its state here cannot be checked: %v", ErrInvalidConfig, r.Name(), err)
		}
		if locks > 0 {
			return fmt.Errorf("%w: Groups: group %q is no longer configured but holds %s here: release or revoke them, or keep the group in Groups",
				ErrInvalidConfig, r.Name(), plural(locks, "lock"))
		}
	}
	for _, r := range leaving {
		r.Stop()
		if err := h.nh.StopShard(r.ShardID()); err != nil {
			h.log.Warn("fencelock: stopping a removed group", "group", r.Name(), "err", err)
		}
		r.Wait()
		// It stays in byShard, which the listeners read without a lock:
		// a stopped shard reports nothing more.
		h.log.Info("fencelock: group removed from this replica; its raft data stays in Dir", "group", r.Name())
	}
	if err := writeGroups(filepath.Join(h.cfg.Dir, groupsFileName), groupsFile{Version: 1, Groups: named}); err != nil {
		return fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
	}
	return nil
}

// retireWait bounds how long the removal check waits for a group's local
// log to be applied.
const retireWait = 30 * time.Second

// reconcile keeps, on the leader of each named group, the group's
// membership in step with the deployment: a non-voting replica whose host
// was removed from the default group is removed from the group too; the
// voters move to the group table's (grouptable.Table.MoveVoters); a host that is not yet a
// member of the group is added as a non-voting replica, unless the table
// removed it from the group. One change per call; the next call goes on.
// busy reports that a change is under way, or waits (a new voter catching
// up), so that the caller comes back soon.
func (h *Host) reconcile(ctx context.Context) (busy bool) {
	rs := h.groups()
	def := rs[0]
	var hosts map[uint64]string
	var gone map[uint64]struct{}
	for _, r := range rs[1:] {
		if r.LeaderID.Load() != h.cfg.ReplicaID {
			continue
		}
		if hosts == nil {
			m, err := def.RaftMembership(ctx)
			if err != nil {
				return true
			}
			hosts = make(map[uint64]string, len(m.Nodes)+len(m.NonVotings))
			for id, a := range m.Nodes {
				hosts[id] = a
			}
			for id, a := range m.NonVotings {
				hosts[id] = a
			}
			gone = m.Removed
		}
		m, err := r.RaftMembership(ctx)
		if err != nil {
			busy = true
			continue
		}
		entry, inTable := h.table.Entry(r)
		for _, id := range slices.Sorted(maps.Keys(m.NonVotings)) {
			_, left := gone[id]
			// A non-voting replica the table removed (a new voter whose
			// move was undone before it caught up) would stay a member
			// that never runs the group: its host stopped it for good.
			if !left && !(inTable && slices.Contains(entry.Removed, id) && h.table.TableRemoves(ctx, r, id)) {
				continue
			}
			if err := r.RemoveReplica(ctx, id); err != nil {
				r.Logger().Debug("fencelock: removing a non-voting replica the deployment or the group table removed; retried", "member", id, "err", err)
			}
			return true
		}
		if inTable && h.table.MoveVoters(ctx, r, m, entry, hosts) {
			return true
		}
		for _, id := range slices.Sorted(maps.Keys(hosts)) {
			_, voter := m.Nodes[id]
			_, nonVoting := m.NonVotings[id]
			_, removed := m.Removed[id]
			if voter || nonVoting || removed || inTable && slices.Contains(entry.Removed, id) {
				continue
			}
			if every, known := h.runsEveryGroup(ctx, id, hosts[id]); !every {
				busy = busy || !known
				continue // it runs only its own groups, or cannot be asked yet
			}
			if err := r.EnsureNonVoting(ctx, id, hosts[id], false); err != nil {
				r.Logger().Debug("fencelock: adding a host as a non-voting replica of the group; retried", "member", id, "err", err)
			} else {
				r.Logger().Info("fencelock: host added as a non-voting replica of the group", "member", id)
			}
			return true
		}
	}
	return busy
}

// lookupLimit bounds how long a call naming a group this host does not run
// waits for the group table: for the table to be read, and, if the group is
// one of it, for this host to start it. The caller's context bounds it
// too: a call given up returns with its context's error at once.
const lookupLimit = 5 * time.Second

// Lookup returns this host's replica of group ("" is the default group), or
// an error wrapping ErrUnknownGroup (ErrGroupMoved for a group this host was
// taken off): the session machinery routes every name through it. A group
// it does not run may
// be one the table created a moment ago, which this host has not started
// yet (CreateGroup returns once the replica it was called on runs the
// group; the others follow within moments): the table is read (a
// linearizable read, so it has every group created before the call began),
// and if it has the group, the call waits for this host to start it. So a
// group created through one replica is usable through any other right
// after; a name that is no group costs one read of the table before it is
// refused.
//
// A group in the table as this host last read it (the one its watcher
// follows) needs no read: a group reached through a mirror is, with no
// round trip to the default group per call. A read that fails is the
// call's error (ErrUnavailable, with why): the table may well have the
// group, so it is never reported as unknown.
func (h *Host) Lookup(ctx context.Context, group string) (Group, error) {
	if h.running(group) != nil {
		// The shard, or the mirror that serves the group until the shard
		// caught up with it (mirror_swap.go): a shard still catching up may
		// not reach the group's leader yet.
		if g := h.Group(group); g != nil {
			return g, nil
		}
	}
	unknown := fmt.Errorf("%w: %q", ErrUnknownGroup, truncate(group, 64))
	if group == "" || !fsm.ValidGroupName(group) {
		return nil, unknown
	}
	if m := h.mirror(group); m != nil {
		if e, ok := h.table.Entry(m); ok && !slices.Contains(e.Voters, h.cfg.ReplicaID) {
			return m, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, lookupLimit)
	defer cancel()
	noTable := func(err error) error {
		return fmt.Errorf("%w: group %q: the group table, which says where it runs, cannot be read here: %w", ErrUnavailable, truncate(group, 64), err)
	}
	var v grouptable.View
	if cur := h.table.Current(); cur != nil && cur.Set {
		// Where the table last read puts the group here holds until the
		// watcher reads it again: a mirror (a table that moves the group
		// here, or drops it, stops the mirror, and a call on it retries),
		// or for good (a removed replica never runs it again). Only a
		// group this host should run but does not yet needs the read.
		if e, ok := cur.Find(group); ok && (h.own() && !slices.Contains(e.Voters, h.cfg.ReplicaID) || slices.Contains(e.Removed, h.cfg.ReplicaID)) {
			v = *cur
		}
	}
	if !v.Set {
		var err error
		if v, err = h.readTable(ctx); err != nil {
			return nil, noTable(err)
		}
	}
	for !v.Set && h.own() && slices.ContainsFunc(h.cfg.Groups, func(g GroupConfig) bool { return g.Name == group }) {
		// The table is about to be seeded from Config.Groups; a mirror
		// needs its entry.
		if err := h.table.Pause(ctx); err != nil {
			return nil, noTable(err)
		}
		var err error
		if v, err = h.readTable(ctx); err != nil {
			return nil, noTable(err)
		}
	}
	e, ok := v.Find(group)
	switch {
	case !ok:
		return nil, unknown
	case h.own() && !slices.Contains(e.Voters, h.cfg.ReplicaID):
		// This host runs only its own groups: it reaches the others
		// through a replica that runs them.
		if r := h.mirrorOf(e); r != nil {
			return r, nil
		}
		return nil, ErrClosed
	case slices.Contains(e.Removed, h.cfg.ReplicaID):
		return nil, fmt.Errorf("%w: %q no longer runs on replica %d: SetVoters moved its voters off it; use a replica that runs it", ErrGroupMoved, group, h.cfg.ReplicaID)
	}
	h.table.Changed()
	for {
		if g := h.Group(group); g != nil && g.ShardID() == e.Shard {
			return g, nil
		}
		if err := h.table.Pause(ctx); err != nil {
			return nil, fmt.Errorf("%w: group %q: the group table has it, and this replica has not started it yet: %w", ErrUnavailable, truncate(group, 64), err)
		}
	}
}
