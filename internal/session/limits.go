package session

// The state machine's constants and formats that the root publishes: it
// names them through this package, so that only this package (and
// internal/replica below it) knows internal/fsm.

import (
	"fmt"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// The group's limits (see fencelock's limits.go for each one's contract).
const (
	MaxSessions          = fsm.MaxSessions
	MaxLocksPerSession   = fsm.MaxLocksPerSession
	MaxWaitersPerLock    = fsm.MaxWaitersPerLock
	MaxPendingPerSession = fsm.MaxPendingPerSession
	MaxHoldersPerLock    = fsm.MaxHoldersPerLock
	MaxNameLen           = fsm.MaxNameLen
	MaxValueLen          = fsm.MaxValueLen
	MaxSessionNameLen    = fsm.MaxSessionNameLen
	MaxContended         = fsm.MaxContended

	MaxLockDelay time.Duration = fsm.MaxLockDelay
	MaxHoldLimit time.Duration = fsm.MaxHoldLimit
)

// CodecVersion is the log entry format this build writes.
func CodecVersion() int { return fsm.CodecVersion() }

// SnapshotVersion is the snapshot format this build writes.
func SnapshotVersion() int { return fsm.SnapshotVersion() }

// CheckSessionName refuses a session name the group would refuse, with an
// error wrapping ErrInvalidSessionName that says why.
func CheckSessionName(name string) error {
	if err := fsm.CheckSessionName(name); err != nil {
		return fmt.Errorf("%w: %s", ErrInvalidSessionName, strings.TrimPrefix(err.Error(), fsm.ErrInvalidSessionName.Error()+": "))
	}
	return nil
}

// Gate is the pair of formats a group writes (its version gate).
type Gate = fsm.Gate

// The version gate's errors (see fencelock's errors.go).
var (
	ErrVersionGated  = fsm.ErrVersionGated
	ErrVersionTooNew = fsm.ErrVersionTooNew
)
