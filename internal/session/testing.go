package session

import (
	"time"

	"github.com/fencelock/fencelock/internal/clock"
)

// Testing is the test hooks' view of a Session (CockroachDB's
// TestingAccessor): what internal/testhook offers the tests, typed. Nothing
// on the paths users take calls it or branches on what it sets, beyond the
// nil check of a part's pause.
type Testing struct{ s *Session }

// Testing returns s's test accessor.
func (s *Session) Testing() Testing { return Testing{s} }

// Freeze stops (or, with false, restarts) the background work of every
// part of the session: its keep-alives and the close of a part given up.
func (t Testing) Freeze(frozen bool) {
	for _, p := range t.parts() {
		p.setFrozen(frozen)
	}
}

// Pause holds (or, with false, releases) every part's news and deadline
// check too, as a process that is not scheduled.
func (t Testing) Pause(paused bool) {
	for _, p := range t.parts() {
		p.setPaused(paused)
	}
}

// LastKeepAlive returns when the last keep-alive (or the open) of the
// default part that its group acknowledged was sent, by clock.Now.
func (t Testing) LastKeepAlive() time.Time {
	p := t.s.def
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked
}

// StopDeadlineTimer stops the default part's deadline timer, as a suspend
// of the machine delays the runtime's timers.
func (t Testing) StopDeadlineTimer() {
	p := t.s.def
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer.Stop()
}

func (t Testing) parts() []*Part {
	t.s.mu.Lock()
	defer t.s.mu.Unlock()
	out := make([]*Part, 0, len(t.s.parts))
	for _, p := range t.s.parts {
		out = append(out, p)
	}
	return out
}

// Done returns the session's done channel without checking its deadline
// first, as Session.Done does: for a test that asks whether a timer or the
// renewer noticed the deadline.
func (t Testing) Done() <-chan struct{} { return t.s.done }

// Deadline returns the default part's deadline by the holder's clock
// (clock.Boot of Clock).
func (t Testing) Deadline() clock.Instant {
	p := t.s.def
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lease.deadline
}

// Clock returns the clock the session times its lease by.
func (t Testing) Clock() clock.Clock { return t.s.h.cfg.Clock }
