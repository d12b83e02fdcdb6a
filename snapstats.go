package fencelock

import (
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/testhook"
)

// snapStats records this replica's snapshot timings for the benchmark
// (internal/testhook.SnapshotStats).
type snapStats struct {
	mu sync.Mutex
	s  testhook.Snapshots
}

func init() {
	testhook.RegisterSnapshots(func(node any) testhook.Snapshots {
		n := node.(*Node)
		n.snaps.mu.Lock()
		defer n.snaps.mu.Unlock()
		return n.snaps.s
	})
	testhook.RegisterLastKeepAlive(func(session any) time.Time {
		s := session.(*Session)
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.acked
	})
}

// onSnapshotSaved records a snapshot this replica saved.
func (n *Node) onSnapshotSaved(index uint64, bytes int64, took time.Duration) {
	n.snapshotSaved(index)
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	n.snaps.s.Saves++
	n.snaps.s.LastSave, n.snaps.s.LastSaveBytes, n.snaps.s.LastSaveIndex = took, bytes, index
}

// onSnapshotRestored records a snapshot this replica restored.
func (n *Node) onSnapshotRestored(index uint64, took time.Duration) {
	n.snaps.mu.Lock()
	defer n.snaps.mu.Unlock()
	n.snaps.s.Restores++
	n.snaps.s.LastRestore, n.snaps.s.RestoredIndex = took, index
}
