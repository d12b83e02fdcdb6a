package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/proposer"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/lockapi"
)

// The errors the root package re-exports under the same names; their
// meaning is documented there. They are the leaf's (package lockapi), so
// that a client which links no engine tests for the same values.
var (
	ErrUnavailable   = lockapi.ErrUnavailable
	ErrClosed        = lockapi.ErrClosed
	ErrInvalidConfig = lockapi.ErrInvalidConfig
	ErrMembership    = lockapi.ErrMembership
	ErrIDRemoved     = lockapi.ErrIDRemoved
	ErrRemoved       = lockapi.ErrRemoved
	ErrUnknownGroup  = lockapi.ErrUnknownGroup
	ErrNoQuorum      = lockapi.ErrNoQuorum

	// The group table's (table.go, tableops.go).
	ErrGroupExists      = lockapi.ErrGroupExists
	ErrInvalidGroupName = lockapi.ErrInvalidGroupName
	ErrInvalidVoters    = lockapi.ErrInvalidVoters
	ErrGroupHoldsLocks  = lockapi.ErrGroupHoldsLocks
	ErrGroupDropped     = lockapi.ErrGroupDropped
	ErrGroupMoved       = lockapi.ErrGroupMoved
)

// errUnavailable is the error of a call whose context ended before the
// group answered (groupcore.Unavailable), with last, the last attempt's
// error, in the library's words (describe).
func errUnavailable(ctxErr, last error) error {
	if last != nil {
		last = errors.New(describe(last))
	}
	return groupcore.Unavailable(ctxErr, last)
}

// noQuorumError is returned when a call fails because its group has had no
// leader for a while and this replica does not reach a quorum of its
// voters: both errors.Is(err, ErrUnavailable) and errors.Is(err,
// ErrNoQuorum) hold, and errors.Is(err, ctx.Err()) too when it is the
// context's end that stopped the call. The message says which voters this
// replica reaches, so that the caller learns what the server's log knows.
type noQuorumError struct {
	q      quorumView
	ctxErr error // nil when the call failed before its context ended
}

func (e *noQuorumError) Error() string {
	s := fmt.Sprintf("%v: %s", ErrNoQuorum, e.q)
	if e.ctxErr != nil {
		s += " (" + e.ctxErr.Error() + ")"
	}
	return s
}

func (e *noQuorumError) Unwrap() []error {
	if e.ctxErr == nil {
		return []error{ErrUnavailable, ErrNoQuorum}
	}
	return []error{ErrUnavailable, ErrNoQuorum, e.ctxErr}
}

// describe says what a raft error means, in the library's words: callers
// should not have to know Dragonboat's.
func describe(err error) string {
	switch {
	case errors.Is(err, dragonboat.ErrShardNotReady):
		return "this replica is not ready yet: it is starting, or catching up with the group"
	case errors.Is(err, dragonboat.ErrTimeout):
		return "no answer in time: no leader, or no quorum reachable"
	case errors.Is(err, context.DeadlineExceeded):
		return "the call's deadline came before the group answered"
	case errors.Is(err, proposer.ErrLeaderChanged), errors.Is(err, dragonboat.ErrCanceled):
		return "the raft leader changed"
	case errors.Is(err, dragonboat.ErrSystemBusy):
		return "this replica is overloaded"
	case errors.Is(err, dragonboat.ErrShardNotFound), errors.Is(err, dragonboat.ErrShardClosed):
		return "this replica is not running"
	case errors.Is(err, dragonboat.ErrRejected):
		return "the group rejected the request"
	}
	return err.Error()
}

// plural is "1 lock", "2 locks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
