package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/datadir"
	"github.com/fencelock/fencelock/lockapi"
)

// FileName keeps in Dir the versions each group was last seen to
// write, so that a build that cannot read them refuses to start.
const FileName = "fencelock-versions.json"

type versionsFile struct {
	Version int                     `json:"version"`
	Groups  map[string]gateInDirRec `json:"groups"` // by group name; "" is the default group
}

type gateInDirRec struct {
	Codec    int `json:"codec"`
	Snapshot int `json:"snapshot"`
}

// Record is the host's copy of FileName. Its methods are safe for
// concurrent use.
type Record struct {
	path string
	mu   sync.Mutex
	f    versionsFile
}

// Load reads the record in dir (none yet: empty) and refuses a
// start whose build cannot read what one of the groups it runs writes.
func Load(dir string, groups []string) (*Record, error) {
	v := &Record{path: filepath.Join(dir, FileName), f: versionsFile{Version: 1, Groups: map[string]gateInDirRec{}}}
	data, err := datadir.ReadFile(v.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return v, nil
	case err != nil:
		return nil, fmt.Errorf("%w: Dir: %v", lockapi.ErrInvalidConfig, err)
	}
	if err := datadir.DecodeFile(v.path, data, &v.f); err != nil {
		return nil, fmt.Errorf("%w: Dir: %v", lockapi.ErrInvalidConfig, err)
	}
	if v.f.Version != 1 {
		return nil, fmt.Errorf("%w: Dir: %s has version %d, which this build does not know: upgrade this replica", lockapi.ErrInvalidConfig, v.path, v.f.Version)
	}
	if v.f.Groups == nil {
		v.f.Groups = map[string]gateInDirRec{}
	}
	reads := fsm.Reads()
	for _, name := range groups {
		rec, ok := v.f.Groups[name]
		g := fsm.Gate{Codec: rec.Codec, Snapshot: rec.Snapshot}
		if ok && !reads.Covers(g) {
			return nil, fmt.Errorf("%w: %w: %s writes %v (as this replica last saw, %s); this build reads up to %v: "+
				"upgrade this replica to a build that reads it (a replica cannot go back to a build older than what its groups write)",
				lockapi.ErrInvalidConfig, fsm.ErrVersionTooNew, GroupName(name), g, v.path, reads)
		}
	}
	return v, nil
}

// BeyondBaseline reports whether a group of the record writes more than
// fsm.Baseline.
func (v *Record) BeyondBaseline() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, rec := range v.f.Groups {
		if !fsm.Baseline.Covers(fsm.Gate{Codec: rec.Codec, Snapshot: rec.Snapshot}) {
			return true
		}
	}
	return false
}

// Keep records that group name writes g, unless a record says as much.
func (v *Record) Keep(name string, g fsm.Gate) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, ok := v.f.Groups[name]
	if ok && (fsm.Gate{Codec: old.Codec, Snapshot: old.Snapshot}).Covers(g) {
		return nil
	}
	next := maps.Clone(v.f.Groups)
	next[name] = gateInDirRec{Codec: max(old.Codec, g.Codec), Snapshot: max(old.Snapshot, g.Snapshot)}
	data, err := json.Marshal(versionsFile{Version: 1, Groups: next})
	if err != nil {
		return err
	}
	if err := datadir.WriteFile(v.path, data); err != nil {
		return err
	}
	v.f.Groups = next
	return nil
}
