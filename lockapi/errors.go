package lockapi

import (
	"errors"
	"fmt"
)

// The sentinel errors. Errors returned by fencelock, its HTTP service and
// its client wrap one of them (or a context error); test with errors.Is.
// Package fencelock documents when each of its calls returns which.
var (
	// ErrLocked is returned by a TryAcquire (TryLock) that found the lock
	// held.
	ErrLocked = errors.New("fencelock: lock is held")
	// ErrNotHeld is returned by a Release naming a grant that is no longer
	// current (released, or passed on after its session expired).
	ErrNotHeld = errors.New("fencelock: lock not held")
	// ErrStaleToken is returned by a fencer that refused a token lower than
	// one it admitted.
	ErrStaleToken = errors.New("fencelock: stale fencing token")
	// ErrSessionExpired: the session could not be renewed in time, or the
	// group expired it. Its locks are lost; open a new session.
	ErrSessionExpired = errors.New("fencelock: session expired")
	// ErrSessionClosed: the session was closed by its holder.
	ErrSessionClosed = errors.New("fencelock: session closed")
	// ErrUnavailable: the group could not be reached (no leader, no quorum,
	// no replica answering) before the context ended. Nothing was granted.
	ErrUnavailable = errors.New("fencelock: group unavailable")
	// ErrNoQuorum comes with ErrUnavailable when the call's group has had
	// no raft leader for a while and the replica asked reaches fewer than
	// a quorum of its voters. Nothing was granted.
	ErrNoQuorum = errors.New("fencelock: no quorum")
	// ErrInvalidName: a lock or election name is empty, longer than
	// MaxNameLen bytes, not UTF-8, or contains NUL (see CheckName).
	ErrInvalidName = errors.New("fencelock: invalid lock name")
	// ErrInvalidSessionName: a session name longer than MaxSessionNameLen
	// bytes, not UTF-8, or containing NUL (see CheckSessionName).
	ErrInvalidSessionName = errors.New("fencelock: invalid session name")
	// ErrClosed: the node (or client) was closed.
	ErrClosed = errors.New("fencelock: node closed")
	// ErrInvalidConfig: a configuration or an argument that cannot be used.
	ErrInvalidConfig = errors.New("fencelock: invalid configuration")
	// ErrInvalidTTL: a session TTL or safety margin outside the allowed
	// range.
	ErrInvalidTTL = errors.New("fencelock: invalid session TTL")
	// ErrNoLeader: an election has no leader.
	ErrNoLeader = errors.New("fencelock: election has no leader")
	// ErrRevoked: an operator revoked the grant or ended the session.
	ErrRevoked = errors.New("fencelock: revoked by an operator")
	// ErrInvalidResumeToken: a resume token that is not one a session made,
	// or whose session cannot be resumed here.
	ErrInvalidResumeToken = errors.New("fencelock: invalid resume token")
	// ErrElectionTaken is returned by a TryCampaign (TryLead) that found the
	// election led by another candidate; nothing was queued.
	ErrElectionTaken = errors.New("fencelock: election has a leader")
	// ErrNotLeader: Proclaim or Resign named a term of leadership that is
	// over.
	ErrNotLeader = errors.New("fencelock: not the leader")
	// ErrValueTooLarge: a leader's value is longer than MaxValueLen bytes.
	ErrValueTooLarge = errors.New("fencelock: election value too large")
	// ErrPermitConflict: a semaphore request named another permit count
	// than the semaphore has, or a lock request named a semaphore (or the
	// other way round). Nothing changed.
	ErrPermitConflict = errors.New("fencelock: permit count conflicts with the lock's")
	// ErrInvalidPermits: a semaphore's permit count is below 1 or above
	// MaxHoldersPerLock.
	ErrInvalidPermits = errors.New("fencelock: invalid permit count")
	// ErrInvalidLockDelay: a lock-delay (WithLockDelay) below 0 or above
	// the longest allowed.
	ErrInvalidLockDelay = errors.New("fencelock: invalid lock-delay")
	// ErrInvalidMaxHold: a maximum hold (WithMaxHold) below twice the
	// session's safety margin or above MaxHoldLimit.
	ErrInvalidMaxHold = errors.New("fencelock: invalid maximum hold")
	// ErrMaxHoldExceeded: the grant's maximum hold (WithMaxHold) ran out,
	// by the holder's clock or at the group. The lock passes on.
	ErrMaxHoldExceeded = errors.New("fencelock: maximum hold exceeded")

	// ErrLimitExceeded: the group refused a request that would exceed one
	// of its limits; nothing changed. Each limit has its own error, which
	// wraps this one.
	ErrLimitExceeded = errors.New("fencelock: limit exceeded")
	// ErrTooManySessions: the group keeps its most sessions already.
	ErrTooManySessions = fmt.Errorf("%w: too many sessions in the group", ErrLimitExceeded)
	// ErrTooManyLocks: the session holds and waits for its most locks
	// already.
	ErrTooManyLocks = fmt.Errorf("%w: too many locks in the session", ErrLimitExceeded)
	// ErrTooManyWaiters: the lock's queue is as long as it grows.
	ErrTooManyWaiters = fmt.Errorf("%w: too many waiters for the lock", ErrLimitExceeded)
	// ErrTooManyPending: the session has its most requests in flight.
	ErrTooManyPending = fmt.Errorf("%w: too many requests in flight in the session", ErrLimitExceeded)
)

// The errors of membership changes, of a removed replica and of the group
// table.
var (
	// ErrMembership: a membership change that cannot be made.
	ErrMembership = errors.New("fencelock: invalid membership change")
	// ErrIDRemoved: the replica ID was removed from the group; removed IDs
	// are never used again.
	ErrIDRemoved = errors.New("fencelock: replica ID was removed from the group")
	// ErrRemoved: the replica was removed from the group.
	ErrRemoved = errors.New("fencelock: this replica was removed from the group")
	// ErrUnknownGroup: a call named a group (a name's "@group") that the
	// replica asked does not run.
	ErrUnknownGroup = errors.New("fencelock: unknown group")
	// ErrGroupExists: a create named a group the table has.
	ErrGroupExists = errors.New("fencelock: group exists")
	// ErrInvalidGroupName: a group name that is not 1 to 32 of [a-z0-9-].
	ErrInvalidGroupName = errors.New("fencelock: invalid group name")
	// ErrInvalidVoters: voters that are not 1, 3 or 5 distinct members.
	ErrInvalidVoters = errors.New("fencelock: invalid voters")
	// ErrGroupHoldsLocks: a drop without force found the group holding a
	// lock or a leadership. Nothing changed.
	ErrGroupHoldsLocks = errors.New("fencelock: group holds locks")
	// ErrGroupDropped: the group was dropped; its grants and calls in
	// flight end with it.
	ErrGroupDropped = errors.New("fencelock: group dropped")
	// ErrGroupMoved: the replica no longer runs the group; use one that
	// does.
	ErrGroupMoved = errors.New("fencelock: group moved off this replica")
)

// StaleTokenError is the error of a fencer that refused a token.
type StaleTokenError struct {
	Resource string
	Token    uint64 // the token refused
	Highest  uint64 // the highest token admitted for Resource
}

func (e *StaleTokenError) Error() string {
	return fmt.Sprintf("fencelock: stale fencing token %d for %q: token %d was already admitted",
		e.Token, e.Resource, e.Highest)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleTokenError) Is(target error) bool { return target == ErrStaleToken }
