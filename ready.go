package fencelock

import "context"

// Ready reports whether this replica serves every group it runs with the
// group's current state: it knows the group's raft leader and has applied
// everything that leader had committed when Ready asked (a linearizable
// read: one round trip to each group's leader, the groups at once). It is
// what a load balancer's readiness probe asks (GET /readyz).
//
// A named group this replica has not yet seen elect its first leader (it
// knows no group ID for it: a group just created, or one this replica
// started to run a moment ago) is not waited for: a new group never makes
// a replica unready, so adding one never holds up a rollout. Once the
// group has had a leader here, Ready answers for it like for any other.
//
// It returns nil, or the error of the first group (in Status.Groups order)
// that is not ready, naming it: ErrUnavailable (with ErrNoQuorum when that
// is the cause, and ctx's error when ctx ended first), ErrRemoved or
// ErrClosed.
func (n *Node) Ready(ctx context.Context) error {
	return n.h.Ready(ctx)
}
