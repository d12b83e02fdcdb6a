package fencelock

import (
	"time"

	"github.com/fencelock/fencelock/internal/session"
)

// The group's limits. They are constants of the replicated state machine, the
// same on every replica; a request beyond one fails with an error wrapping
// ErrLimitExceeded and changes nothing. Changing one changes how the log is
// applied, so it ships as a new state-machine version.
const (
	// MaxSessions is the most sessions a group keeps at once (ErrTooManySessions).
	MaxSessions = session.MaxSessions
	// MaxLocksPerSession is the most locks and elections one session holds
	// and waits for together (ErrTooManyLocks).
	MaxLocksPerSession = session.MaxLocksPerSession
	// MaxWaitersPerLock is the longest a lock's or an election's queue grows
	// (ErrTooManyWaiters).
	MaxWaitersPerLock = session.MaxWaitersPerLock
	// MaxPendingPerSession is the most requests one session has in flight
	// at once, counted from its oldest unanswered one (ErrTooManyPending):
	// the group keeps each one's reply, so that a retry never applies twice.
	MaxPendingPerSession = session.MaxPendingPerSession
	// MaxHoldersPerLock is the most holders a lock has at once in shared
	// mode, and the largest permit count of a semaphore (ErrInvalidPermits).
	// A shared request beyond it waits like one the holders do not admit.
	MaxHoldersPerLock = session.MaxHoldersPerLock
	// MaxNameLen is the longest lock or election name, in bytes (ErrInvalidName).
	MaxNameLen = session.MaxNameLen
	// MaxValueLen is the longest leader value, in bytes (ErrValueTooLarge).
	MaxValueLen = session.MaxValueLen
)

// The bounds of the timed options.
const (
	// MaxLockDelay is the longest lock-delay (WithLockDelay,
	// ErrInvalidLockDelay): 60s, as in Consul. A delay makes a lock
	// unavailable to everyone, and a leader change restarts it in full.
	MaxLockDelay time.Duration = session.MaxLockDelay
	// MaxHoldLimit is the longest maximum hold (WithMaxHold,
	// ErrInvalidMaxHold): 24h, the longest session TTL.
	MaxHoldLimit time.Duration = session.MaxHoldLimit
)
