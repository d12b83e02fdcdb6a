package fencelock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// renewer keeps a node's sessions alive: one goroutine for all of them
// (but those renewed by KeepAlive calls, WithExternalKeepAlive's), sending
// one keep-alive batch (fsm.KindKeepAliveBatch) for every session due, so
// that a replica with many sessions costs the group a few commands per
// keep-alive period, not one per session.
//
// Each session keeps its own schedule (renewals: a keep-alive every TTL/3
// from the previous send, sooner after a failure, at most
// maxKeepAlivesInFlight in flight), and its own lease: a batch
// acknowledged extends each session it renewed from the batch's send time,
// exactly as its own keep-alive would have. A round sends whatever is due
// and, with it, whatever would be due within half its period: renewing
// early costs a few bytes in a batch already sent, and it brings sessions
// opened at different times onto one schedule, so a steady node sends about
// one batch per period.
type renewer struct {
	n    *Node
	kick chan struct{}

	mu       sync.Mutex
	sessions map[uint64]*Session // their sched fields are guarded by mu too
	// minPeriod is the shortest period of the sessions at the last round:
	// the renewer wakes within it, so a session added with a period no
	// shorter needs no wake-up of its own (a round costs a look at every
	// session, and a thousand opens should not cost a thousand rounds).
	minPeriod time.Duration
}

func newRenewer(n *Node) *renewer {
	return &renewer{n: n, kick: make(chan struct{}, 1), sessions: make(map[uint64]*Session)}
}

// add starts renewing s, its first keep-alive a period after sent.
func (r *renewer) add(s *Session, sent clock.Instant) {
	r.mu.Lock()
	s.sched = renewals{period: s.ttl / 3, retry: max(s.ttl/20, r.n.cfg.RTT), next: sent.Add(s.ttl / 3)}
	r.sessions[s.id] = s
	soon := len(r.sessions) == 1 || s.sched.period < r.minPeriod
	r.mu.Unlock()
	if soon {
		r.wake()
	}
}

// remove stops renewing s.
func (r *renewer) remove(s *Session) {
	r.mu.Lock()
	if r.sessions[s.id] == s {
		delete(r.sessions, s.id)
	}
	r.mu.Unlock()
}

func (r *renewer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run renews until the node closes.
func (r *renewer) run() {
	ctx, cancel := context.WithCancel(r.n.ctx)
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	defer cancel() // runs first: it ends the batches still in flight
	c := r.n.cfg.clock
	t := c.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := r.round(ctx, &inFlight)
		t.Stop()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-r.kick:
		}
	}
}

// round sends a batch for the sessions due and returns how long until the
// next round. It wakes at least once in the shortest period of its
// sessions, so after a suspend (which delays every runtime timer, the
// sessions' deadline timers too) it is the first to look at their
// deadlines, by the boot clock.
func (r *renewer) round(ctx context.Context, inFlight *sync.WaitGroup) time.Duration {
	r.mu.Lock()
	all := make([]*Session, 0, len(r.sessions))
	for _, s := range r.sessions {
		all = append(all, s)
	}
	r.mu.Unlock()
	c := r.n.cfg.clock
	now := clock.Boot(c)
	at := c.Now()
	for _, s := range all {
		s.pollAt(now) // outside r.mu: it may end s, and an end calls remove
	}

	wait := time.Hour
	var due, early []*Session
	r.mu.Lock()
	r.minPeriod = time.Hour
	for _, s := range r.sessions {
		r.minPeriod = min(r.minPeriod, s.sched.period)
		wait = min(wait, s.sched.period)
		if s.ended() {
			delete(r.sessions, s.id)
			continue
		}
		if s.heldBack() {
			continue // frozen or paused by a test: its thaw wakes the renewer
		}
		switch {
		case s.sched.due(now, 0):
			due = append(due, s)
		case s.sched.due(now, s.sched.period/2):
			early = append(early, s)
			fallthrough
		default:
			wait = min(wait, s.sched.wait(now))
		}
	}
	// Only what is due starts a round, so a retry waits its time; what
	// would be due soon joins it.
	if len(due) > 0 {
		due = append(due, early...)
		for _, s := range due {
			s.sched.sent(now)
		}
	}
	r.mu.Unlock()
	if len(due) == 0 {
		return wait
	}
	slices.SortFunc(due, func(a, b *Session) int { return cmp.Compare(a.id, b.id) })
	for _, batch := range r.batches(due) {
		inFlight.Add(1)
		go func() {
			defer inFlight.Done()
			r.send(ctx, batch, now, at)
		}()
	}
	return wait
}

// batches splits sessions (in ID order) into the batches to send: up to
// fsm.MaxRenewals to a command, and a session whose commands a test routes
// through a link of its own (withCommit) alone.
func (r *renewer) batches(sessions []*Session) [][]*Session {
	var out [][]*Session
	shared := sessions[:0:0]
	for _, s := range sessions {
		if s.linked {
			out = append(out, []*Session{s})
		} else {
			shared = append(shared, s)
		}
	}
	for len(shared) > 0 {
		n := min(len(shared), fsm.MaxRenewals)
		out = append(out, shared[:n])
		shared = shared[n:]
	}
	return out
}

// send commits one batch, sent at sent by the boot clock and at at by
// clock.Now, and hands each of its sessions the outcome.
func (r *renewer) send(ctx context.Context, batch []*Session, sent clock.Instant, at time.Time) {
	cmd := fsm.Command{Kind: fsm.KindKeepAliveBatch, Owner: r.n.cfg.ReplicaID, Renew: make([]fsm.Renewal, len(batch))}
	// Past sent + TTL − margin an acknowledgement extends nothing for a
	// session, and the batches sent after this one are those that can help.
	life := batch[0].lease.life
	for i, s := range batch {
		cmd.Renew[i] = fsm.Renewal{Session: s.id, Floor: s.floor()}
		life = min(life, s.lease.life)
	}
	ctx, cancel := context.WithTimeout(ctx, life)
	defer cancel()
	commit := commitFunc(r.n.r.Propose)
	if batch[0].linked {
		commit = batch[0].commit
	}
	res, err := commit(ctx, cmd)
	if err == nil && res.Status != fsm.OK && res.Status != fsm.Refused {
		err = fmt.Errorf("fencelock: keep-alive batch: unexpected reply %v", res.Status)
	}
	if err != nil && ctx.Err() == nil {
		r.n.log.Debug("fencelock: keep-alive batch failed", "sessions", len(batch), "err", err)
	}
	ok := err == nil
	var refused map[uint64]bool
	if ok && res.Status == fsm.Refused {
		refused = make(map[uint64]bool, len(res.Refused))
		for _, id := range res.Refused {
			refused[id] = true
		}
	}
	for _, s := range batch {
		switch {
		case refused[s.id]:
			// The group does not know the session any more, or it lives on
			// with another holder (resumed elsewhere): it is over here.
			s.expired()
		case ok:
			s.extend(sent, at)
		}
	}
	now := clock.Boot(r.n.cfg.clock)
	r.mu.Lock()
	for _, s := range batch {
		s.sched.answered(ok, now)
	}
	r.mu.Unlock()
	r.wake() // a slot is free, or a failure made the next one due sooner
}
