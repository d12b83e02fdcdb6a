// Package datadir is a replica's data directory (Config.Dir) as fencelock
// keeps it beside Dragonboat's files: the small JSON files it reads with a
// bound and writes so that a crash leaves the old or the new one
// (ReadFile, DecodeFile, WriteFile); the claim that one process runs one
// replica per Dir (Claim) and the words for a Dir another process locks
// (Locked); the undoing of what a failed start wrote (Entries, Undo); and
// the Dir ID that lets peers refuse a replica whose Dir was lost (IDs,
// ids.go).
//
// internal/replica's host uses it at its start and in its handshake; the
// group identity, group table and version files are that package's, kept
// through these functions. It imports internal/peering for the Hello the
// Dir IDs travel in, and lockapi for ErrInvalidConfig, the error a Dir
// that cannot be used is reported with; nothing of internal/replica.
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/lockapi"
)

// A start that fails before any shard ran (a raft port in use, an address
// not of this host) has still written to Dir: the group's identity, and
// Dragonboat's record of the host's address, which refuses the corrected
// retry as "not the owner of the data directory". Nothing in it is raft
// state yet, so it is undone: Dir is left as the start found it. Once a
// shard has started, its files may hold a vote or log entries the group
// counts on, and are never removed.

// Entries returns the names at the top of dir, or nil if dir does not
// exist.
func Entries(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(entries))
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names, nil
}

// Undo removes what a failed start added to dir: dir itself if it did
// not exist (before is nil), else the entries at its top that before does
// not list. What cannot be removed is named in the returned error, which
// wraps startErr, so that the operator knows exactly what to delete.
func Undo(dir string, before map[string]bool, startErr error) error {
	var left []string
	if before == nil {
		if err := os.RemoveAll(dir); err != nil {
			left = append(left, dir)
		}
	} else {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if before[e.Name()] {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if err := os.RemoveAll(p); err != nil {
				left = append(left, p)
			}
		}
	}
	if len(left) == 0 {
		return startErr
	}
	return fmt.Errorf("%w; this start wrote %s and could not remove it: remove it before the next start, nothing in it is needed",
		startErr, strings.Join(left, ", "))
}

// Locked says that dir is locked by another process, and which one if
// this system tells (lockHolder).
func Locked(dir string) string {
	lock := filepath.Join(dir, "LOCK")
	if who := lockHolder(lock); who != "" {
		return fmt.Sprintf("failed to lock data directory %s: %s holds %s (one replica per Dir)", dir, who, lock)
	}
	return fmt.Sprintf("failed to lock data directory %s: another process holds %s (one replica per Dir)", dir, lock)
}

// maxFile bounds what is read of each of the small JSON files fencelock
// keeps in Dir (the group identity, the named groups, the Dir IDs): a
// damaged or foreign file is refused, not read whole into memory.
const maxFile = 1 << 20

// ReadFile reads a small file of Dir, at most maxFile+1 bytes, so
// that DecodeFile can tell one too large.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// DecodeFile decodes the JSON of a small file of Dir into v; an error
// names the file and says it is corrupt.
func DecodeFile(path string, data []byte, v any) error {
	if len(data) > maxFile {
		return fmt.Errorf("%s: larger than %d bytes", path, maxFile)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s is corrupt: %v", path, err)
	}
	return nil
}

// WriteFile writes a file of Dir so that a crash leaves the old one or the
// new one, never a torn one.
func WriteFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// dirsInUse holds the Dirs of the replicas running in this process: a
// second Start on one would corrupt it (Dragonboat's own lock is per
// process).
var dirsInUse sync.Map

// Claim marks dir as in use by a replica of this process until release is
// called; a second claim of the same Dir (by any path to it) fails with an
// error wrapping lockapi.ErrInvalidConfig.
func Claim(dir string) (release func(), err error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: Dir: %v", lockapi.ErrInvalidConfig, err)
	}
	if _, taken := dirsInUse.LoadOrStore(abs, struct{}{}); taken {
		return nil, fmt.Errorf("%w: Dir %s is in use by another replica of this process", lockapi.ErrInvalidConfig, dir)
	}
	return func() { dirsInUse.Delete(abs) }, nil
}
