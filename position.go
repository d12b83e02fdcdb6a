package fencelock

import "github.com/fencelock/fencelock/internal/fsm"

// reportPositions calls report with the place of request seq of s in the
// queue of lock name (with election, among the candidates of election
// name), 1 for the head, each time it changes as this replica applies the
// queue's changes, until stop closes or the request leaves the queue. The
// first call reports the place the request queued at.
//
// Like Watch it reads this replica's copy after each change it applies (no
// polling): a replica that lags reports late, never out of order. The
// returned joined waits until it no longer reports.
func (s *Session) reportPositions(stop <-chan struct{}, name string, election bool, seq uint64, report func(int)) (joined func()) {
	n := s.n
	key := queueKey(name, election)
	w := n.lockWatches.add(key)
	done := make(chan struct{})
	started := n.goBackground(func() {
		defer close(done)
		defer n.lockWatches.remove(key, w)
		last := 0
		for {
			v, err := n.r.StaleRead(func(st *fsm.State) any { return st.Position(s.id, seq) })
			if err != nil {
				return
			}
			pos := v.(int)
			if pos == 0 {
				return // granted, withdrawn, or the session is over
			}
			if pos != last {
				report(pos)
				last = pos
			}
			select {
			case <-w.changed:
			case <-stop:
				return
			case <-n.ctx.Done():
				return
			}
		}
	})
	if !started {
		n.lockWatches.remove(key, w)
		close(done)
	}
	return func() { <-done }
}
