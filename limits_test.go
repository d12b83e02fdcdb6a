package fencelock

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/session"
)

// The group's LimitExceeded replies map to one sentinel per limit, each of
// which is also ErrLimitExceeded.
func TestLimitErrors(t *testing.T) {
	for limit, want := range map[fsm.Limit]error{
		fsm.LimitSessions:        ErrTooManySessions,
		fsm.LimitLocksPerSession: ErrTooManyLocks,
		fsm.LimitWaitersPerLock:  ErrTooManyWaiters,
		fsm.LimitPendingRequests: ErrTooManyPending,
		99:                       ErrLimitExceeded,
	} {
		err := session.LimitError(uint64(limit))
		require.ErrorIs(t, err, want)
		require.ErrorIs(t, err, ErrLimitExceeded)
	}
	require.False(t, errors.Is(ErrTooManyLocks, ErrTooManyWaiters))
}
