package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/session"
)

// Observe reports the leader of election as this replica applies changes to
// it: first the current leader (a linearizable read), then every change, in
// order. It may skip intermediate states when changes come faster than the
// receiver reads, but never leaves the receiver on a stale one: the value
// waiting to be received is always the latest. An election without a leader
// is reported as a LeaderInfo with Token 0.
//
// Nothing polls: changes come from the entries this replica applies, and a
// change wakes all of an election's observers at once, however many there
// are. Observers that start together share their first read. The channel is
// closed when ctx ends or the node closes; for an invalid election name it
// carries one LeaderInfo whose Err wraps ErrInvalidName, and is closed. Until the group can serve the first read, nothing is
// sent. A replica cut off from its group applies nothing, so its observers
// see no change until it catches up; Leader gives a linearizable answer.
func (n *Node) Observe(ctx context.Context, election string) <-chan LeaderInfo {
	out, err := session.Observe(n.h, ctx, election, fromLeader)
	if err != nil {
		return closedWith(LeaderInfo{Election: election, Err: err})
	}
	return out
}

// closedWith returns a closed channel that holds v.
func closedWith[T any](v T) <-chan T {
	out := make(chan T, 1)
	out <- v
	close(out)
	return out
}
