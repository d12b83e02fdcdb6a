package groupcore

import "github.com/fencelock/fencelock/internal/fsm"

// Sink receives what a group applies. It runs on the apply goroutine,
// after the group's own bookkeeping (the expiry timers, the counters, the
// group's ID) has taken what it needs, so it must not block.
type Sink interface {
	// Applied reports the events of the entry at index; events is valid
	// only during the call.
	Applied(index uint64, events []fsm.Event)
	// Restored reports that a snapshot replaced the whole state: the events
	// of the entries it covered were never reported. st is valid only
	// during the call.
	Restored(st *fsm.State)
	// Removed reports that the group removed this replica: nothing will
	// complete from now on.
	Removed()
}

// Dropper is implemented by a Sink that wants to know why its group
// stopped running on this host for good (the group table dropped the
// group, or moved its voters off this host): err wraps lockapi's
// ErrGroupDropped or ErrGroupMoved. A Sink without it is told Removed. It may be called more
// than once, and not on the apply goroutine.
type Dropper interface {
	Dropped(err error)
}

// Idler may be implemented by a Sink: Idle reports that nothing uses the
// group on this host now (no session's part, no watch), so that a mirror
// of it may stop until the group is used again. A Sink without it keeps
// its mirror for the host's life.
type Idler interface {
	Idle() bool
}
