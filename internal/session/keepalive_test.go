package session

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/replica"
)

// KeepAlive's error for parts not renewed wraps ErrUnavailable and each
// cause, but not a part's end: from a named group, ErrSessionExpired would
// read as the end of the whole session (and over HTTP, as 404). Its text
// names every group.
func TestNotRenewedError(t *testing.T) {
	cause := fmt.Errorf("%w: %w", replica.ErrUnavailable, context.DeadlineExceeded)
	err := error(&NotRenewedError{Groups: []string{"", "b", "c"}, Errs: []error{cause, ErrSessionExpired, replica.ErrNoQuorum}})
	require.ErrorIs(t, err, replica.ErrUnavailable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, replica.ErrNoQuorum)
	require.False(t, errors.Is(err, ErrSessionExpired), "a part's end is not the session's")
	var nr *NotRenewedError
	require.ErrorAs(t, err, &nr)
	require.Equal(t, []string{"", "b", "c"}, nr.Groups)
	msg := err.Error()
	for _, want := range []string{"the default group", `group "b"`, `group "c"`, ErrSessionExpired.Error()} {
		require.Contains(t, msg, want)
	}
	// Fewer causes than groups (never made so, but not a panic).
	require.Contains(t, (&NotRenewedError{Groups: []string{"b"}}).Error(), `group "b"`)
}
