// Package backup is fencelock's backup file: a copy of every group of a
// deployment, as Dragonboat exported each group's snapshot, with a header
// that names the deployment and a checksum over the whole file. The root's
// Node.Snapshot writes one and Restore seeds new Dirs from one; this
// package only encodes and checks the bytes.
package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The file (format 1):
//
//	file    = magic:8 "FLBACKUP"  format:4  headerLen:4  header  section*  sha256:32
//	header  = JSON (Header), headerLen bytes
//	section = metadata (Group.MetaSize bytes)  snapshot file (Group.FileSize bytes)
//
// Numbers are big endian; there is one section per Header.Groups entry, in
// order. The SHA-256 covers every byte before it: a file cut short, or one
// byte changed, is refused before anything in it is believed. A newer
// format is refused by an older build (ErrCorrupt names the version), as
// the fsm's snapshot inside is: restore with a build at least as new as
// the one that took the backup.

// ErrCorrupt is wrapped by every error about a file that is not a whole,
// intact backup of a format this build reads.
var ErrCorrupt = errors.New("fencelock: invalid backup file")

// Format is the file format this build writes and reads.
const Format = 1

var magic = [8]byte{'F', 'L', 'B', 'A', 'C', 'K', 'U', 'P'}

// The bounds a file's lengths are checked against before anything is
// allocated for them.
const (
	maxHeader = 1 << 20
	maxMeta   = 1 << 20
	// MaxFile bounds one group's snapshot file: the fsm's own bound on a
	// snapshot (4 GiB) and Dragonboat's framing.
	MaxFile   = 4<<30 + 64<<20
	maxGroups = 1024
	prefixLen = len(magic) + 8
)

// Header names the deployment a backup was taken of, and every group in it.
type Header struct {
	Format       int    `json:"format"`
	DeploymentID uint64 `json:"deployment_id"`
	// TakenAt is the wall-clock time at the replica that took the
	// backup, for people; nothing depends on it.
	TakenAt time.Time `json:"taken_at"`
	// TakenBy is the replica that took it.
	TakenBy uint64  `json:"taken_by"`
	Groups  []Group `json:"groups"`
}

// Group is one group's part of a backup.
type Group struct {
	// Name is the group's name, "" for the default group.
	Name    string `json:"name"`
	ShardID uint64 `json:"shard_id"`
	// GroupID is the group's ID (fsm.State.GroupID): fences carry it.
	GroupID uint64 `json:"group_id"`
	// Index and Term are the raft log index and term of the snapshot:
	// the state holds every entry up to Index.
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// LastToken is the last fencing token granted in the state: every
	// token in the backup is at most this.
	LastToken uint64 `json:"last_token"`
	// Voters are the group's voters at Index (ID → raft address).
	Voters map[uint64]string `json:"voters"`
	// Sessions, Locks and Elections count what the group held at the
	// read barrier before its snapshot (for people: the snapshot, at the
	// same or a later index, may differ by what was applied in between).
	Sessions  int `json:"sessions"`
	Locks     int `json:"locks"`
	Elections int `json:"elections"`
	// MetaSize and FileSize are the lengths of the group's section.
	MetaSize uint64 `json:"meta_size"`
	FileSize uint64 `json:"file_size"`
}

// Source is one group's section to write: Dragonboat's metadata record
// (protobuf, without its flag-file hash) and its snapshot file.
type Source struct {
	Meta []byte
	File io.Reader
}

// Encode writes a backup of h's groups, src[i] being Header.Groups[i]'s
// section; the sizes in h must be the sections' (a file that would not
// decode is never written whole: a short section is an error).
func Encode(w io.Writer, h Header, src []Source) error {
	if len(src) != len(h.Groups) {
		return fmt.Errorf("backup: %d sections for %d groups", len(src), len(h.Groups))
	}
	h.Format = Format
	hj, err := json.Marshal(h)
	if err != nil {
		return err
	}
	sum := sha256.New()
	mw := io.MultiWriter(w, sum)
	prefix := append(magic[:], make([]byte, 8)...)
	binary.BigEndian.PutUint32(prefix[8:], Format)
	binary.BigEndian.PutUint32(prefix[12:], uint32(len(hj)))
	if _, err := mw.Write(append(prefix, hj...)); err != nil {
		return err
	}
	for i, s := range src {
		g := h.Groups[i]
		if uint64(len(s.Meta)) != g.MetaSize {
			return fmt.Errorf("backup: group %q: metadata of %d bytes, header says %d", g.Name, len(s.Meta), g.MetaSize)
		}
		if _, err := mw.Write(s.Meta); err != nil {
			return err
		}
		n, err := io.Copy(mw, io.LimitReader(s.File, int64(g.FileSize)))
		if err != nil {
			return err
		}
		if uint64(n) != g.FileSize {
			return fmt.Errorf("backup: group %q: snapshot file of %d bytes, header says %d", g.Name, n, g.FileSize)
		}
	}
	_, err = w.Write(sum.Sum(nil))
	return err
}

// Section is one group's part of a decoded backup.
type Section struct {
	Group
	// Meta is Dragonboat's metadata record (protobuf) and Snapshot what
	// it decodes to; File is the snapshot file.
	Meta     []byte
	Snapshot pb.Snapshot
	File     []byte
	// State is the group's state, restored from File to check it.
	State *fsm.State
}

// RestoreEpoch is the restore epoch a restore of the section starts: the
// one every token and session ID of the restored group is in (see
// RaiseEpoch).
func (s *Section) RestoreEpoch() uint64 { return s.State.NextEpoch() }

// Backup is a decoded, checked backup.
type Backup struct {
	Header
	Sections []Section
}

// Read reads a whole backup from r and decodes it (Decode).
func Read(r io.Reader) (*Backup, error) {
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(r, maxBackup()+1))
	if err != nil {
		return nil, fmt.Errorf("backup: read: %w", err)
	}
	if n > maxBackup() {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrCorrupt, maxBackup())
	}
	return Decode(buf.Bytes())
}

func maxBackup() int64 { return int64(prefixLen + maxHeader + 4*(maxMeta+MaxFile) + sha256.Size) }

// Decode checks a backup whole and decodes it: the magic, format, lengths
// and checksum first, then every group's metadata, snapshot file and state,
// which must agree with the header (index, term, shard, group ID, last
// token), and every group of the default group's group table must have a
// section. Every failure wraps ErrCorrupt and says what is wrong; it never
// panics, whatever the bytes (FuzzDecode).
func Decode(data []byte) (*Backup, error) {
	if len(data) < prefixLen+sha256.Size {
		return nil, fmt.Errorf("%w: %d bytes: truncated", ErrCorrupt, len(data))
	}
	if !bytes.Equal(data[:len(magic)], magic[:]) {
		return nil, fmt.Errorf("%w: not a fencelock backup", ErrCorrupt)
	}
	if f := binary.BigEndian.Uint32(data[8:]); f != Format {
		return nil, fmt.Errorf("%w: format %d; this build reads format %d (restore with the build that took it, or a newer one)", ErrCorrupt, f, Format)
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if s := sha256.Sum256(body); !bytes.Equal(s[:], sum) {
		return nil, fmt.Errorf("%w: checksum mismatch: the file is truncated or damaged", ErrCorrupt)
	}
	hl := uint64(binary.BigEndian.Uint32(data[12:]))
	rest := body[prefixLen:]
	if hl > maxHeader || hl > uint64(len(rest)) {
		return nil, fmt.Errorf("%w: header of %d bytes", ErrCorrupt, hl)
	}
	var b Backup
	if err := json.Unmarshal(rest[:hl], &b.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	rest = rest[hl:]
	if b.Format != Format || len(b.Groups) == 0 || len(b.Groups) > maxGroups || b.Groups[0].Name != "" {
		return nil, fmt.Errorf("%w: header: format %d, %d groups (the default group first)", ErrCorrupt, b.Format, len(b.Groups))
	}
	seen := make(map[string]bool, len(b.Groups))
	for _, g := range b.Groups {
		if seen[g.Name] || !validName(g.Name) {
			return nil, fmt.Errorf("%w: header: group %.40q named twice or invalid", ErrCorrupt, g.Name)
		}
		seen[g.Name] = true
		if g.MetaSize > maxMeta || g.FileSize > MaxFile || g.MetaSize+g.FileSize > uint64(len(rest)) {
			return nil, fmt.Errorf("%w: group %q: section of %d+%d bytes, %d left", ErrCorrupt, g.Name, g.MetaSize, g.FileSize, len(rest))
		}
		s := Section{Group: g, Meta: rest[:g.MetaSize], File: rest[g.MetaSize : g.MetaSize+g.FileSize]}
		rest = rest[g.MetaSize+g.FileSize:]
		if err := s.check(); err != nil {
			return nil, fmt.Errorf("%w: group %q: %w", ErrCorrupt, g.Name, err)
		}
		b.Sections = append(b.Sections, s)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last group", ErrCorrupt, len(rest))
	}
	// Every group of the deployment's table must be here: one restored
	// without its copy would start empty, and grant its tokens again.
	if table, set := b.Sections[0].State.GroupTable(); set {
		for _, e := range table {
			if !seen[e.Name] {
				return nil, fmt.Errorf("%w: the group table names group %q, of which the backup holds no copy (a backup taken by a build that copied only the groups its replica ran): take the backup again",
					ErrCorrupt, e.Name)
			}
		}
	}
	return &b, nil
}

// check decodes the section's metadata, snapshot file and state, and
// compares them with the header.
func (s *Section) check() error {
	ss, err := unmarshalSnapshot(s.Meta)
	if err != nil {
		return err
	}
	if ss.Index != s.Index || ss.Term != s.Term || ss.ShardID != s.ShardID || ss.Index == 0 ||
		ss.Type != pb.RegularStateMachine || ss.Dummy || ss.Witness || len(ss.Files) > 0 ||
		ss.FileSize != uint64(len(s.File)) || ss.OnDiskIndex != 0 {
		return fmt.Errorf("snapshot metadata (index %d, term %d, shard %d, type %v, %d bytes) disagrees with the header (index %d, term %d, shard %d, %d bytes)",
			ss.Index, ss.Term, ss.ShardID, ss.Type, ss.FileSize, s.Index, s.Term, s.ShardID, len(s.File))
	}
	s.Snapshot = ss
	payload, err := StatePayload(s.File, ss.Checksum)
	if err != nil {
		return err
	}
	st, err := fsm.Restore(bytes.NewReader(payload))
	if err != nil {
		return err
	}
	if st.Index() > s.Index || st.GroupID() != s.GroupID || st.LastToken() != s.LastToken || st.GroupID() == 0 {
		return fmt.Errorf("state (index %d, group ID %016x, last token %d) disagrees with the header (index %d, group ID %016x, last token %d)",
			st.Index(), st.GroupID(), st.LastToken(), s.Index, s.GroupID, s.LastToken)
	}
	s.State = st
	return nil
}

// validName reports whether name is a group's name: "" (the default group)
// or 1 to 32 of [a-z0-9-], as the root's Config requires.
func validName(name string) bool {
	if len(name) > 32 {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// GroupOf fills in what a group's header entry says of its snapshot: ss
// and meta are Dragonboat's record of it, head what its state's first
// fields say, and the counts what the state holds. The caller sets Name
// and Voters.
func GroupOf(ss pb.Snapshot, meta []byte, head fsm.SnapshotHead, sessions, locks, elections int) Group {
	return Group{
		ShardID: ss.ShardID, GroupID: head.GroupID, Index: ss.Index, Term: ss.Term, LastToken: head.LastToken,
		Sessions: sessions, Locks: locks, Elections: elections,
		MetaSize: uint64(len(meta)), FileSize: ss.FileSize,
	}
}
