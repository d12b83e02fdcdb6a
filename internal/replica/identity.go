package replica

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/datadir"
	"github.com/fencelock/fencelock/internal/replica/gate"
)

// A group's identity is fixed when it bootstraps: a digest of its
// DeploymentID and bootstrap Members, kept in the replica's Dir. Replicas
// tell it to each other when they connect (internal/peering), so a replica
// started with another Members map, or one that belongs to another group,
// is refused by the group's replicas, and both sides log what differs,
// instead of bootstrapping a group of its own that grants the same locks.
// A replica that joins learns it from the first peer that connects.

// groupFileName is the identity's file in Dir.
const groupFileName = "fencelock-group.json"

type groupFile struct {
	Version int               `json:"version"`
	Group   string            `json:"group"`
	Members map[uint64]string `json:"members"`
	// Note is version 2's word to whoever reads the file.
	Note string `json:"note,omitempty"`
}

// The identity file's versions. Version 2 is version 1 written once a
// group of this Dir writes more than fsm.Baseline (refuseOldBuilds): a
// build from before the version gate reads this file at its start and
// refuses a version other than 1, before it replays a log whose newer
// entries it would skip as corrupt (and serve, and snapshot, a state
// without them). Every build since reads both.
const (
	groupFileV1    = 1
	groupFileGated = 2
)

// gatedNote is what a version-2 identity file says of itself.
const gatedNote = "version 2: this Dir's groups write log entries a build from before the version gate (log version 8 or older) cannot read; such a build refuses this Dir"

// groupDigest is the identity of a group bootstrapped with members.
func groupDigest(deployment uint64, members map[uint64]string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "fencelock group v1\ndeployment %d\n%s\n", deployment, peering.FormatMembers(members)))
	return hex.EncodeToString(sum[:16])
}

// loadGroup returns the group identity kept in dir, or, if there is none,
// the one cfg bootstraps (persisted at once) or, for a joining replica, none
// yet. A file that cannot be read or decoded is an error wrapping
// ErrInvalidConfig: the replica must not guess which group it belongs to.
func loadGroup(cfg *Config) (groupFile, error) {
	path := filepath.Join(cfg.Dir, groupFileName)
	g, err := readGroup(path)
	switch {
	case err == nil:
		return g, nil
	case !errors.Is(err, fs.ErrNotExist):
		return groupFile{}, fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
	case cfg.Join:
		return groupFile{Version: groupFileV1}, nil
	}
	// A new group, or a Dir of a version that kept no identity: either
	// way the bootstrap members are cfg's.
	g = groupFile{Version: groupFileV1, Group: groupDigest(cfg.DeploymentID, cfg.Members), Members: maps.Clone(cfg.Members)}
	if err := writeGroup(path, g); err != nil {
		return groupFile{}, fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
	}
	return g, nil
}

func readGroup(path string) (groupFile, error) {
	data, err := datadir.ReadFile(path)
	if err != nil {
		return groupFile{}, err
	}
	return decodeGroup(path, data)
}

// decodeGroup decodes the identity file's bytes.
func decodeGroup(path string, data []byte) (groupFile, error) {
	var g groupFile
	if err := datadir.DecodeFile(path, data, &g); err != nil {
		return groupFile{}, err
	}
	if (g.Version != groupFileV1 && g.Version != groupFileGated) || (g.Group == "") != (len(g.Members) == 0) {
		return groupFile{}, fmt.Errorf("%s is corrupt: version %d, group %q with %d members", path, g.Version, g.Group, len(g.Members))
	}
	return g, nil
}

// writeGroup writes the identity file.
func writeGroup(path string, g groupFile) error {
	data, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return datadir.WriteFile(path, data)
}

// peers is the host's side of the handshake (peering.Local), and its record
// of which peers it reaches. One connection between two hosts carries every
// group's traffic, so the handshake checks the identity of every group both
// sides run.
type peers struct {
	h    *Host
	path string
	dirs *datadir.IDs // this Dir's ID and the peers' (package datadir)

	mu    sync.Mutex
	hello peering.Hello // what this host says; Group set once known
	// fileVersion is the identity file's version in Dir (groupFileGated
	// once the Dir refuses builds from before the gate).
	fileVersion int

	// members is the default group's membership as last applied here
	// (refreshed by its monitor), by which a peer's claimed address is
	// checked.
	members atomic.Pointer[map[uint64]string]
	contact sync.Map // replica ID -> *atomic.Int64 (unix nanos of the last traffic)
	reads   sync.Map // replica ID -> fsm.Gate it last announced it reads (versions.go)
	places  sync.Map // replica ID -> its Hello's Place (placement.go)
}

func newPeers(h *Host, g groupFile, dirs *datadir.IDs) *peers {
	reads := h.reads()
	p := &peers{h: h, path: filepath.Join(h.cfg.Dir, groupFileName), dirs: dirs, fileVersion: g.Version, hello: peering.Hello{
		Group: g.Group, Replica: h.cfg.ReplicaID, Addr: h.cfg.Addr, Members: g.Members,
		Codec: uint8(reads.Codec), Snapshot: uint8(reads.Snapshot),
	}}
	if h.own() {
		p.hello.Place = peering.PlaceOwn
	}
	m := maps.Clone(g.Members)
	p.members.Store(&m)
	return p
}

// Hello says which groups this host runs as it runs them now: the group
// table starts and stops them.
func (p *peers) Hello() peering.Hello {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hello
	p.dirs.Hello(&h)
	rs := p.h.groups()
	h.GroupID = rs[0].GroupID()
	for _, r := range rs[1:] {
		ident, voters := r.Identity()
		h.Groups = append(h.Groups, peering.GroupHello{Name: r.Name(), Group: ident, Voters: voters,
			GroupID: r.GroupID(), Shard: r.ShardID()})
	}
	return h
}

func (p *peers) group() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hello.Group
}

// Check refuses a peer that belongs to another deployment's default group,
// uses this replica's ID, claims an address the group gives another
// replica, runs a named group under the same name with other voters (or
// another incarnation of it), or lost its Dir since it was last seen
// (package datadir), or reads less than a group it runs writes (versions.go). A
// named group that only one side runs is no reason to refuse: that is a
// rolling restart adding or removing a group, and the group's traffic to a
// host without it is dropped until that host runs it. The errors name the difference, for both sides' logs.
func (p *peers) Check(h peering.Hello) error {
	self := p.Hello()
	if h.Replica == self.Replica {
		return fmt.Errorf("replica %d at %s uses the ID of this replica (%d at %s): every replica needs its own ReplicaID", h.Replica, h.Addr, self.Replica, self.Addr)
	}
	if h.Group != "" && self.Group != "" && h.Group != self.Group {
		diff := peering.DiffMembers(h.Members, self.Members)
		if maps.Equal(h.Members, self.Members) {
			diff = "the same members, but another DeploymentID or a separate bootstrap"
		}
		return fmt.Errorf("replica %d at %s belongs to another group: it was bootstrapped with other Members (%s)", h.Replica, h.Addr, diff)
	}
	if h.GroupID != 0 && self.GroupID != 0 && h.GroupID != self.GroupID {
		return fmt.Errorf("replica %d at %s belongs to another incarnation of this group: its group ID is %016x, this one's %016x (was one of them bootstrapped again from an empty Dir?)",
			h.Replica, h.Addr, h.GroupID, self.GroupID)
	}
	if err := checkGroups(h, self); err != nil {
		return err
	}
	if want, ok := (*p.members.Load())[h.Replica]; ok && want != h.Addr {
		return fmt.Errorf("replica %d connects as %s, but the group has replica %d at %s", h.Replica, h.Addr, h.Replica, want)
	}
	if err := p.dirs.Check(h, func(msg string) { p.h.log.Warn("fencelock: " + msg) }); err != nil {
		return err
	}
	p.recordReads(h.Replica, gate.Announced(h))
	p.recordPlace(h.Replica, h.Place)
	if err := p.checkReads(h); err != nil {
		return err
	}
	if self.Group == "" && h.Group != "" {
		p.adopt(h)
	}
	return nil
}

// checkGroups compares the named groups both sides run: the same name on
// the same shard. The same name on two shards is two incarnations of a
// group dropped and created again, one side not having applied the change
// yet: no message of one reaches the other (a shard's traffic is its own),
// and refusing the connection would keep that side from learning of it.
// A peer that does not say a group's shard (a version before the group
// table) runs it on the shard its name gives.
func checkGroups(there, here peering.Hello) error {
	shard := func(g peering.GroupHello) uint64 {
		if g.Shard != 0 {
			return g.Shard
		}
		return GroupShardID(g.Name)
	}
	for _, g := range there.Groups {
		i := slices.IndexFunc(here.Groups, func(m peering.GroupHello) bool { return m.Name == g.Name && shard(m) == shard(g) })
		if i < 0 {
			continue
		}
		mine := here.Groups[i]
		if g.Group != mine.Group {
			if slices.Equal(g.Voters, mine.Voters) {
				return fmt.Errorf("replica %d at %s runs group %q with the same voters %v but another DeploymentID", there.Replica, there.Addr, g.Name, g.Voters)
			}
			return fmt.Errorf("replica %d at %s runs group %q with voters %v, this replica with %v: %w", there.Replica, there.Addr, g.Name, g.Voters, mine.Voters, errFirstVoters)
		}
		if g.GroupID != 0 && mine.GroupID != 0 && g.GroupID != mine.GroupID {
			return fmt.Errorf("replica %d at %s runs another incarnation of group %q: its group ID is %016x, this one's %016x (was one of them bootstrapped again from an empty Dir?)",
				there.Replica, there.Addr, g.Name, g.GroupID, mine.GroupID)
		}
	}
	return nil
}

// errFirstVoters says what a group's voters in a handshake are, and how
// the replica that has them wrong is mended: the voters a group was
// bootstrapped with are its identity, which SetVoters does not change, so
// a replica whose Dir never knew the group and takes it from a
// Config.Groups written after a move bootstraps another group.
var errFirstVoters = errors.New("a group is known by the voters it was first started with, which SetVoters does not change; " +
	"start the replica that differs with the group's first voters in Config.Groups, or, once the deployment has a group table, without the group (the table then starts it)")

// adopt makes a joining replica's group the one of the first peer that
// talks to it: it was added to that group (AddReplica), so the group's
// replicas are the ones that contact it.
func (p *peers) adopt(h peering.Hello) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hello.Group != "" {
		return
	}
	g := p.file(h.Group, maps.Clone(h.Members))
	if err := writeGroup(p.path, g); err != nil {
		p.h.log.Warn("fencelock: cannot keep the group identity in Dir; it is learnt again at the next start", "err", err)
	}
	p.hello.Group, p.hello.Members = g.Group, g.Members
}

// file is the identity file of group with members, at the version this
// Dir's file has.
func (p *peers) file(group string, members map[uint64]string) groupFile {
	g := groupFile{Version: p.fileVersion, Group: group, Members: members}
	if g.Version == groupFileGated {
		g.Note = gatedNote
	}
	return g
}

// refuseOldBuilds makes the identity file version 2 (groupFileGated), if
// it is not yet: called once a group of this Dir writes more than the
// baseline, it keeps a build from before the gate from starting on it.
func (p *peers) refuseOldBuilds() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fileVersion == groupFileGated {
		return nil
	}
	was := p.fileVersion
	p.fileVersion = groupFileGated
	if err := writeGroup(p.path, p.file(p.hello.Group, p.hello.Members)); err != nil {
		p.fileVersion = was
		return err
	}
	return nil
}

func (p *peers) Contact(id uint64) {
	now := time.Now().UnixNano()
	if v, ok := p.contact.Load(id); ok {
		v.(*atomic.Int64).Store(now)
		return
	}
	v := new(atomic.Int64)
	v.Store(now)
	p.contact.Store(id, v)
}

// reached reports whether replica id was heard from within d.
func (p *peers) reached(id uint64, d time.Duration) bool {
	v, ok := p.contact.Load(id)
	return ok && time.Since(time.Unix(0, v.(*atomic.Int64).Load())) < d
}

// refresh reads r's membership as applied here, and returns its voters;
// the default group's is kept for the handshake's address check.
func (p *peers) refresh(r *Replica) map[uint64]string {
	info := p.h.nodeHostInfo()
	if info == nil {
		return nil
	}
	for _, s := range info.ShardInfoList {
		if s.ShardID != r.ShardID() || s.Pending {
			continue
		}
		m := maps.Clone(s.Replicas)
		if r.ShardID() == defaultShard {
			p.members.Store(&m)
		}
		return m
	}
	return nil
}
