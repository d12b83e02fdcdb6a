package datadir

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/lockapi"
)

// A replica's Dir gets a random ID (its Dir ID) when the replica first takes
// part in its groups, kept in the Dir. Every replica keeps, in its own Dir,
// the Dir IDs of the peers it has talked to, and tells its peers what it
// keeps (peering.Hello.Dirs), so that what one replica saw reaches the
// others. A replica whose Dir was lost (a deleted volume, a wiped disk) and
// that starts again, empty, under its old ID has a new Dir ID, and every
// replica that knew the old one refuses it, naming the cause:
//
// It forgot the votes it cast and the entries it acknowledged, which its
// group counted on. Let back in as the same voter, it could vote a second
// time in a term, or make a quorum with a replica that lacks a committed
// entry (the other replica that had it being down), and the group would
// lose a grant it made: two holders of one lock. IDs are never reused: the
// lost replica is removed (RemoveReplica) and a replacement joins under a
// new ID (docs/operations.md, "Replacing a host").
//
// It is Kafka KRaft's directory ID, without its place in the voter set:
// what it does not catch is a replica that lost its Dir before any peer
// recorded the Dir ID, and a Dir restored from an older copy (the same Dir
// ID with a shorter log).

// idFileName is the Dir ID's file in Dir.
const idFileName = "fencelock-dir.json"

// maxIDs bounds the Dir IDs a replica keeps on record (and so its
// Hello): a group has a few replicas, a deployment few groups.
const maxIDs = 512

type idFile struct {
	Version int `json:"version"`
	// Self is this Dir's ID.
	Self uint64 `json:"self"`
	// Known are the peers' Dir IDs as first seen, by replica ID.
	Known map[uint64]uint64 `json:"known,omitempty"`
	// Replica is the replica ID this Dir serves, recorded with the Dir ID
	// (0 in a file an older build wrote, which did not record it: the
	// next write records it). Older builds ignore it.
	Replica uint64 `json:"replica,omitempty"`
}

// IDs is a replica's Dir ID and its record of its peers'.
type IDs struct {
	path string
	self uint64 // this replica's ID

	mu   sync.Mutex
	file idFile
	// kept reports that the file is in Dir (it is written when the
	// replica first takes part); until then the Dir ID is not told, and
	// what is learnt is kept in memory.
	kept bool
	// told is what Hello says: the record, copied on change, read without
	// the lock.
	told atomic.Pointer[map[uint64]uint64]
	// conflictWarned rate-limits the warning about peers that disagree.
	conflictWarned time.Time
}

// LoadIDs reads the Dir ID kept in dir, or makes a new one (written// only by Keep).
func LoadIDs(dir string, self uint64) (*IDs, error) {
	d := &IDs{path: filepath.Join(dir, idFileName), self: self}
	f, err := readIDs(d.path)
	switch {
	case err == nil && f.Replica != 0 && f.Replica != self:
		// A Dir holds one replica's raft state (its votes, its log): under
		// another ID it would take part as a replica the groups never had,
		// or chase another deployment's voters while it says it serves.
		return nil, fmt.Errorf("%w: this replica's Dir %s is replica %d's, and this start is replica %d: a Dir serves the replica ID it was first used with, "+
			"in this deployment or another. Start replica %d with it, or give replica %d an empty Dir (a new replica: docs/operations.md, \"Replacing a host\")",
			lockapi.ErrInvalidConfig, dir, f.Replica, self, f.Replica, self)
	case err == nil:
		d.file, d.kept = f, true
		d.file.Replica = self
	case errors.Is(err, fs.ErrNotExist):
		var b [8]byte
		for d.file.Self == 0 {
			if _, err := rand.Read(b[:]); err != nil {
				return nil, fmt.Errorf("%w: Dir ID: %v", lockapi.ErrInvalidConfig, err)
			}
			d.file.Self = binary.LittleEndian.Uint64(b[:])
		}
		d.file.Version, d.file.Replica = 1, self
	default:
		return nil, fmt.Errorf("%w: Dir: %v", lockapi.ErrInvalidConfig, err)
	}
	if d.file.Known == nil {
		d.file.Known = make(map[uint64]uint64)
	}
	d.publish()
	return d, nil
}

func readIDs(path string) (idFile, error) {
	data, err := ReadFile(path)
	if err != nil {
		return idFile{}, err
	}
	return decodeIDs(path, data)
}

// decodeIDs decodes the Dir ID file's bytes.
func decodeIDs(path string, data []byte) (idFile, error) {
	var f idFile
	if err := DecodeFile(path, data, &f); err != nil {
		return idFile{}, err
	}
	if f.Version != 1 || f.Self == 0 || len(f.Known) > maxIDs {
		return idFile{}, fmt.Errorf("%s is corrupt: version %d, Dir ID %d, %d known", path, f.Version, f.Self, len(f.Known))
	}
	for id, dir := range f.Known {
		if id == 0 || dir == 0 {
			return idFile{}, fmt.Errorf("%s is corrupt: replica %d has Dir ID %d", path, id, dir)
		}
	}
	return f, nil
}

// Keep writes the file, before the replica first takes part in a group:
// from then on the Dir ID is told to peers, who record it.
func (d *IDs) Keep() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.kept {
		return nil
	}
	if err := d.write(); err != nil {
		return fmt.Errorf("%w: Dir: %v", lockapi.ErrInvalidConfig, err)
	}
	d.kept = true
	d.publish()
	return nil
}

func (d *IDs) write() error {
	data, err := json.Marshal(d.file)
	if err != nil {
		return err
	}
	return WriteFile(d.path, data)
}

// publish makes the record what Hello tells; d.mu is held or d is not
// shared yet.
func (d *IDs) publish() {
	m := maps.Clone(d.file.Known)
	if d.kept {
		m[d.self] = d.file.Self
	}
	d.told.Store(&m)
}

// Hello fills in what h says of Dirs.
func (d *IDs) Hello(h *peering.Hello) {
	m := *d.told.Load()
	if _, ok := m[d.self]; ok {
		h.Dir = m[d.self]
	}
	if len(m) > 0 {
		h.Dirs = m // never changed: publish replaces it
	}
}

// Check refuses a peer that is not the replica it was under its ID (or by
// whose record this replica is not), and records what it learns from it,
// in Dir before the peer's first message is let through. warn is told when
// two peers disagree about a third.
func (d *IDs) Check(h peering.Hello, warn func(msg string)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if seen, ok := h.Dirs[d.self]; ok && seen != d.file.Self {
		return fmt.Errorf("replica %d at %s knew this replica (%d) by another Dir (Dir ID %016x on record there, %016x here): "+
			"this replica's Dir was lost or replaced since, and the votes and log entries the group counted on with it; "+
			"it must not take part under its old ID: remove replica %d from the group (RemoveReplica) and start a replacement "+
			"with a new ID that joins (docs/operations.md, \"Replacing a host\")",
			h.Replica, h.Addr, d.self, seen, d.file.Self, d.self)
	}
	if seen, ok := d.file.Known[h.Replica]; ok && h.Dir != 0 && h.Dir != seen {
		return fmt.Errorf("replica %d at %s is not the replica %d this one knew: its Dir is another (Dir ID %016x, %016x on record here): "+
			"it lost its Dir (or was given another) and forgot the votes and log entries the group counted on; "+
			"it must not take part under its old ID: remove replica %d from the group (RemoveReplica) and start a replacement "+
			"with a new ID that joins (docs/operations.md, \"Replacing a host\")",
			h.Replica, h.Addr, h.Replica, h.Dir, seen, h.Replica)
	}
	var learnt []uint64
	learn := func(id, dir uint64) {
		if id == 0 || dir == 0 || id == d.self {
			return
		}
		if seen, ok := d.file.Known[id]; ok {
			if seen != dir && time.Since(d.conflictWarned) >= time.Minute {
				d.conflictWarned = time.Now()
				warn(fmt.Sprintf("replica %d at %s has Dir ID %016x on record for replica %d, this replica %016x: "+
					"one of them talked to replica %d after it lost its Dir; remove replica %d and replace it under a new ID",
					h.Replica, h.Addr, dir, id, seen, id, id))
			}
			return
		}
		if len(d.file.Known) < maxIDs {
			d.file.Known[id] = dir
			learnt = append(learnt, id)
		}
	}
	learn(h.Replica, h.Dir)
	for id, dir := range h.Dirs {
		learn(id, dir)
	}
	if len(learnt) == 0 {
		return nil
	}
	if d.kept {
		if err := d.write(); err != nil {
			for _, id := range learnt {
				delete(d.file.Known, id)
			}
			return fmt.Errorf("cannot record replica %d's Dir ID in this replica's Dir: %v", h.Replica, err)
		}
	}
	d.publish()
	return nil
}
