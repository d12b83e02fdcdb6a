package fencelock

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencelock/fencelock/internal/backup"
	"github.com/fencelock/fencelock/internal/replica"
)

// ErrInvalidBackup: a backup file that is truncated, damaged, not a
// fencelock backup, or of a newer format than this build reads. Snapshot
// never writes one (a backup it could not finish is an error, and its
// partial bytes fail the checksum); Restore and ReadBackup refuse one
// before they change anything.
var ErrInvalidBackup = backup.ErrCorrupt

// BackupInfo describes a backup: the deployment it was taken of and every
// group in it.
type BackupInfo struct {
	// DeploymentID is the deployment's Config.DeploymentID.
	DeploymentID uint64
	// TakenAt is the wall-clock time of the replica that took it, and
	// TakenBy its ID: for people; nothing depends on them.
	TakenAt time.Time
	TakenBy uint64
	// Groups are the groups in the backup, the default group (Name "")
	// first.
	Groups []BackupGroup
}

// BackupGroup is one group of a backup.
type BackupGroup struct {
	Name string // "" for the default group
	// GroupID is the group's ID, which its fences carry (Fence.Group). A
	// restored group keeps it, so that resources keyed to the group go on
	// accepting its fences, whose tokens are in RestoreEpoch.
	GroupID uint64
	// Index and Term are the raft log index and term of the group's copy:
	// it holds every entry up to Index. A restored group's log continues
	// after Index.
	Index, Term uint64
	// LastToken is the last fencing token granted in the copy: every
	// token it holds is at most LastToken.
	LastToken uint64
	// RestoreEpoch is the restore epoch a restore of this copy starts (see
	// Restore): every token and session ID the restored group grants is at
	// least RestoreEpoch << 56, above every one of the group the backup was
	// taken of, whose tokens are of an earlier epoch (LastToken >> 56).
	RestoreEpoch uint64
	// Voters are the group's voters at Index.
	Voters map[uint64]string
	// Sessions, Locks and Elections count what the group held when its
	// copy was taken (at the read barrier before it: for people).
	Sessions, Locks, Elections int
}

func backupInfo(b *backup.Backup) BackupInfo {
	info := BackupInfo{DeploymentID: b.DeploymentID, TakenAt: b.TakenAt, TakenBy: b.TakenBy}
	for _, s := range b.Sections {
		g := s.Group
		info.Groups = append(info.Groups, BackupGroup{
			Name: g.Name, GroupID: g.GroupID, Index: g.Index, Term: g.Term,
			LastToken: g.LastToken, RestoreEpoch: s.RestoreEpoch(),
			Voters: g.Voters, Sessions: g.Sessions, Locks: g.Locks, Elections: g.Elections,
		})
	}
	return info
}

// Snapshot writes a backup of every group of the deployment to w, on any
// replica: one file with a header naming the deployment (DeploymentID,
// each group's name, ID, voters and log index) and a SHA-256 over the
// whole. The groups are the default group and every group of the group
// table (Config.Groups' before the table is set).
//
// Each group's copy is linearizable: a read barrier through the group's
// leader comes first, so the copy holds every grant, release and session
// committed before Snapshot was called, as of a log index reported in the
// header (between the call and its return). Groups are copied one after
// another, each at its own index: no operation spans two groups, so each
// is consistent on its own. A group this replica does not run
// (PlaceOwnGroups) is copied by one of its voters, which writes it and
// sends it here over the raft port's call connections, the voter feeding
// this replica's mirror of it first, then the others in turn.
//
// It needs a quorum of every group: it fails with ErrUnavailable (and
// ctx's error, or ErrNoQuorum), naming the group (and each voter asked),
// if a group cannot be copied before ctx ends; it never writes a backup
// without one of the groups. Dragonboat writes each copy to disk first, in
// a directory under Dir that is removed before Snapshot returns (on the
// voter too, for a group copied there), so it needs free space in Dir for
// one copy of the state (a process killed during Snapshot leaves that
// directory, named .snapshot-export-*, behind: delete it). The file holds
// the sessions' secrets (their resume credentials): keep it as private as
// Dir. A failed Snapshot may have written part of the file to w; that part
// fails the checksum (ErrInvalidBackup) if restored.
func (n *Node) Snapshot(ctx context.Context, w io.Writer) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(n.cfg.Dir, ".snapshot-export-")
	if err != nil {
		return fmt.Errorf("fencelock: snapshot: %w", err)
	}
	defer os.RemoveAll(tmp)
	h := backup.Header{DeploymentID: n.cfg.DeploymentID, TakenAt: time.Now().UTC(), TakenBy: n.cfg.ReplicaID}
	exports, err := n.host.ExportGroups(ctx, tmp)
	if err != nil {
		return fmt.Errorf("fencelock: %w", err)
	}
	var files []string
	var metas [][]byte
	for _, ex := range exports {
		g := backup.GroupOf(ex.Snapshot, ex.Meta, ex.Head, ex.Sessions, ex.Locks, ex.Elections)
		g.Name, g.Voters = ex.Name, ex.Snapshot.Membership.Addresses
		h.Groups = append(h.Groups, g)
		files, metas = append(files, ex.File), append(metas, ex.Meta)
	}
	src := make([]backup.Source, len(files))
	for i, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return fmt.Errorf("fencelock: snapshot: %w", err)
		}
		defer fh.Close()
		src[i] = backup.Source{Meta: metas[i], File: fh}
	}
	if err := backup.Encode(w, h, src); err != nil {
		return fmt.Errorf("fencelock: snapshot: %w", err)
	}
	return nil
}

// ReadBackup reads a whole backup from r and checks it: the checksum, and
// every group's copy down to its state, as Restore does before it writes
// anything. A file that is not an intact backup is ErrInvalidBackup.
func ReadBackup(r io.Reader) (BackupInfo, error) {
	b, err := backup.Read(r)
	if err != nil {
		return BackupInfo{}, err
	}
	return backupInfo(b), nil
}

// Restore seeds cfg.Dir, which must be absent or empty, from a backup read
// from r, so that Start(ctx, cfg) then runs every group of the backup from
// its state: this is how a new deployment is made from a backup, each of
// its replicas restored with the Config it will be started with (the same
// Members and Groups on every one, as for any new deployment).
//
// What the restored deployment continues:
//
//   - Each group keeps its group ID, so resources fenced by the group
//     (Fence.Group) accept its fences, and every fence it grants is above
//     every fence the old deployment granted, before or after the backup,
//     and so are its session IDs: Restore raises the group's restore epoch
//     (BackupGroup.RestoreEpoch, the token's top 8 bits) in the copy it
//     imports, and the group's raft log continues after the backup's
//     index. An old holder still holding a grant (a paused process) is
//     then refused as stale at a resource once the restored group's holder
//     wrote. This holds while the old group applied fewer than 2^40 log
//     entries; two deployments restored from one backup share an epoch and
//     would grant the same tokens: restore a backup once, and only once the
//     old deployment is gone for good.
//   - Every lock, queue, election and session of the backup is there, with
//     its tokens. Sessions are held for them from the first leader's
//     election: each gets a full TTL, within which its holder resumes it
//     (Node.ResumeSession, or HTTP, with its ResumeToken); a session not
//     resumed within its TTL expires and its locks pass on, as after any
//     leader change.
//   - The default group's voters are the restored deployment's Members.
//     The named groups are the backup's group table's, the groups
//     CreateGroup made among them: each is voted by the voters the table
//     gives it, at their Members addresses (they must be among Members),
//     whatever cfg.Groups says (SetVoters changes them afterwards). A backup
//     of a deployment that had no table yet is restored with cfg.Groups'
//     voters, and must name exactly the groups cfg runs, or a subset of
//     them (a group not in it starts empty, as a new group does).
//
// A replica that does not vote in a named group is given that group's
// state by its leader. The whole file is checked before anything is
// written (ErrInvalidBackup): a file whose group table names a group it
// holds no copy of (one taken by a build that copied only the groups its
// replica ran) is refused, naming the group, since that group would
// start empty and grant its tokens again;
// any other failure wraps ErrInvalidConfig and leaves Dir as it was. It
// holds the whole file in memory, and every group's state while it checks
// them: restore on a host with room for that.
func Restore(r io.Reader, cfg Config) (BackupInfo, error) {
	if err := cfg.normalize(); err != nil {
		return BackupInfo{}, err
	}
	b, err := backup.Read(r)
	if err != nil {
		return BackupInfo{}, err
	}
	groups := make([]replica.ImportGroup, len(b.Sections))
	for i, s := range b.Sections {
		groups[i] = replica.ImportGroup{Name: s.Name, Meta: s.Meta, Snapshot: s.Snapshot, File: s.File}
	}
	if err := replica.Import(replicaConfig(cfg), groups); err != nil {
		return BackupInfo{}, err
	}
	return backupInfo(b), nil
}
