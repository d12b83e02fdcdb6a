package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/session"
)

// Watch reports lock name as this replica applies changes to it: first its
// state from a linearizable read, then every change (granted, released,
// expired, revoked, a waiter queued or gone), in order. Like Observe it may
// skip intermediate states when changes come faster than the receiver
// reads, but the value waiting to be received is always the latest, and
// nothing polls: the entries this replica applies wake the watchers of the
// names they touch. The channel is closed when ctx ends or the node closes;
// for an invalid name it carries one LockInfo whose Err wraps
// ErrInvalidName, and is closed. A replica cut off from its group applies
// nothing, so its watchers see no change until it catches up.
func (n *Node) Watch(ctx context.Context, name string) <-chan LockInfo {
	first := func(ctx context.Context) (LockInfo, error) { return n.Inspect(ctx, name) }
	out, err := session.WatchLock(n.h, ctx, name, first, lockInfo, lockInfoEqual)
	if err != nil {
		return closedWith(LockInfo{Name: name, Err: err})
	}
	return out
}
