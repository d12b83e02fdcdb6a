package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The errors the machinery returns. Package fencelock re-exports each under
// the same name, with the contract in its doc comment; they live here
// because this package returns them and cannot import its caller.
var (
	ErrLocked             = errors.New("fencelock: lock is held")
	ErrNotHeld            = errors.New("fencelock: lock not held")
	ErrSessionExpired     = errors.New("fencelock: session expired")
	ErrSessionClosed      = errors.New("fencelock: session closed")
	ErrRevoked            = errors.New("fencelock: revoked by an operator")
	ErrInvalidResumeToken = errors.New("fencelock: invalid resume token")
	ErrElectionTaken      = errors.New("fencelock: election has a leader")
	ErrNotLeader          = errors.New("fencelock: not the leader")
	ErrPermitConflict     = errors.New("fencelock: permit count conflicts with the lock's")
	ErrMaxHoldExceeded    = errors.New("fencelock: maximum hold exceeded")

	// The errors of the arguments the front door checks (names.go,
	// calls.go, limits.go).
	ErrInvalidName        = errors.New("fencelock: invalid lock name")
	ErrInvalidSessionName = errors.New("fencelock: invalid session name")
	ErrValueTooLarge      = errors.New("fencelock: election value too large")
	ErrInvalidMaxHold     = errors.New("fencelock: invalid maximum hold")

	ErrLimitExceeded   = errors.New("fencelock: limit exceeded")
	ErrTooManySessions = fmt.Errorf("%w: too many sessions in the group", ErrLimitExceeded)
	ErrTooManyLocks    = fmt.Errorf("%w: too many locks in the session", ErrLimitExceeded)
	ErrTooManyWaiters  = fmt.Errorf("%w: too many waiters for the lock", ErrLimitExceeded)
	ErrTooManyPending  = fmt.Errorf("%w: too many requests in flight in the session", ErrLimitExceeded)
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
