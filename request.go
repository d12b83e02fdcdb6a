package fencelock

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// request runs one Acquire, TryAcquire or Campaign (cmd names the kind, the
// lock or election and, for Campaign, the value) as a new request of s: it
// proposes it, and if it is queued waits until it is granted, ctx ends or
// the session ends, and returns the grant.
//
// If ctx ends while queued, the request is withdrawn (and a grant that raced
// ahead of the withdrawal is given back) and ctx.Err() is returned. If the
// group cannot be reached before ctx ends, the outcome is unknown, so the
// request is withdrawn too.
func (s *Session) request(ctx context.Context, cmd fsm.Command, o acquireOptions) (*grant, error) {
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		return nil, err
	}
	seq := s.nextSeq
	s.nextSeq++
	s.pending[seq] = struct{}{}
	// The send time precedes every apply of the request's entry, so it is
	// a time before the leader's timer of a maximum hold started.
	w := &waiter{ready: make(chan struct{}), maxHold: o.maxHold, sent: clock.Boot(s.clock)}
	s.waiters[seq] = w
	s.mu.Unlock()

	cmd.Session, cmd.Seq, cmd.Floor, cmd.MaxHold = s.id, seq, s.floor(), uint64(o.maxHold)
	res, err := s.n.r.Propose(ctx, cmd)
	if err != nil {
		// The request may be queued or even granted. If the group has a
		// leader the withdrawal takes one commit: wait for it, so the call
		// returns out of the queue. Else withdraw in the background.
		var wait time.Duration
		if s.n.r.Leader() != 0 {
			wait = s.n.cfg.ProposalTimeout
		}
		s.withdraw(seq, cmd, wait)
		return nil, err
	}
	what := fmt.Sprintf("%v %q", cmd.Kind, cmd.Name)
	switch res.Status {
	case fsm.Granted:
		mode := grantMode{election: cmd.Kind == fsm.KindCampaign, shared: cmd.Kind == fsm.KindAcquireShared, permits: int(cmd.Permits)}
		g := s.granted(seq, cmd.Name, mode, res.Value, cmd.Value, clock.Instant{})
		s.finish(seq)
		if g == nil {
			return nil, s.Err()
		}
		return g, nil
	case fsm.Queued:
		// The reply is in hand: the request no longer holds the floor back.
		// From here the grant arrives as an event; a late duplicate of the
		// request is ignored by the group (below the floor, or answered from
		// its reply cache).
		s.replied(seq)
		if o.position != nil {
			stop := make(chan struct{})
			joined := s.reportPositions(stop, cmd.Name, cmd.Kind == fsm.KindCampaign, seq, o.position)
			defer func() { close(stop); joined() }()
		}
	case fsm.Locked:
		s.finish(seq)
		if cmd.Kind == fsm.KindCampaign {
			return nil, fmt.Errorf("%w: %q", ErrElectionTaken, cmd.Name)
		}
		return nil, fmt.Errorf("%w: %q", ErrLocked, cmd.Name)
	case fsm.Conflict:
		s.finish(seq)
		if res.Value == 0 {
			return nil, fmt.Errorf("%w: %q is a lock, not a semaphore", ErrPermitConflict, cmd.Name)
		}
		return nil, fmt.Errorf("%w: %q is a semaphore of %d permits", ErrPermitConflict, cmd.Name, res.Value)
	case fsm.UnknownSession:
		s.finish(seq)
		s.expired()
		return nil, ErrSessionExpired
	case fsm.LimitExceeded:
		s.finish(seq)
		return nil, fmt.Errorf("%s: %w", what, limitError(res.Value))
	default:
		s.finish(seq)
		return nil, fmt.Errorf("fencelock: %s: unexpected reply %v", what, res.Status)
	}
	select {
	case <-w.ready:
		s.finish(seq)
		return w.grant, nil
	case <-s.done:
		s.finish(seq)
		return nil, s.Err()
	case <-ctx.Done():
		s.withdraw(seq, cmd, s.n.cfg.ProposalTimeout)
		return nil, ctx.Err()
	}
}

// withdraw takes request seq back from the group: out of its queue, or, if
// it was granted meanwhile, the lock is released. It tries for up to wait,
// then keeps trying in the background; until it succeeds a grant to the
// request is held by nobody, and the cancel will release it.
func (s *Session) withdraw(seq uint64, req fsm.Command, wait time.Duration) {
	cancel := func(ctx context.Context) bool {
		_, err := s.n.r.Propose(ctx, fsm.Command{Kind: fsm.KindCancel, Session: s.id, Target: seq, Floor: s.floor(),
			Name: req.Name, Election: req.Kind == fsm.KindCampaign})
		if err == nil || s.Err() != nil {
			s.finish(seq)
			return true
		}
		return false
	}
	done := false
	if wait > 0 {
		ctx, stop := context.WithTimeout(s.n.ctx, wait)
		done = cancel(ctx)
		stop()
	}
	if !done {
		s.n.goBackground(func() {
			ctx, stop := context.WithCancel(s.n.ctx)
			defer stop()
			go func() {
				select {
				case <-s.done:
					stop()
				case <-ctx.Done():
				}
			}()
			cancel(ctx)
		})
	}
}
