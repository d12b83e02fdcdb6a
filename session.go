package fencelock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

// SessionOption configures NewSession.
type SessionOption func(*sessionOptions)

type sessionOptions struct{ ttl, margin time.Duration }

// WithTTL sets the session's time to live: how long the group keeps it, and
// its locks, after the last keep-alive it applied. Between 100ms and 24h;
// the default is Config.SessionTTL.
func WithTTL(ttl time.Duration) SessionOption { return func(o *sessionOptions) { o.ttl = ttl } }

// WithSafetyMargin sets how long before TTL runs out, by the holder's own
// clock, the holder gives the session up when it could not renew it. The
// default is TTL/5. The margin must cover the difference in clock rates
// between holder and leader over one TTL, plus the holder's scheduling delay
// in noticing: with TTL 10s and margin 2s, the clocks may drift apart by 20%
// before a holder could act after the group expired it. Clocks need not be
// synchronised: only rates matter.
func WithSafetyMargin(m time.Duration) SessionOption {
	return func(o *sessionOptions) { o.margin = m }
}

// Session is a holder of locks, normally one per process. A goroutine of its
// own renews it with keep-alives every TTL/3, apart from the caller's work,
// so a busy caller does not look dead. If the group hears nothing for TTL it
// expires the session and frees all its locks in one step, passing each to
// the head of its queue.
//
// The holder stops first: if no keep-alive sent at time t is acknowledged by
// t + TTL − margin (holder's clock), Done closes and Err returns
// ErrSessionExpired, even while the group is unreachable, before the group
// could expire it. A session that is done stays done; open a new one. The
// library closes a dead session at the group as soon as it can, so its locks
// free promptly.
//
// Its methods are safe for concurrent use.
type Session struct {
	n      *Node
	id     uint64
	ttl    time.Duration
	margin time.Duration
	clock  clock.Clock
	done   chan struct{}

	mu       sync.Mutex
	nextSeq  uint64
	pending  map[uint64]struct{} // requests whose reply may still be needed
	waiters  map[uint64]*waiter  // Acquire and Campaign calls by request number
	grants   map[uint64]*grant   // locks and leaderships held, by token
	deadline time.Time           // holder's clock: give up after this
	acked    time.Time           // send time of the last keep-alive acknowledged
	timer    clock.Timer         // fires at deadline
	err      error
	frozen   bool
	paused   bool          // testhook.Pause: timers and the group's news wait too
	draining bool          // after a pause, until deferred is empty
	deferred []func()      // what waits for the end of a pause
	overdue  bool          // the deadline timer fired during a pause
	thaw     chan struct{} // closed when a freeze or pause ends
}

// waiter is one Acquire or Campaign call waiting for its grant.
type waiter struct {
	ready chan struct{} // closed when granted
	grant *grant
}

func init() {
	testhook.Register(func(s any, frozen bool) { s.(*Session).setFrozen(frozen) })
	testhook.RegisterPause(func(s any, paused bool) { s.(*Session).setPaused(paused) })
	testhook.RegisterClock(func(cfg any, c clock.Clock) { cfg.(*Config).clock = c })
}

// NewSession opens a session on the group, owned by this node.
func (n *Node) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: n.cfg.SessionTTL}
	for _, f := range opts {
		f(&o)
	}
	if o.ttl < minTTL || o.ttl > maxTTL {
		return nil, fmt.Errorf("%w: %v outside [%v, %v]", ErrInvalidTTL, o.ttl, minTTL, maxTTL)
	}
	if o.margin == 0 {
		o.margin = o.ttl / 5
	}
	if o.margin < 0 || o.margin >= o.ttl {
		return nil, fmt.Errorf("%w: safety margin %v must lie in (0, %v)", ErrInvalidTTL, o.margin, o.ttl)
	}
	sent := n.cfg.clock.Now()
	res, err := n.propose(ctx, fsm.Command{
		Kind:  fsm.KindOpenSession,
		Nonce: rand.Uint64() | 1, // identifies retries of this open; never 0
		TTL:   uint64(o.ttl),
		Owner: n.cfg.ReplicaID,
	})
	if err != nil {
		return nil, err
	}
	if res.Status == fsm.LimitExceeded {
		return nil, fmt.Errorf("open session: %w", limitError(res.Value))
	}
	if res.Status != fsm.OK {
		return nil, fmt.Errorf("fencelock: open session: %v", res.Status)
	}
	// The group's timer may have started when the first attempt was applied,
	// so the holder's deadline counts from the first send. If retries took
	// long, renew at once rather than start with a session close to its end.
	if n.cfg.clock.Now().Sub(sent) > o.ttl/3 {
		renewed := n.cfg.clock.Now()
		ka, err := n.propose(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: res.Value, Floor: 1})
		if err != nil {
			return nil, err
		}
		if ka.Status != fsm.OK {
			return nil, fmt.Errorf("%w: before its first renewal", ErrSessionExpired)
		}
		sent = renewed
	}
	s := &Session{
		n: n, id: res.Value, ttl: o.ttl, margin: o.margin, clock: n.cfg.clock,
		done:     make(chan struct{}),
		nextSeq:  1,
		pending:  make(map[uint64]struct{}),
		waiters:  make(map[uint64]*waiter),
		grants:   make(map[uint64]*grant),
		deadline: sent.Add(o.ttl - o.margin),
		acked:    sent,
		thaw:     make(chan struct{}),
	}
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		return nil, ErrClosed
	}
	n.sessions[s.id] = s
	n.wg.Add(1)
	n.mu.Unlock()
	s.mu.Lock()
	s.timer = s.clock.AfterFunc(s.deadline.Sub(s.clock.Now()), s.checkDeadline)
	s.mu.Unlock()
	go func() {
		defer n.wg.Done()
		s.keepAlive()
	}()
	return s, nil
}

// ID returns the session's ID, unique in the group for good.
func (s *Session) ID() uint64 { return s.id }

// TTL returns the session's time to live.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session is over for its holder: closed, expired,
// not renewed in time, or its node closed. Every lock and every leadership it
// held is lost then.
//
// Done (like Err, Lock.Done and Lock.Err) also checks the deadline by the
// holder's clock when called, so a process that wakes from a pause longer
// than the TTL finds it closed on its first look, without waiting for its
// timer goroutine to run.
func (s *Session) Done() <-chan struct{} {
	s.poll()
	return s.done
}

// Err returns nil before Done is closed and why the session ended after:
// ErrSessionExpired, ErrSessionClosed or ErrClosed.
func (s *Session) Err() error {
	s.poll()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// poll ends the session if its deadline has passed.
func (s *Session) poll() {
	s.mu.Lock()
	live := s.err == nil && !s.paused && s.clock.Now().Before(s.deadline)
	over := s.err == nil && !s.paused && !live
	s.mu.Unlock()
	if over && s.end(ErrSessionExpired) {
		s.n.goBackground(s.closeAtGroup)
	}
}

// Close ends the session at the group, releasing all its locks (each passes
// to the head of its queue) in one step. If ctx ends first, the session is
// still over for its holder, and the group frees its locks once it can or
// when its TTL runs out. Closing a session that is over returns nil.
func (s *Session) Close(ctx context.Context) error {
	if s.Err() != nil {
		return nil
	}
	_, err := s.n.propose(ctx, fsm.Command{Kind: fsm.KindCloseSession, Session: s.id})
	s.end(ErrSessionClosed)
	if err != nil {
		s.n.goBackground(s.closeAtGroup)
		return err
	}
	s.n.forget(s)
	return nil
}

// keepAlive renews the session every TTL/3, and more often while renewals
// fail, until the session ends.
func (s *Session) keepAlive() {
	interval, retry := s.ttl/3, max(s.ttl/20, s.n.cfg.RTT)
	t := s.clock.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C():
		}
		if !s.waitThawed(s.done) {
			return
		}
		ctx, cancel := context.WithTimeout(s.n.ctx, s.ttl)
		err := s.renew(ctx)
		cancel()
		switch {
		case err == nil:
			t.Reset(interval)
		case errors.Is(err, ErrSessionExpired):
			return
		default: // unreachable for now; the deadline decides when it is over
			t.Reset(retry)
		}
	}
}

// renew sends one keep-alive; on success the holder's deadline moves to its
// send time + TTL − margin.
func (s *Session) renew(ctx context.Context) error {
	sent := s.clock.Now()
	res, err := s.n.propose(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: s.id, Floor: s.floor()})
	switch {
	case err != nil:
		return err
	case res.Status == fsm.UnknownSession:
		s.expired()
		return ErrSessionExpired
	case res.Status != fsm.OK:
		return fmt.Errorf("fencelock: keep-alive: unexpected reply %v", res.Status)
	}
	s.extend(sent, sent.Add(s.ttl-s.margin))
	return nil
}

func (s *Session) extend(sent, deadline time.Time) {
	s.mu.Lock()
	if deadline.After(s.deadline) {
		s.deadline = deadline
	}
	if sent.After(s.acked) {
		s.acked = sent
	}
	s.mu.Unlock()
}

// checkDeadline runs when the deadline timer fires: it re-arms for an
// extended deadline, or ends the session.
func (s *Session) checkDeadline() {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	if s.paused {
		s.overdue = true
		s.mu.Unlock()
		return
	}
	if left := s.deadline.Sub(s.clock.Now()); left > 0 {
		s.timer.Reset(left)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if s.end(ErrSessionExpired) {
		s.n.log.Warn("fencelock: session not renewed in time; its holder gave it up", "session", s.id, "ttl", s.ttl)
		s.n.goBackground(s.closeAtGroup)
	}
}

// closeAtGroup closes a session its holder gave up, so that its locks free
// now rather than when the group's timer runs out.
func (s *Session) closeAtGroup() {
	defer s.n.forget(s)
	if !s.waitThawed(nil) {
		return
	}
	_, _ = s.n.propose(s.n.ctx, fsm.Command{Kind: fsm.KindCloseSession, Session: s.id})
}

// expired ends the session after the group said it does not know it.
func (s *Session) expired() {
	s.end(ErrSessionExpired)
	s.n.forget(s)
}

// end makes the session over for its holder; it reports whether this call
// ended it.
func (s *Session) end(err error) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	s.err = err
	close(s.done)
	if s.timer != nil {
		s.timer.Stop()
	}
	grants := s.grants
	s.grants = make(map[uint64]*grant)
	s.mu.Unlock()
	for _, g := range grants {
		g.lose(err)
	}
	return true
}

// begin starts request seq; its reply is needed until finish(seq).
func (s *Session) begin() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	seq := s.nextSeq
	s.nextSeq++
	s.pending[seq] = struct{}{}
	return seq
}

// replied records that the reply to request seq arrived; the request may
// still wait for a grant.
func (s *Session) replied(seq uint64) {
	s.mu.Lock()
	delete(s.pending, seq)
	s.mu.Unlock()
}

// finish ends request seq.
func (s *Session) finish(seq uint64) {
	s.mu.Lock()
	delete(s.pending, seq)
	delete(s.waiters, seq)
	s.mu.Unlock()
}

// floor is the lowest request number whose reply may still be needed; the
// group forgets replies below it and ignores requests below it.
func (s *Session) floor() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.nextSeq
	for seq := range s.pending {
		f = min(f, seq)
	}
	return f
}

// setFrozen implements testhook.Freeze and Thaw.
func (s *Session) setFrozen(frozen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen == frozen {
		return
	}
	s.frozen = frozen
	s.wakeLocked()
}

// setPaused implements testhook.Pause and Resume.
func (s *Session) setPaused(paused bool) {
	s.mu.Lock()
	if s.paused == paused {
		s.mu.Unlock()
		return
	}
	s.paused = paused
	s.wakeLocked()
	if paused {
		s.mu.Unlock()
		return
	}
	// A process waking from a pause runs what piled up when its goroutines
	// get to it, not before its application looks: so do it in the
	// background, in order, ahead of anything newer.
	s.draining = true
	overdue := s.overdue
	s.overdue = false
	s.mu.Unlock()
	started := s.n.goBackground(func() {
		for {
			s.mu.Lock()
			run := s.deferred
			s.deferred = nil
			if len(run) == 0 {
				s.draining = false
				s.mu.Unlock()
				break
			}
			s.mu.Unlock()
			for _, f := range run {
				f()
			}
		}
		if overdue {
			s.checkDeadline()
		}
	})
	if !started { // the node is closing: the session is over anyway
		s.mu.Lock()
		s.draining, s.deferred = false, nil
		s.mu.Unlock()
	}
}

// wakeLocked wakes waitThawed once neither frozen nor paused.
func (s *Session) wakeLocked() {
	if !s.frozen && !s.paused {
		close(s.thaw)
		s.thaw = make(chan struct{})
	}
}

// later runs f now, or at the end of a pause.
func (s *Session) later(f func()) {
	s.mu.Lock()
	if s.paused || s.draining {
		s.deferred = append(s.deferred, f)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	f()
}

// waitThawed blocks while the session is frozen or paused; it reports false
// if the node closed or stop was closed meanwhile.
func (s *Session) waitThawed(stop <-chan struct{}) bool {
	for {
		s.mu.Lock()
		frozen, thaw := s.frozen || s.paused, s.thaw
		s.mu.Unlock()
		if !frozen {
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
