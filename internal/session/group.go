package session

import (
	"context"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// Group is a group's role as this package uses it: the one way a session
// reaches a group, whatever this process runs of it. internal/replica has
// two makers: a local Dragonboat shard (the process votes in the group or
// runs a non-voting copy of it) and a mirror (a copy fed by a voter of a
// group this process does not run). This package knows neither; it only
// calls these methods.
//
// What the group applies comes back on the replica.Sink the Host gave for
// the group (Host.Sink), the subscription to applied events: a maker
// reports there, on its apply goroutine, whichever way it learns of them.
type Group interface {
	// Propose applies cmd in the group, retrying through leader changes
	// until ctx ends; the group applies each command at most once, so a
	// retry is safe. It fails with an error wrapping replica.ErrUnavailable
	// (and ctx.Err() if ctx ended first), fsm.ErrVersionGated for a command
	// the group cannot write yet, or why the group stopped here.
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	// Read runs q as a linearizable read, failing as Propose does.
	Read(ctx context.Context, q fsm.Query) (any, error)
	// StaleRead runs q on this process's copy of the group's state, without
	// asking the group: it may lag behind the leader. Once the copy
	// stopped it fails with replica.ErrClosed or why the group stopped here.
	StaleRead(q fsm.Query) (any, error)
	// Members reads the group's membership linearizably.
	Members(ctx context.Context) (replica.Membership, error)

	// Leader is the group's leader as last known here; 0 when unknown.
	Leader() uint64
	// GroupID is the group's ID once known here (every fence carries it);
	// 0 before.
	GroupID() uint64

	// Go runs f in the background unless the group is closing here; its
	// Close waits for f. It reports whether f was started.
	Go(f func()) bool
}
