package fencelock

import (
	"context"
	"fmt"
	"sync"

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
	}
}

// doneChan and reason serve Done and Err; both first check the session's
// deadline by the holder's clock.
func (g *grant) doneChan() <-chan struct{} {
	if g.s != nil {
		g.s.poll()
	}
	return g.done
}

func (g *grant) reason() error {
	if g.s != nil {
		g.s.poll()
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
// returns nil if the session is over.
func (s *Session) granted(seq uint64, name string, mode grantMode, token uint64, value string) *grant {
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
