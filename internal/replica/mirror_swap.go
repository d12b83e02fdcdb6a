package replica

// A mirror and a shard of the same group take over from each other on a
// host that runs only its own groups (PlaceOwn), as the group table moves
// the group's voters:
//
//   - onto this host: the shard starts (it joins, and catches up from the
//     group's log or a snapshot) while the mirror goes on feeding the
//     group's Sink; the shard's events are held back (holdSink). Once the
//     shard has applied as far as the mirror, the mirror stops feeding the
//     Sink, and inside one read of the shard's state machine (serialised
//     with its updates) the Sink is handed the shard's state (Restored) and
//     the shard's events flow from then on: nothing is lost or told twice.
//     Calls waiting on the mirror for an index wait for it on the shard.
//   - off this host (stopGroup with mirror): the shard stops after raft
//     removed it, and a mirror starts from what the Sink has seen: its
//     state reaches the Sink once it is at least as new (package mirror).

import (
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/grouptable"
	"github.com/fencelock/fencelock/internal/replica/mirror"
	"github.com/fencelock/fencelock/internal/replica/shard"
)

// holdSink is a shard's Sink while its group's mirror feeds the real one.
type holdSink struct {
	inner Sink
	mu    sync.Mutex
	open  bool
}

func (s *holdSink) isOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

func (s *holdSink) Applied(index uint64, events []fsm.Event) {
	if s.isOpen() {
		s.inner.Applied(index, events)
	}
}

func (s *holdSink) Restored(st *fsm.State) {
	if s.isOpen() {
		s.inner.Restored(st)
	}
}

func (s *holdSink) Removed() {
	if s.isOpen() {
		s.inner.Removed()
	}
}

func (s *holdSink) Dropped(err error) {
	if !s.isOpen() {
		return
	}
	if d, ok := s.inner.(Dropper); ok {
		d.Dropped(err)
		return
	}
	s.inner.Removed()
}

// held is r's Sink if it holds r's events back while the group's mirror
// feeds the real one (a shard that took over from a mirror), else nil.
func held(r *Replica) *holdSink {
	hs, _ := r.Sink.(*holdSink)
	return hs
}

// waiting reports whether r's events are still held back for its mirror.
func waiting(r *Replica) bool { hs := held(r); return hs != nil && !hs.isOpen() }

// handover makes shard r, started where mirror m fed the group's Sink,
// take over from it (see above). It gives up when either stops.
func (h *Host) handover(m *mirror.Mirror, r *Replica) {
	mr := &m.Core
	poll := time.NewTicker(max(h.cfg.RTT, time.Millisecond))
	defer poll.Stop()
	wait := func(done func() bool) bool {
		for !done() {
			select {
			case <-poll.C:
			case <-r.Done():
				return false
			case <-h.closed:
				return false
			}
		}
		return true
	}
	if !wait(func() bool { return r.AppliedIndex.Load() >= mr.AppliedIndex.Load() }) {
		return
	}
	// A shard that stopped meanwhile (the table moved the group off
	// again) leaves the mirror feeding the Sink.
	last, ok := m.Retire(r.Done())
	if !ok {
		return
	}
	if !wait(func() bool { return r.AppliedIndex.Load() >= last }) {
		return
	}
	hs := held(r)
	_, admitted, err := r.LocalRead(fsm.Query(func(st *fsm.State) any {
		hs.mu.Lock()
		hs.open = true
		hs.mu.Unlock()
		hs.inner.Restored(st)
		return nil
	}))
	if !admitted { // a stop in flight destroys the state machine
		return
	}
	if err != nil {
		r.Logger().Warn("fencelock: the group's shard could not take over from its mirror here", "err", err)
		return
	}
	m.HandedOver(r, fmt.Errorf("%w: group %q: %w; retry", ErrUnavailable, mr.Name(), shard.ErrMovedHere))
	h.setMu.Lock()
	if h.mirror(mr.Name()) == m {
		h.setMirror(mr.Name(), nil)
	}
	h.setMu.Unlock()
	m.Stop()
	r.Logger().Info("fencelock: the group's shard took over from its mirror here")
}

// followMirrors stops the mirrors of groups the table dropped (the
// sessions' parts end, as where the group ran), and gives the others the
// table's voters.
func (h *Host) followMirrors(v grouptable.View) {
	h.setMu.Lock()
	defer h.setMu.Unlock()
	for _, m := range h.mirrorList() {
		mr := &m.Core
		e, ok := v.Find(mr.Name())
		if ok && e.Shard == mr.ShardID() {
			mr.SetVoters(e.Voters)
			continue
		}
		why := fmt.Errorf("%w: %q", ErrGroupDropped, mr.Name())
		mr.Gone.Store(&why)
		h.setMirror(mr.Name(), nil)
		if d, ok := mr.Sink.(Dropper); ok {
			d.Dropped(why)
		} else {
			mr.Sink.Removed()
		}
		m.Stop()
	}
}
