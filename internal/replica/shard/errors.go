package shard

import (
	"context"
	"errors"
	"fmt"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/proposer"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/lockapi"
)

// ErrMovedOff is why a call on a shard this host stopped running fails: the
// group goes on through a mirror, and the call, retried, reaches it.
var ErrMovedOff = errors.New("the group's voters moved off this replica; it is reached through a replica that runs it now")

// ErrMovedHere is why a call on a mirror whose group now runs here fails.
var ErrMovedHere = errors.New("the group now runs on this replica")

// MovedOff is the error of a call on the shard of group name once its
// voters moved off this host (ErrUnavailable and ErrMovedOff): the call,
// retried, reaches the group through its mirror.
func MovedOff(name string) error {
	return fmt.Errorf("%w: group %q: %w; retry", lockapi.ErrUnavailable, name, ErrMovedOff)
}

// Unavailable is the error of a call whose context ended before the
// group answered (groupcore.Unavailable), with last, the last attempt's
// error, in the library's words (describe).
func Unavailable(ctxErr, last error) error {
	if last != nil {
		last = errors.New(Describe(last))
	}
	return groupcore.Unavailable(ctxErr, last)
}

// noQuorumError is returned when a call fails because its group has had no
// leader for a while and this replica does not reach a quorum of its
// voters: both errors.Is(err, lockapi.ErrUnavailable) and errors.Is(err,
// lockapi.ErrNoQuorum) hold, and errors.Is(err, ctx.Err()) too when it is the
// context's end that stopped the call. The message says which voters this
// replica reaches, so that the caller learns what the server's log knows.
type noQuorumError struct {
	q      quorumView
	ctxErr error // nil when the call failed before its context ended
}

func (e *noQuorumError) Error() string {
	s := fmt.Sprintf("%v: %s", lockapi.ErrNoQuorum, e.q)
	if e.ctxErr != nil {
		s += " (" + e.ctxErr.Error() + ")"
	}
	return s
}

func (e *noQuorumError) Unwrap() []error {
	if e.ctxErr == nil {
		return []error{lockapi.ErrUnavailable, lockapi.ErrNoQuorum}
	}
	return []error{lockapi.ErrUnavailable, lockapi.ErrNoQuorum, e.ctxErr}
}

// Describe says what a raft error means, in the library's words: callers
// should not have to know Dragonboat's.
func Describe(err error) string {
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

// Plural is "1 lock", "2 locks".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
