package replica

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/lni/dragonboat/v4/tools"

	"github.com/fencelock/fencelock/internal/backup"
	"github.com/fencelock/fencelock/internal/dblog"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/datadir"
	"github.com/fencelock/fencelock/internal/replica/grouptable"
	"github.com/fencelock/fencelock/internal/seeded"
)

// Backup and restore of a group go through Dragonboat's exported snapshots
// and tools.ImportSnapshot: an import is the one way Dragonboat offers to
// give a shard a state at a log index other than its own log's, and the
// index has to continue, not only the token counter (a token is at least
// index<<16, so a restored group whose log continued from 1 would grant
// tokens it granted before). Continuing from the backup is not enough
// either: the old deployment went on granting after the backup, up to the
// disaster. So Import raises each group's restore epoch (fsm.RaiseEpoch)
// in the snapshot it imports: every token and session ID the restored
// group grants is above every one the old group could grant.

// Exported is one group's snapshot as Dragonboat exported it, checked.
type Exported struct {
	Meta     []byte           // the metadata record (protobuf)
	Snapshot pb.Snapshot      // what Meta decodes to
	File     string           // the snapshot file's path, under the export's directory
	Head     fsm.SnapshotHead // what the state's first fields say
	// Sessions, Locks and Elections are what the state held at the read
	// barrier (the snapshot is at the same or a later index).
	Sessions, Locks, Elections int
}

// export writes a snapshot of r's group's state into dir (which must
// exist and be empty), and checks it. It is linearizable: a read barrier
// through the group's leader comes first, so the snapshot holds at least
// every entry committed before Export was called, at an index reported in
// Snapshot.Index. It needs the group's quorum for the barrier, and fails
// with ErrUnavailable (and ctx's error) if ctx ends first.
func export(ctx context.Context, r *Replica, dir string) (Exported, error) {
	type atBarrier struct{ index, sessions, locks, elections int }
	v, err := r.Read(ctx, func(st *fsm.State) any {
		sessions, locks, _ := st.Counts()
		elections, _ := st.ElectionCounts()
		return atBarrier{int(st.Index()), sessions, locks, elections}
	})
	if err != nil {
		return Exported{}, err
	}
	at := v.(atBarrier)
	barrier := uint64(at.index)
	index, err := r.ExportSnapshot(ctx, dir)
	if err != nil {
		return Exported{}, err
	}
	if index < barrier {
		return Exported{}, fmt.Errorf("%w: group %q exported its snapshot at index %d, before the read barrier's %d", ErrUnavailable, r.Name(), index, barrier)
	}
	ex, err := readExport(dir, index)
	ex.Sessions, ex.Locks, ex.Elections = at.sessions, at.locks, at.elections
	return ex, err
}

// readExport reads and checks the snapshot Dragonboat exported into dir:
// its metadata, every block of its file, and the first fields of the state
// in it. The state itself is not restored here, so that a backup of a
// large table does not hold a second copy of it in the serving replica's
// memory; ReadBackup and Restore restore it, before anything relies on it.
func readExport(dir string, index uint64) (Exported, error) {
	sub := filepath.Join(dir, fmt.Sprintf("snapshot-%016X", index))
	meta, err := os.ReadFile(filepath.Join(sub, backup.MetadataFile))
	if err != nil {
		return Exported{}, fmt.Errorf("exported snapshot: %w", err)
	}
	rec, ss, err := backup.DecodeMetadata(meta)
	if err != nil {
		return Exported{}, err
	}
	return checkExport(rec, ss, filepath.Join(sub, filepath.Base(ss.Filepath)), index)
}

// checkExport checks an exported snapshot whose metadata record rec
// decodes to ss, and whose snapshot file is file: every block of the
// file, and the first fields of the state in it, which must be at index.
func checkExport(rec []byte, ss pb.Snapshot, file string, index uint64) (Exported, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return Exported{}, fmt.Errorf("exported snapshot: %w", err)
	}
	payload, err := backup.StatePayload(data, ss.Checksum)
	if err != nil {
		return Exported{}, err
	}
	head, err := fsm.PeekSnapshot(bytes.NewReader(payload))
	if err != nil {
		return Exported{}, err
	}
	if ss.Index != index || ss.FileSize != uint64(len(data)) || head.Index > index {
		return Exported{}, fmt.Errorf("exported snapshot: index %d (state's %d) and %d bytes, expected index %d and %d bytes",
			ss.Index, head.Index, ss.FileSize, index, len(data))
	}
	return Exported{Meta: rec, Snapshot: ss, File: file, Head: head}, nil
}

// restoredFileName lists, in Dir, the groups whose state a restore
// imported (Import). Dragonboat records an imported shard as one that
// joined, with no members, and refuses a start that gives it members; so
// the groups listed here start with none, their membership being the one
// the import wrote.
const restoredFileName = "fencelock-restored.json"

type restoredFile struct {
	Version int `json:"version"`
	// Groups are the imported groups' names, with the index each was
	// imported at.
	Groups map[string]uint64 `json:"groups"`
}

func readRestored(dir string) (restoredFile, error) {
	path := filepath.Join(dir, restoredFileName)
	data, err := datadir.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return restoredFile{}, nil
	}
	if err != nil {
		return restoredFile{}, err
	}
	var f restoredFile
	if err := datadir.DecodeFile(path, data, &f); err != nil {
		return restoredFile{}, err
	}
	if f.Version != 1 {
		return restoredFile{}, fmt.Errorf("%s is corrupt: version %d", path, f.Version)
	}
	return f, nil
}

// ImportGroup is one group's state to seed a Dir with.
type ImportGroup struct {
	Name string
	// Meta is the snapshot's metadata record (protobuf) and File its
	// snapshot file, both checked by the caller (backup.Decode).
	Meta     []byte
	Snapshot pb.Snapshot
	File     []byte
}

// Import seeds cfg.Dir, which must be absent or empty, so that Start(cfg)
// runs every group of groups from its state, at its log index, with the
// group's voters of cfg (the default group's Members, a named group's
// Voters) as its membership: a new deployment restored from a backup. A
// group cfg runs that groups lacks starts empty, as a new group does; a
// group this replica does not vote in is not imported, as its leader adds
// this replica as non-voting and sends it the state. Each group's state is
// imported in its next restore epoch (backup.RaiseEpoch), so that no token
// or session ID of the deployment the backup was taken of is granted again.
// Every group of groups must be one cfg runs. On failure the Dir is removed
// again; every error wraps ErrInvalidConfig.
func Import(cfg Config, groups []ImportGroup) (err error) {
	if cfg.Join {
		return fmt.Errorf("%w: restore: a joining replica gets its state from the group; restore the replicas of Members", ErrInvalidConfig)
	}
	entries, err := os.ReadDir(cfg.Dir)
	existed := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: restore: Dir: %v", ErrInvalidConfig, err)
	}
	if len(entries) > 0 {
		return fmt.Errorf("%w: restore: Dir %s is not empty: a restore seeds a new replica's Dir, never one in use (move it away first)", ErrInvalidConfig, cfg.Dir)
	}
	release, err := datadir.Claim(cfg.Dir)
	if err != nil {
		return err
	}
	defer release()
	// A failed restore leaves the Dir as it found it: absent, or empty.
	defer func() {
		if err != nil {
			if existed {
				err = datadir.Undo(cfg.Dir, map[string]bool{}, err)
			} else {
				err = datadir.Undo(cfg.Dir, nil, err)
			}
		}
	}()
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("%w: restore: Dir: %v", ErrInvalidConfig, err)
	}
	g, err := loadGroup(&cfg)
	if err != nil {
		return err
	}
	table, err := backupTable(groups)
	if err != nil {
		return err
	}
	var named []namedGroup
	if table.Set {
		named, err = tableImports(cfg, table)
	} else {
		named, _, err = loadGroups(cfg, g)
	}
	if err != nil {
		return err
	}
	bootstrap := map[string]map[uint64]string{"": g.Members}
	shards := map[string]uint64{"": defaultShard}
	for _, ng := range named {
		bootstrap[ng.Name], shards[ng.Name] = ng.Bootstrap, ng.shard()
	}
	for _, ig := range groups {
		if _, ok := bootstrap[ig.Name]; !ok {
			return fmt.Errorf("%w: restore: the backup has group %q, which Groups does not name: restore into a deployment with the same groups", ErrInvalidConfig, ig.Name)
		}
		if ig.Snapshot.ShardID != shards[ig.Name] {
			return fmt.Errorf("%w: restore: group %q's snapshot is of shard %d, not %d", ErrInvalidConfig, ig.Name, ig.Snapshot.ShardID, shards[ig.Name])
		}
	}
	dblog.Use(cfg.Logger)
	nhc, err := dirConfig(cfg)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(cfg.Dir)), ".fencelock-restore-")
	if err != nil {
		return fmt.Errorf("%w: restore: %v", ErrInvalidConfig, err)
	}
	defer os.RemoveAll(tmp)
	done := restoredFile{Version: 1, Groups: map[string]uint64{}}
	for i, ig := range groups {
		members := bootstrap[ig.Name]
		if len(members) == 0 {
			continue // not a voter here: it joins, and gets the state from the group
		}
		// The same bytes on every replica restored from the file: a pure
		// function of the group's copy.
		file, sum, err := backup.RaiseEpoch(ig.File, ig.Snapshot.Checksum)
		if err != nil {
			return fmt.Errorf("%w: restore: group %q: %w", ErrInvalidConfig, ig.Name, err)
		}
		if !seeded.On(seeded.RestoreKeepsTokenBase) {
			ig.File, ig.Snapshot.Checksum, ig.Snapshot.FileSize = file, sum, uint64(len(file))
		}
		src := filepath.Join(tmp, fmt.Sprint(i))
		if err := writeSnapshotDir(src, ig); err != nil {
			return fmt.Errorf("%w: restore: %v", ErrInvalidConfig, err)
		}
		if err := tools.ImportSnapshot(nhc, src, maps.Clone(members), cfg.ReplicaID); err != nil {
			return fmt.Errorf("%w: restore: import group %q: %v", ErrInvalidConfig, ig.Name, err)
		}
		done.Groups[ig.Name] = ig.Snapshot.Index
	}
	data, err := json.Marshal(done)
	if err == nil {
		err = datadir.WriteFile(filepath.Join(cfg.Dir, restoredFileName), data)
	}
	if err != nil {
		return fmt.Errorf("%w: restore: %v", ErrInvalidConfig, err)
	}
	return nil
}

// backupTable reads the group table from the default group's state in
// groups (a backup taken before the table has none, never set).
func backupTable(groups []ImportGroup) (grouptable.View, error) {
	for _, ig := range groups {
		if ig.Name != "" {
			continue
		}
		payload, err := backup.StatePayload(ig.File, ig.Snapshot.Checksum)
		if err != nil {
			return grouptable.View{}, fmt.Errorf("%w: restore: the default group's state: %v", ErrInvalidConfig, err)
		}
		st, err := fsm.DecodeSnapshot(payload)
		if err != nil {
			return grouptable.View{}, fmt.Errorf("%w: restore: the default group's state: %v", ErrInvalidConfig, err)
		}
		groups, set := st.GroupTable()
		return grouptable.View{Set: set, Groups: groups}, nil
	}
	return grouptable.View{}, nil
}

// tableImports returns the named groups of a backup whose deployment had a
// group table, as the restored replica runs them, and records them in Dir
// with the table's marker: the restored deployment's groups are the
// backup's table, whatever cfg.Groups says, each voted by the voters the
// table gives it, which must be among cfg's Members (their addresses are
// Members'). A group this replica votes in is imported with those voters
// as its membership; the others it joins, or, with PlaceOwn, reaches
// through a mirror (they are not recorded in Dir).
func tableImports(cfg Config, table grouptable.View) ([]namedGroup, error) {
	var named []namedGroup
	for _, e := range table.Groups {
		ng := namedGroup{Name: e.Name, Shard: e.Shard}
		for _, m := range e.Bootstrap {
			ng.Voters = append(ng.Voters, m.ID)
		}
		ng.Group = namedDigest(cfg.DeploymentID, e.Name, ng.Voters)
		if ng.Shard == GroupShardID(ng.Name) {
			ng.Shard = 0
		}
		members := make(map[uint64]string, len(e.Voters))
		for _, v := range e.Voters {
			addr, ok := cfg.Members[v]
			if !ok {
				return nil, fmt.Errorf("%w: restore: group %q of the backup's group table is voted by %v, and %d is not one of Members: restore into a deployment whose Members include every group's voters",
					ErrInvalidConfig, e.Name, e.Voters, v)
			}
			members[v] = addr
		}
		if slices.Contains(e.Voters, cfg.ReplicaID) {
			ng.Bootstrap = members
		}
		named = append(named, ng)
	}
	// A host that runs only its own groups starts no shard of the others
	// (it reaches them through mirrors): one started would join a group
	// whose leader never adds it.
	run := slices.DeleteFunc(slices.Clone(named), func(ng namedGroup) bool {
		return cfg.Placement == PlaceOwn && ng.Bootstrap == nil
	})
	if err := writeGroups(filepath.Join(cfg.Dir, groupsFileName), groupsFile{Version: 1, Table: true, Groups: run}); err != nil {
		return nil, fmt.Errorf("%w: restore: Dir: %v", ErrInvalidConfig, err)
	}
	return named, nil
}

// writeSnapshotDir writes ig as Dragonboat's exported snapshot directory,
// with its membership emptied: ImportSnapshot sets the one it is given,
// and refuses IDs the old membership had at other addresses, which a new
// deployment may well reuse.
func writeSnapshotDir(dir string, ig ImportGroup) error {
	ss := ig.Snapshot
	ss.Membership = pb.Membership{}
	rec, err := ss.Marshal()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, backup.MetadataFile), backup.EncodeMetadata(rec), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, filepath.Base(ss.Filepath)), ig.File, 0o600)
}

// restoredMembers returns the members a group's shard starts with: none
// for a group imported into this Dir (see restoredFileName).
func restoredMembers(restored restoredFile, name string, members map[uint64]string) map[uint64]string {
	if _, ok := restored.Groups[name]; ok {
		return nil
	}
	return members
}

// RestoredGroups returns the names of the groups a restore imported into
// dir, sorted; none for a Dir that was not restored.
func RestoredGroups(dir string) ([]string, error) {
	f, err := readRestored(dir)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(f.Groups)), nil
}
