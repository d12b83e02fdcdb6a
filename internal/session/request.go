package session

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/testhook"
)

// RequestOptions are the checked options of one Acquire or Campaign call.
type RequestOptions struct {
	MaxHold  time.Duration
	Position func(int) // WithQueuePosition's report; nil: none
}

// begin numbers the part's next request: it holds the floor back until
// finish (or replied), and, with w, waits for its grant under its number.
// A request that waits for a grant (w) fails with the part's error if the
// part is over; a call that gives something back goes to the group anyway,
// whose answer says what became of the grant.
func (p *Part) begin(w *waiter) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if w != nil && p.err != nil {
		return 0, p.err
	}
	seq := p.nextSeq
	p.nextSeq++
	p.pending[seq] = struct{}{}
	if w != nil {
		p.waiters[seq] = w
	}
	return seq, nil
}

// replyErr is the one table from a reply's status to the error of a
// numbered request: nil for the statuses the caller handles (handled), and
// for every other the error that ends the call with nothing granted or
// changed.
func (p *Part) replyErr(cmd fsm.Command, res fsm.Result, handled ...fsm.Status) error {
	if slices.Contains(handled, res.Status) {
		return nil
	}
	what := fmt.Sprintf("%v %q", cmd.Kind, cmd.Name)
	switch res.Status {
	case fsm.Locked:
		if cmd.Kind == fsm.KindCampaign {
			return fmt.Errorf("%w: %q", ErrElectionTaken, cmd.Name)
		}
		return fmt.Errorf("%w: %q", ErrLocked, cmd.Name)
	case fsm.Conflict:
		if res.Value == 0 {
			return fmt.Errorf("%w: %q is a lock, not a semaphore", ErrPermitConflict, cmd.Name)
		}
		return fmt.Errorf("%w: %q is a semaphore of %d permits", ErrPermitConflict, cmd.Name, res.Value)
	case fsm.UnknownSession:
		p.expired()
		return ErrSessionExpired
	case fsm.NotHeld:
		if cmd.Kind == fsm.KindResign || cmd.Kind == fsm.KindProclaim {
			return fmt.Errorf("%w: %q term %d", ErrNotLeader, cmd.Name, cmd.Token)
		}
		return fmt.Errorf("%w: %q token %d", ErrNotHeld, cmd.Name, cmd.Token)
	case fsm.LimitExceeded:
		return fmt.Errorf("%s: %w", what, LimitError(res.Value))
	case fsm.Dropped:
		return p.groupDropped()
	}
	return fmt.Errorf("fencelock: %s: unexpected reply %v", what, res.Status)
}

// call proposes cmd as the part's next numbered request that waits for
// nothing but its reply (Release, Resign, Proclaim).
func (p *Part) call(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	seq, err := p.begin(nil)
	if err != nil {
		return fsm.Result{}, err
	}
	defer p.finish(seq)
	r, err := p.rt.replica(ctx)
	if err != nil {
		return fsm.Result{}, err
	}
	cmd.Session, cmd.Seq, cmd.Floor = p.id, seq, p.floor()
	testhook.Requested(ctx, p.rt.group, p.id, seq)
	return p.propose(ctx, r, cmd)
}

// request runs one Acquire, TryAcquire or Campaign (cmd names the kind, the
// lock or election and, for Campaign, the value) as a new request of p: it
// proposes it, and if it is queued waits until it is granted, ctx ends or
// the part ends, and returns the grant.
//
// If ctx ends while queued, the request is withdrawn (and a grant that raced
// ahead of the withdrawal is given back) and ctx.Err() is returned. If the
// group cannot be reached before ctx ends, the outcome is unknown, so the
// request is withdrawn too.
//
// cmd is filled in with the request's session and number, for the caller's
// span.
//
// A waiting call for what a request kept by the part's adoption asks for
// (see Adopt) is answered by that request instead: it waits for the kept
// request's grant, or returns it at once if it came first.
func (p *Part) request(ctx context.Context, cmd *fsm.Command, o RequestOptions) (*Grant, error) {
	if cmd.Wait {
		if seq, w := p.rejoin(cmd); w != nil {
			return p.awaitKept(ctx, cmd, seq, w, o)
		}
	}
	r, err := p.rt.replica(ctx)
	if err != nil {
		return nil, err
	}
	// The send time precedes every apply of the request's entry, so it is
	// a time before the leader's timer of a maximum hold started.
	w := &waiter{ready: make(chan struct{}), maxHold: o.MaxHold, sent: clock.Boot(p.clock)}
	seq, err := p.begin(w)
	if err != nil {
		return nil, err
	}
	withdrawn := false
	defer func() {
		if !withdrawn { // a withdrawal finishes the request when it is applied
			p.finish(seq)
		}
	}()
	cmd.Session, cmd.Seq, cmd.Floor, cmd.MaxHold = p.id, seq, p.floor(), uint64(o.MaxHold)
	testhook.Requested(ctx, p.rt.group, p.id, seq)
	res, err := p.propose(ctx, r, *cmd)
	if err != nil {
		// The request may be queued or even granted. If the group has a
		// leader the withdrawal takes one commit: wait for it, so the call
		// returns out of the queue. Else withdraw in the background.
		var wait time.Duration
		if r.Leader() != 0 {
			wait = p.rt.h.cfg.ProposalTimeout
		}
		withdrawn = true
		p.withdraw(seq, *cmd, wait)
		return nil, err
	}
	if err := p.replyErr(*cmd, res, fsm.Granted, fsm.Queued); err != nil {
		return nil, err
	}
	ahead := -1 // waiters ahead at entry, when traced
	switch res.Status {
	case fsm.Granted:
		if g := p.granted(seq, cmd.Name, cmdMode(cmd), res.Value, cmd.Value, clock.Instant{}); g != nil {
			if span := trace.SpanFromContext(ctx); span.IsRecording() {
				span.SetAttributes(attrPosition.Int(0))
			}
			return g, nil
		}
		return nil, p.Err()
	case fsm.Queued:
		if pos, ok := p.queuedAt(ctx, r, seq); ok {
			ahead = max(pos-1, 0)
		}
		// The reply is in hand: the request no longer holds the floor back.
		// From here the grant arrives as an event; a late duplicate of the
		// request is ignored by the group (below the floor, or answered from
		// its reply cache).
		p.replied(seq)
	}
	var g *Grant
	g, withdrawn, err = p.awaitQueued(ctx, *cmd, seq, w, o.Position)
	if err == nil && ahead >= 0 {
		trace.SpanFromContext(ctx).AddEvent("granted", trace.WithAttributes(attrAhead.Int(ahead)))
	}
	return g, err
}

// awaitQueued waits for the grant of request seq (cmd), queued in the
// group: until w is granted, the part ends or ctx ends, reporting the
// request's place in its queue to position meanwhile, if it is not nil.
// If ctx ends first it withdraws the request, which then finishes it (the
// caller must not: withdrawn says so), and returns ctx.Err(); a request
// withdrawn by the group's seal fails with w's error.
func (p *Part) awaitQueued(ctx context.Context, cmd fsm.Command, seq uint64, w *waiter, position func(int)) (g *Grant, withdrawn bool, err error) {
	if position != nil {
		stop := make(chan struct{})
		joined := p.reportPositions(stop, cmd.Name, cmd.Kind == fsm.KindCampaign, seq, position)
		defer func() { close(stop); joined() }()
	}
	select {
	case <-w.ready:
		if w.grant == nil {
			return nil, false, w.err // withdrawn by the group's seal
		}
		return w.grant, false, nil
	case <-p.done:
		return nil, false, p.Err()
	case <-ctx.Done():
		p.withdraw(seq, cmd, p.rt.h.cfg.ProposalTimeout)
		return nil, true, ctx.Err()
	}
}

// groupDropped is the error of a request that the part's group will never
// grant: the group is being dropped (fsm.Dropped, fsm.EventDropped).
func (p *Part) groupDropped() error {
	return fmt.Errorf("%w: %q is being dropped", replica.ErrGroupDropped, p.rt.group)
}

// dropped ends the wait of request seq, which the group's seal withdrew
// (fsm.EventDropped): the group is being dropped and will never grant it,
// so its caller learns it now, not when (or if) the group's drop applies
// here.
func (p *Part) dropped(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.waiters[seq]
	if w == nil || w.grant != nil || w.err != nil {
		return
	}
	if w.kept && !w.claimed {
		delete(p.waiters, seq) // no call waits for it yet, and none will be granted it
		return
	}
	w.err = p.groupDropped()
	close(w.ready)
}

// withdraw takes request seq back from the group: out of its queue, or, if
// it was granted meanwhile, the lock is released. It tries for up to wait,
// then keeps trying in the background; until it succeeds a grant to the
// request is held by nobody, and the cancel will release it.
func (p *Part) withdraw(seq uint64, req fsm.Command, wait time.Duration) {
	if p.abandoned.Load() {
		// Given up here for another replica to adopt (Abandon): the
		// request stays queued, and the adoption keeps it in its place for
		// the client's re-issued call. A wait woken by both the part's end
		// and its context's would otherwise withdraw it, as select may pick
		// either.
		return
	}
	h := p.rt.h
	cancel := func(ctx context.Context) bool {
		r, err := p.rt.replica(context.Background())
		if err == nil {
			_, err = r.Propose(ctx, fsm.Command{Kind: fsm.KindCancel, Session: p.id, Target: seq, Floor: p.floor(),
				Name: req.Name, Election: req.Kind == fsm.KindCampaign})
		}
		if err == nil || p.Err() != nil {
			p.finish(seq)
			return true
		}
		return false
	}
	done := false
	if wait > 0 {
		ctx, stop := context.WithTimeout(h.ctx, wait)
		done = cancel(ctx)
		stop()
	}
	if !done {
		p.rt.goBackground(func() {
			ctx, stop := context.WithCancel(h.ctx)
			defer stop()
			go func() {
				select {
				case <-p.done:
					stop()
				case <-ctx.Done():
				}
			}()
			cancel(ctx)
		})
	}
}
