package fencelock

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// grant is what a Lock and a Leadership share: the group granted a lock, or
// an election, to one request of a session, with a fencing token.
type grant struct {
	s    *Session
	name string
	grantMode
	token uint64
	seq   uint64
	done  chan struct{}

	mu    sync.Mutex
	err   error  // why the grant ended; nil while it lasts
	value string // a leadership's value
	// until is when, by the boot clock, a grant with a maximum hold ends
	// for its holder (timer fires then); zero without one.
	until clock.Instant
	timer clock.Timer
}

// grantMode is what a grant is of: an election, or a lock, exclusive,
// shared, or a permit of a semaphore of permits.
type grantMode struct {
	election bool
	shared   bool
	permits  int
}

func lockMode(e *fsm.Event) grantMode { return grantMode{shared: e.Shared, permits: int(e.Permits)} }

var electionMode = grantMode{election: true}

// lose ends the grant for its holder, for why.
func (g *grant) lose(why error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = why
		close(g.done)
		if g.timer != nil {
			g.timer.Stop()
		}
	}
}

// limit makes the grant end for its holder at until by the boot clock
// (its maximum hold less the session's margin), before the group frees it.
// Call it before anyone else sees g.
func (g *grant) limit(until clock.Instant) {
	c := g.s.clock
	g.until = until
	g.timer = c.AfterFunc(until.Sub(clock.Boot(c)), g.pollHold)
}

// pollHold ends the grant if its maximum hold is over by the holder's
// clock. The group frees it a margin later, and grants it on then.
func (g *grant) pollHold() {
	g.mu.Lock()
	over := g.err == nil && g.until != (clock.Instant{}) && !clock.Boot(g.s.clock).Before(g.until)
	g.mu.Unlock()
	if over {
		g.s.grantEnded(g.token, ErrMaxHoldExceeded)
		g.lose(ErrMaxHoldExceeded) // also if the registry had dropped it
	}
}

// doneChan and reason serve Done and Err; both first check the session's
// deadline, and the maximum hold, by the holder's clock (a timer may fire
// late after a suspend).
func (g *grant) doneChan() <-chan struct{} {
	if g.s != nil {
		g.s.poll()
		g.pollHold()
	}
	return g.done
}

func (g *grant) reason() error {
	if g.s != nil {
		g.s.poll()
		g.pollHold()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// neverLock and neverLeadership stand for the grant of a zero Lock or
// Leadership: like any zero value in Go it is usable, and it behaves as a
// grant that is already over (Done closed, Err and Release ErrNotHeld).
var neverLock, neverLeadership = endedGrant(false), endedGrant(true)

func endedGrant(election bool) *grant {
	g := &grant{grantMode: grantMode{election: election}, done: make(chan struct{})}
	g.err = g.notHeld()
	close(g.done)
	return g
}

// notHeld is the error of a grant the group no longer has.
func (g *grant) notHeld() error {
	if g.election {
		return ErrNotLeader
	}
	return ErrNotHeld
}

// giveBack ends the grant at the group: Release for a lock, Resign for a
// leadership. It sends the name and token, so if the grant is no longer
// current nothing changes and the error is ErrNotHeld (ErrNotLeader): a late
// call never frees a successor's grant.
func (g *grant) giveBack(ctx context.Context) error {
	if g.s == nil {
		return fmt.Errorf("%w: the zero value was never granted", g.notHeld())
	}
	s, kind := g.s, fsm.KindRelease
	if g.election {
		kind = fsm.KindResign
	}
	res, err := s.call(ctx, fsm.Command{Kind: kind, Name: g.name, Token: g.token})
	if err != nil {
		return err
	}
	if res.Status == fsm.LimitExceeded { // refused: the grant stands
		return fmt.Errorf("fencelock: %v %q: %w", kind, g.name, limitError(res.Value))
	}
	s.grantEnded(g.token, g.notHeld())
	g.lose(g.notHeld()) // also when the session's registry had dropped it
	switch res.Status {
	case fsm.OK:
		return nil
	case fsm.UnknownSession:
		s.expired()
		fallthrough
	case fsm.NotHeld:
		return fmt.Errorf("%w: %q token %d", g.notHeld(), g.name, g.token)
	}
	return fmt.Errorf("fencelock: %v %q: unexpected reply %v", kind, g.name, res.Status)
}

// granted records that request seq of s was granted lock (or election) name
// with token, and wakes the call waiting for it. It is idempotent: a grant
// may be reported by the applied entry and by the proposal's reply. It
// returns nil if the session is over. since, if not zero, is a time before
// the group applied the grant (heldSince when the grant was reported); a
// maximum hold counts from the later of it and the request's send.
func (s *Session) granted(seq uint64, name string, mode grantMode, token uint64, value string, since clock.Instant) *grant {
	s.mu.Lock()
	if g := s.grants[token]; g != nil {
		s.mu.Unlock()
		return g
	}
	if s.err != nil {
		s.mu.Unlock()
		return nil
	}
	g := s.newGrant(seq, name, mode, token, value)
	s.grants[token] = g
	w := s.waiters[seq]
	if w != nil && w.maxHold != 0 {
		start := w.sent
		if since.After(start) {
			start = since
		}
		g.limit(start.Add(w.maxHold - s.margin))
	}
	if w != nil && w.grant == nil {
		w.grant = g
		close(w.ready)
	}
	s.mu.Unlock()
	if w == nil {
		// Nobody waits for this grant (its caller gave up and the cancel has
		// not been applied yet): give it back.
		s.n.goBackground(func() {
			ctx, cancel := context.WithTimeout(s.n.ctx, s.ttl)
			defer cancel()
			_ = g.giveBack(ctx)
		})
	}
	return g
}

func (s *Session) newGrant(seq uint64, name string, mode grantMode, token uint64, value string) *grant {
	return &grant{s: s, name: name, grantMode: mode, token: token, seq: seq, value: value,
		done: make(chan struct{})}
}

// grantEnded records that the grant token ended for why.
func (s *Session) grantEnded(token uint64, why error) {
	s.mu.Lock()
	g := s.grants[token]
	delete(s.grants, token)
	s.mu.Unlock()
	if g != nil {
		g.lose(why)
	}
}

// proclaimed records the new value of the leadership token.
func (s *Session) proclaimed(token uint64, value string) {
	s.mu.Lock()
	g := s.grants[token]
	s.mu.Unlock()
	if g != nil {
		g.mu.Lock()
		g.value = value
		g.mu.Unlock()
	}
}
