package groupcore

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/lockapi"
)

// What a call on either maker of a group's role shares: how its context
// asks it to fail early, and the error it fails with when its context
// ends first.

type failFastKey struct{}

// FailFast returns ctx marked so that a call on a group made with it fails
// with the cause once the group has had no leader for a while, instead of
// waiting for the group until ctx ends (internal/replica's FailFast).
func FailFast(ctx context.Context) context.Context {
	return context.WithValue(ctx, failFastKey{}, true)
}

// IsFailFast reports whether FailFast marked ctx.
func IsFailFast(ctx context.Context) bool { return ctx.Value(failFastKey{}) != nil }

// Unavailable is the error of a call whose context ended before the group
// answered: both errors.Is(err, lockapi.ErrUnavailable) and errors.Is(err,
// ctxErr) hold, and last, what the last attempt met (nil if nothing), is
// kept for diagnosis in the message, in the words the maker gives it.
func Unavailable(ctxErr, last error) error {
	return &unavailableError{ctxErr: ctxErr, last: last}
}

type unavailableError struct {
	ctxErr, last error
}

func (e *unavailableError) Error() string {
	if e.last == nil {
		return fmt.Sprintf("%v: %v", lockapi.ErrUnavailable, e.ctxErr)
	}
	return fmt.Sprintf("%v: %v (last attempt: %s)", lockapi.ErrUnavailable, e.ctxErr, e.last.Error())
}

func (e *unavailableError) Unwrap() []error { return []error{lockapi.ErrUnavailable, e.ctxErr} }
