package session

import "sync"

// pause is the test-only machinery behind Testing's Freeze and Pause, kept
// out of Part's own fields: a Part gets one only when a test first freezes
// or pauses it, and every check on the paths users take is one atomic load
// of a nil pointer otherwise.
//
// Frozen stops the part's keep-alives (its process is cut off, its clock
// runs on). Paused also holds back the group's news and the deadline
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

// hold returns the part's pause, made on first use.
func (p *Part) hold() *pause {
	if q := p.pause.Load(); q != nil {
		return q
	}
	p.pause.CompareAndSwap(nil, &pause{thaw: make(chan struct{})})
	return p.pause.Load()
}

// heldBack reports whether the part is frozen or paused: its keep-alives
// wait for the thaw.
func (p *Part) heldBack() bool {
	return p.underPause(func(q *pause) bool { return q.frozen || q.paused })
}

// isPaused reports whether a pause holds the part's news back.
func (p *Part) isPaused() bool {
	return p.underPause(func(q *pause) bool { return q.paused })
}

// deadlineDuringPause records, if the part is paused, that its deadline
// timer fired, to be checked when the pause ends; it reports whether it did.
func (p *Part) deadlineDuringPause() bool {
	return p.underPause(func(q *pause) bool {
		if q.paused {
			q.overdue = true
		}
		return q.paused
	})
}

// underPause answers f of the part's pause under its lock; false for a part
// that was never frozen or paused (it has no pause).
func (p *Part) underPause(f func(q *pause) bool) bool {
	q := p.pause.Load()
	if q == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return f(q)
}

// later runs f now, or at the end of a pause.
func (p *Part) later(f func()) {
	if q := p.pause.Load(); q != nil {
		q.mu.Lock()
		if q.paused || q.draining {
			q.deferred = append(q.deferred, f)
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
	}
	f()
}

// waitThawed blocks while the part is frozen or paused; it reports false
// if the Host closed or stop was closed meanwhile.
func (p *Part) waitThawed(stop <-chan struct{}) bool {
	q := p.pause.Load()
	if q == nil {
		return true
	}
	for {
		q.mu.Lock()
		held, thaw := q.frozen || q.paused, q.thaw
		q.mu.Unlock()
		if !held {
			return true
		}
		select {
		case <-thaw:
		case <-p.rt.h.closed:
			return false
		case <-stop:
			return false
		}
	}
}

// setFrozen implements Testing.Freeze.
func (p *Part) setFrozen(frozen bool) {
	q := p.hold()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.frozen == frozen {
		return
	}
	q.frozen = frozen
	q.wakeLocked()
	p.rt.renew.wake()
}

// setPaused implements Testing.Pause.
func (p *Part) setPaused(paused bool) {
	q := p.hold()
	q.mu.Lock()
	if q.paused == paused {
		q.mu.Unlock()
		return
	}
	q.paused = paused
	q.wakeLocked()
	p.rt.renew.wake()
	if paused {
		q.mu.Unlock()
		return
	}
	// A process waking from a pause runs what piled up when its goroutines
	// get to it, not before its application looks: so do it in the
	// background, in order, ahead of anything newer.
	q.draining = true
	overdue := q.overdue
	q.overdue = false
	q.mu.Unlock()
	started := p.rt.goBackground(func() {
		for {
			q.mu.Lock()
			run := q.deferred
			q.deferred = nil
			if len(run) == 0 {
				q.draining = false
				q.mu.Unlock()
				break
			}
			q.mu.Unlock()
			for _, f := range run {
				f()
			}
		}
		if overdue {
			p.checkDeadline()
		}
	})
	if !started { // the Host is closing: the part is over anyway
		q.mu.Lock()
		q.draining, q.deferred = false, nil
		q.mu.Unlock()
	}
}

// wakeLocked wakes waitThawed once neither frozen nor paused.
func (q *pause) wakeLocked() {
	if !q.frozen && !q.paused {
		close(q.thaw)
		q.thaw = make(chan struct{})
	}
}
