package fencelock

import (
	"sync"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// pause is the test-only machinery behind internal/testhook's Freeze and
// Pause, kept out of Session's own fields: a Session gets one only when a
// test first freezes or pauses it, and every check on the paths users take
// is one atomic load of a nil pointer otherwise.
//
// Frozen stops the session's keep-alives (its process is cut off, its
// clock runs on). Paused also holds back the group's news and the deadline
// timer's check until the pause ends, as for a process that is not
// scheduled (SIGSTOP, a long GC pause): what piled up then runs in order.
type pause struct {
	mu       sync.Mutex
	frozen   bool
	paused   bool
	draining bool          // after a pause, until deferred is empty
	deferred []func()      // what waits for the end of a pause
	overdue  bool          // the deadline timer fired during a pause
	thaw     chan struct{} // closed when a freeze or pause ends
}

func init() {
	testhook.Register(func(s any, frozen bool) { s.(*Session).setFrozen(frozen) })
	testhook.RegisterPause(func(s any, paused bool) { s.(*Session).setPaused(paused) })
	testhook.RegisterClock(func(cfg any, c clock.Clock) { cfg.(*Config).clock = c })
}

// hold returns the session's pause, made on first use.
func (s *Session) hold() *pause {
	if p := s.pause.Load(); p != nil {
		return p
	}
	s.pause.CompareAndSwap(nil, &pause{thaw: make(chan struct{})})
	return s.pause.Load()
}

// heldBack reports whether the session is frozen or paused: its
// keep-alives wait for the thaw.
func (s *Session) heldBack() bool {
	p := s.pause.Load()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen || p.paused
}

// isPaused reports whether a pause holds the session's news back.
func (s *Session) isPaused() bool {
	p := s.pause.Load()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// deadlineDuringPause records, if the session is paused, that its deadline
// timer fired, to be checked when the pause ends; it reports whether it did.
func (s *Session) deadlineDuringPause() bool {
	p := s.pause.Load()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paused {
		p.overdue = true
	}
	return p.paused
}

// later runs f now, or at the end of a pause.
func (s *Session) later(f func()) {
	if p := s.pause.Load(); p != nil {
		p.mu.Lock()
		if p.paused || p.draining {
			p.deferred = append(p.deferred, f)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	f()
}

// waitThawed blocks while the session is frozen or paused; it reports false
// if the node closed or stop was closed meanwhile.
func (s *Session) waitThawed(stop <-chan struct{}) bool {
	p := s.pause.Load()
	if p == nil {
		return true
	}
	for {
		p.mu.Lock()
		held, thaw := p.frozen || p.paused, p.thaw
		p.mu.Unlock()
		if !held {
			return true
		}
		select {
		case <-thaw:
		case <-s.n.closed:
			return false
		case <-stop:
			return false
		}
	}
}

// setFrozen implements testhook.Freeze and Thaw.
func (s *Session) setFrozen(frozen bool) {
	p := s.hold()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == frozen {
		return
	}
	p.frozen = frozen
	p.wakeLocked()
	s.n.renew.wake()
}

// setPaused implements testhook.Pause and Resume.
func (s *Session) setPaused(paused bool) {
	p := s.hold()
	p.mu.Lock()
	if p.paused == paused {
		p.mu.Unlock()
		return
	}
	p.paused = paused
	p.wakeLocked()
	s.n.renew.wake()
	if paused {
		p.mu.Unlock()
		return
	}
	// A process waking from a pause runs what piled up when its goroutines
	// get to it, not before its application looks: so do it in the
	// background, in order, ahead of anything newer.
	p.draining = true
	overdue := p.overdue
	p.overdue = false
	p.mu.Unlock()
	started := s.n.goBackground(func() {
		for {
			p.mu.Lock()
			run := p.deferred
			p.deferred = nil
			if len(run) == 0 {
				p.draining = false
				p.mu.Unlock()
				break
			}
			p.mu.Unlock()
			for _, f := range run {
				f()
			}
		}
		if overdue {
			s.checkDeadline()
		}
	})
	if !started { // the node is closing: the session is over anyway
		p.mu.Lock()
		p.draining, p.deferred = false, nil
		p.mu.Unlock()
	}
}

// wakeLocked wakes waitThawed once neither frozen nor paused.
func (p *pause) wakeLocked() {
	if !p.frozen && !p.paused {
		close(p.thaw)
		p.thaw = make(chan struct{})
	}
}
