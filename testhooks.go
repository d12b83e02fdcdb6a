package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/testhook"
)

// The tests crash a node through internal/testhook, which cannot import
// this package (the other hooks are registered in node.go).
func init() {
	testhook.RegisterCrash(func(ctx context.Context, node any) uint64 {
		n := node.(*Node)
		n.host.TestingCrash(ctx)
		n.close(false) // a crash hands nothing over
		return n.host.TestingLogStoreStats().Dropped
	})
}
