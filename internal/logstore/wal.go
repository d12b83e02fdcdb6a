package logstore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/lni/dragonboat/v4/config"
	"golang.org/x/sys/unix"
)

// walSizer extends each write-ahead log of the store's pebble instances to
// the size pebble preallocates for it, as soon as the log exists.
//
// Why: a sync after an append that grows a file must also commit the new
// size through the file system's journal, which a sync of a write inside
// the file's size skips; on this project's disks that is about a third of
// a small fdatasync, and every raft entry waits for one. Pebble gets the
// cheap kind only from a recycled log (one whose memtable was flushed,
// written over in place); its own preallocation keeps the size
// (FALLOC_FL_KEEP_SIZE), so a log's first use pays the journal on every
// sync. That first use is all of a lightly loaded replica's life, and the
// first megabytes of any replica's.
//
// Pebble reads such a log as it reads a recycled one: its reader stops at
// the first zeroed chunk of the last log, and every earlier log ends with
// the EOF trailer pebble syncs before it creates the next (db.go,
// makeRoomForWrite), so nothing past a log's records is read as one.
//
// It works from outside pebble (a file system of our own would make
// Dragonboat refuse the store, and its error-injecting wrapper hides the
// descriptor pebble needs for fdatasync): at the store's open, and on
// Dragonboat's callback, which pebble's listener calls when a log is
// created. Extending does not touch pebble's offset or its data: pebble
// writes at its own offset, never with O_APPEND.
type walSizer struct {
	dirs []string // per log shard: where its logs are
	size int64    // 110% of a memtable: pebble's walPreallocateSize
}

func newWALSizer(cfg config.NodeHostConfig, dirs, walDirs []string) *walSizer {
	lc := cfg.Expert.LogDB
	size := int64(lc.KVWriteBufferSize)
	w := &walSizer{size: size + size/10}
	from := dirs
	if len(walDirs) > 0 {
		from = walDirs
	}
	for i := uint64(0); i < lc.Shards && len(from) > 0; i++ {
		// Dragonboat repeats a single dir for every shard (logdb.NewLogDB)
		// and names each shard's directory so (logdb.OpenShardedDB).
		d := from[min(int(i), len(from)-1)]
		w.dirs = append(w.dirs, filepath.Join(d, fmt.Sprintf("logdb-%d", i)))
	}
	return w
}

// sizeAll extends the logs of every shard.
func (w *walSizer) sizeAll() {
	for i := range w.dirs {
		w.sizeShard(uint64(i))
	}
}

// sizeShard extends the logs of one shard that are shorter than the size.
// A failure only costs the speed, as pebble's own preallocation does, so
// it is not reported.
func (w *walSizer) sizeShard(shard uint64) {
	if w == nil || w.size <= 0 || shard >= uint64(len(w.dirs)) {
		return
	}
	ents, err := os.ReadDir(w.dirs[shard])
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() || !isWAL(e.Name()) {
			continue
		}
		_ = extend(filepath.Join(w.dirs[shard], e.Name()), w.size)
	}
}

// extend makes the file at path at least size bytes long, its new blocks
// allocated and reading as zeroes, leaving its contents as they are. A file
// that is gone (pebble deleted an old log) is not created.
func extend(path string, size int64) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() >= size {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	// Never Truncate instead: pebble may write past a size read before
	// it, and a truncate would cut that off. Fallocate never shrinks.
	return unix.Fallocate(int(f.Fd()), 0, 0, size)
}

// isWAL reports whether name is a pebble write-ahead log: digits, ".log".
func isWAL(name string) bool {
	base, ok := strings.CutSuffix(filepath.Base(name), ".log")
	if !ok || base == "" {
		return false
	}
	for _, c := range base {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
