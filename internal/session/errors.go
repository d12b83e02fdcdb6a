package session

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/lockapi"
)

// The errors the machinery returns are the leaf's (package lockapi), so
// that a client which links no engine tests for the same values; package
// fencelock re-exports each under the same name, with the contract in its
// doc comment.
var (
	ErrLocked             = lockapi.ErrLocked
	ErrNotHeld            = lockapi.ErrNotHeld
	ErrSessionExpired     = lockapi.ErrSessionExpired
	ErrSessionClosed      = lockapi.ErrSessionClosed
	ErrRevoked            = lockapi.ErrRevoked
	ErrInvalidResumeToken = lockapi.ErrInvalidResumeToken
	ErrElectionTaken      = lockapi.ErrElectionTaken
	ErrNotLeader          = lockapi.ErrNotLeader
	ErrPermitConflict     = lockapi.ErrPermitConflict
	ErrMaxHoldExceeded    = lockapi.ErrMaxHoldExceeded

	// The errors of the arguments the front door checks (names.go,
	// calls.go, limits.go).
	ErrInvalidName        = lockapi.ErrInvalidName
	ErrInvalidSessionName = lockapi.ErrInvalidSessionName
	ErrValueTooLarge      = lockapi.ErrValueTooLarge
	ErrInvalidMaxHold     = lockapi.ErrInvalidMaxHold

	ErrLimitExceeded   = lockapi.ErrLimitExceeded
	ErrTooManySessions = lockapi.ErrTooManySessions
	ErrTooManyLocks    = lockapi.ErrTooManyLocks
	ErrTooManyWaiters  = lockapi.ErrTooManyWaiters
	ErrTooManyPending  = lockapi.ErrTooManyPending
)

// LimitError maps the group's LimitExceeded reply to its sentinel.
func LimitError(value uint64) error {
	switch fsm.Limit(value) {
	case fsm.LimitSessions:
		return ErrTooManySessions
	case fsm.LimitLocksPerSession:
		return ErrTooManyLocks
	case fsm.LimitWaitersPerLock:
		return ErrTooManyWaiters
	case fsm.LimitPendingRequests:
		return ErrTooManyPending
	}
	return fmt.Errorf("%w: limit %d", ErrLimitExceeded, value)
}

// reasonErr is a grant's or a part's error for the reason the group gave.
func reasonErr(r fsm.Reason) error {
	switch r {
	case fsm.ReasonExpired:
		return ErrSessionExpired
	case fsm.ReasonClosed:
		return ErrSessionClosed
	case fsm.ReasonCancelled:
		return context.Canceled
	case fsm.ReasonRevoked:
		return ErrRevoked
	case fsm.ReasonMaxHold:
		return ErrMaxHoldExceeded
	}
	return ErrNotHeld
}

// depositionErr is a leadership's error for the reason its term ended.
func depositionErr(r fsm.Reason) error {
	if r == fsm.ReasonReleased {
		return ErrNotLeader
	}
	return reasonErr(r)
}
