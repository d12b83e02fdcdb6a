package fencelock

import (
	"time"

	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/lockapi"
)

// AcquireOption configures one Acquire, AcquireShared, AcquireSemaphore or
// Campaign call (and their Try forms).
type AcquireOption = lockapi.AcquireOption

// WithQueuePosition makes a call that has to wait report where it waits:
// f(1) at the head of the lock's queue (or the election's candidates),
// f(n) with n−1 requests ahead, first when the group queued the request and
// again each time its place changes, as this replica applies the changes
// (never out of order; a lagging replica reports late). f is not called for
// a request granted at once or refused, nor after the call returned. f runs
// on a goroutine of its own and must not block: the call waits for it
// before it returns.
func WithQueuePosition(f func(position int)) AcquireOption { return lockapi.WithQueuePosition(f) }

// WithMaxHold bounds how long the grant lasts: the group frees it d after
// it made it, even while the session lives, and grants the lock (or the
// election) to the head of its queue. The holder stops first: its Lock's
// (or Leadership's) Done closes, and Err returns ErrMaxHoldExceeded, at d
// minus the session's safety margin by its own clock, counted from when it
// sent the request (or, for a request granted out of the queue, from the
// send of the last keep-alive acknowledged before the grant), which is
// before the group's clock started. It is the lease argument of sessions
// applied to one grant.
//
// The group leader times d from when it applied the grant, and a new
// leader restarts it in full: a leader change makes a hold longer, never
// shorter. A resumed session (WithResume) does not keep a grant with a
// maximum hold. d must lie in [2 × safety margin, MaxHoldLimit], else the
// call fails with ErrInvalidMaxHold; 0, the default, is no bound.
func WithMaxHold(d time.Duration) AcquireOption { return lockapi.WithMaxHold(d) }

// acquireOpts folds opts into a request's options; the request checks
// them (internal/session).
func acquireOpts(opts []AcquireOption) session.RequestOptions {
	o := lockapi.ReadAcquireOptions(opts...)
	return session.RequestOptions{MaxHold: o.MaxHold, Position: o.QueuePosition}
}
