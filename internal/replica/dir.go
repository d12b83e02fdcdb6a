package replica

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// A start that fails before any shard ran (a raft port in use, an address
// not of this host) has still written to Dir: the group's identity, and
// Dragonboat's record of the host's address, which refuses the corrected
// retry as "not the owner of the data directory". Nothing in it is raft
// state yet, so it is undone: Dir is left as the start found it. Once a
// shard has started, its files may hold a vote or log entries the group
// counts on, and are never removed.

// dirEntries returns the names at the top of dir, or nil if dir does not
// exist.
func dirEntries(dir string) (map[string]bool, error) {
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

// undoDir removes what a failed start added to dir: dir itself if it did
// not exist (before is nil), else the entries at its top that before does
// not list. What cannot be removed is named in the returned error, which
// wraps startErr, so that the operator knows exactly what to delete.
func undoDir(dir string, before map[string]bool, startErr error) error {
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

// lockedDir says that dir is locked by another process, and which one if
// this system tells (lockHolder).
func lockedDir(dir string) string {
	lock := filepath.Join(dir, "LOCK")
	if who := lockHolder(lock); who != "" {
		return fmt.Sprintf("failed to lock data directory %s: %s holds %s (one replica per Dir)", dir, who, lock)
	}
	return fmt.Sprintf("failed to lock data directory %s: another process holds %s (one replica per Dir)", dir, lock)
}

// plural is "1 lock", "2 locks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// maxDirFile bounds what is read of each of the small JSON files fencelock
// keeps in Dir (the group identity, the named groups, the Dir IDs): a
// damaged or foreign file is refused, not read whole into memory.
const maxDirFile = 1 << 20

// readDirFile reads a small file of Dir, at most maxDirFile+1 bytes, so
// that decodeDirFile can tell one too large.
func readDirFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDirFile+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// decodeDirFile decodes the JSON of a small file of Dir into v; an error
// names the file and says it is corrupt.
func decodeDirFile(path string, data []byte, v any) error {
	if len(data) > maxDirFile {
		return fmt.Errorf("%s: larger than %d bytes", path, maxDirFile)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s is corrupt: %v", path, err)
	}
	return nil
}
