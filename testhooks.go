package fencelock

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/internal/testhook"
)

// The benchmark reads a replica's snapshot timings and a session's last
// acknowledged keep-alive, and the tests crash a node, through
// internal/testhook, which cannot import this package.
func init() {
	testhook.RegisterSnapshots(func(node any) testhook.Snapshots { return node.(*Node).r.Snapshots() })
	testhook.RegisterCrash(func(ctx context.Context, node any) uint64 {
		n := node.(*Node)
		n.host.TestingCrash(ctx)
		n.Close()
		return n.host.TestingLogStoreStats().Dropped
	})
	testhook.RegisterLastKeepAlive(func(session any) time.Time {
		s := session.(*Session)
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.acked
	})
}
