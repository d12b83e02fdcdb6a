package client

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/lockapi"
)

// grant is one lock's or one term's grant, held by a session.
type grant struct {
	s        *Session
	name     string
	token    uint64
	fence    lockapi.Fence
	election bool
	free     func() // gives the session's slot for name back

	mu    sync.Mutex
	value string // a term's value
	done  chan struct{}
	err   error
	timer *time.Timer // ends the grant at its maximum hold; nil: none
}

// bound ends the grant with ErrMaxHoldExceeded at deadline, by this
// process's clock.
func (g *grant) bound(deadline clock.Instant) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return
	}
	g.timer = time.AfterFunc(max(deadline.Sub(now()), 0), func() {
		g.end(fmt.Errorf("%w: %q token %d", lockapi.ErrMaxHoldExceeded, g.name, g.token))
	})
}

func newGrant(s *Session, name string, token uint64, f lockapi.Fence, election bool, value string, free func()) *grant {
	return &grant{s: s, name: name, token: token, fence: f, election: election, value: value, free: free,
		done: make(chan struct{})}
}

// end makes the grant over for its holder, with why; the first reason stays.
func (g *grant) end(why error) {
	if !g.over(why) {
		return
	}
	g.s.remove(g)
	g.free()
}

// over makes g over for its holder with why (Done closed), unless it was
// already, and reports whether this call did. It takes only g's lock, so
// the session may call it under its own (Session.end).
func (g *grant) over(why error) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return false
	}
	g.err = why
	close(g.done)
	if g.timer != nil {
		g.timer.Stop()
	}
	return true
}

func (g *grant) Done() <-chan struct{} {
	g.s.check()
	return g.done
}

func (g *grant) Err() error {
	g.s.check()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// Context returns a context derived from parent that ends when the grant
// does (its cause is Err's reason). Its Done and Err check the holder's
// deadline when called, as the grant's do.
func (g *grant) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		// Ends with the grant or with parent, whichever is first; every
		// grant ends at the latest when its session does.
		select {
		case <-g.done:
			cancel(g.Err())
		case <-ctx.Done():
			cancel(nil)
		}
	}()
	return &grantContext{Context: ctx, g: g, cancel: cancel}
}

type grantContext struct {
	context.Context
	g      *grant
	cancel context.CancelCauseFunc
}

func (c *grantContext) Done() <-chan struct{} { c.check(); return c.Context.Done() }
func (c *grantContext) Err() error            { c.check(); return c.Context.Err() }
func (c *grantContext) check() {
	if err := c.g.Err(); err != nil {
		c.cancel(err)
	}
}

// Lock is one grant of a named lock to a session, through the API: the
// remote *fencelock.Lock. Holding it is a belief, not a guarantee: guard
// every write to the resource with Fence, checked by the resource, and stop
// acting when Done is closed.
type Lock struct{ g *grant }

// Name returns the lock's name.
func (l *Lock) Name() string { return l.g.name }

// Token returns the grant's fencing token; tokens rise with every grant in
// the group.
func (l *Lock) Token() uint64 { return l.g.token }

// Fence returns the grant's fence: its token and its group's ID.
func (l *Lock) Fence() lockapi.Fence { return l.g.fence }

// Done is closed when the holder must stop acting: the lock was released,
// or the session is over (see Session.Done), which by this process's clock
// is no later than the group could grant the lock to another.
//
// An operator's revoke of this one grant (POST /v1/locks/{name}/revoke)
// while the session lives is not seen here: the API tells a holder of it
// only on the lock's watch stream. The resource's fence refuses this
// holder once the next holder's token has reached it, and Release then
// fails with ErrNotHeld.
func (l *Lock) Done() <-chan struct{} { return l.g.Done() }

// Err returns nil while the lock is held and, once Done is closed, why:
// ErrNotHeld after a release, or the session's error.
func (l *Lock) Err() error { return l.g.Err() }

// Context returns a context derived from parent that ends when the lock's
// grant does (its cause is Err's reason), so that the holder's calls stop
// when it loses the lock; its Done and Err check the deadline when called.
// Unlike the embedded Lock.Context's, it does not carry the grant for
// fencelock.TokenFrom, FenceFrom and GrantErr, which know only embedded
// grants: pass Fence to the fencing helpers.
func (l *Lock) Context(parent context.Context) context.Context { return l.g.Context(parent) }

// Release frees the lock; the head of its queue, if any, is granted in the
// same step. If the grant is no longer current (the session ended and the
// lock passed on), nothing changes and the error wraps ErrNotHeld, so a
// late release never frees a successor's lock. Done is closed once a
// replica answered; if none did, the error wraps ErrUnavailable, the lock
// may still be held, and Release may be called again.
//
// A release asked again on another replica because the first one's answer
// was lost (it stopped or was killed meanwhile) returns nil when the grant
// is found over: the first attempt may have ended it, and the grant is
// over either way. ErrNotHeld then means only that the grant had ended
// before this call reached any replica.
func (l *Lock) Release(ctx context.Context) error {
	g := l.g
	if err := g.Err(); err != nil {
		return fmt.Errorf("%w: the grant is over: %w", lockapi.ErrNotHeld, err)
	}
	var unsure bool
	err := g.s.c.call(ctx, callSpec{method: "POST", path: lockPath(g.name, "release"), secretHeader: g.s.secretHeader, session: true,
		body: releaseBody(g.s.id, g.token), unsure: &unsure}, nil)
	return g.s.settle(g, forgiveRetry(err, unsure, lockapi.ErrNotHeld), lockapi.ErrNotHeld)
}

// forgiveRetry is nil for a release or resign that found its grant over
// (notHeld) after an earlier attempt of the same call may have taken effect
// (unsure): the outcome the caller asked for, which that attempt may have
// brought about. Any other err is returned as it is.
func forgiveRetry(err error, unsure bool, notHeld error) error {
	if unsure && errors.Is(err, notHeld) && !errors.Is(err, lockapi.ErrSessionExpired) {
		return nil
	}
	return err
}

// settle ends g after a release or resign: for good when a replica
// answered (ok, or the grant was not current: notHeld), not when none did.
func (s *Session) settle(g *grant, err error, notHeld error) error {
	var e *Error
	switch {
	case err == nil:
		g.end(fmt.Errorf("%w: released", notHeld))
		return nil
	case errors.Is(err, lockapi.ErrSessionExpired) && errors.As(err, &e):
		s.end(fmt.Errorf("%w: the session ended at the group: %w", lockapi.ErrSessionExpired, err))
		return fmt.Errorf("%w: %w", notHeld, err)
	case errors.Is(err, notHeld):
		g.end(err)
		return err
	}
	return err
}

// Leadership is one term of leadership of an election, through the API:
// the remote *fencelock.Leadership.
type Leadership struct{ g *grant }

// Election returns the election's name.
func (l *Leadership) Election() string { return l.g.name }

// Token returns the term's epoch: the fencing token of its grant.
func (l *Leadership) Token() uint64 { return l.g.token }

// Fence returns the term's fence: its epoch and its group's ID.
func (l *Leadership) Fence() lockapi.Fence { return l.g.fence }

// Value returns the leader's value: the one it campaigned with, or the last
// one it proclaimed.
func (l *Leadership) Value() string {
	l.g.mu.Lock()
	defer l.g.mu.Unlock()
	return l.g.value
}

// Done is closed when this leader must stop acting: it resigned, or its
// session is over, by this process's clock no later than the group could
// elect the next candidate.
func (l *Leadership) Done() <-chan struct{} { return l.g.Done() }

// Err returns nil while the term lasts and, once Done is closed, why:
// ErrNotLeader after Resign, or the session's error.
func (l *Leadership) Err() error { return l.g.Err() }

// Context returns a context that ends when the term does.
func (l *Leadership) Context(parent context.Context) context.Context { return l.g.Context(parent) }

// Proclaim replaces the leader's value, keeping the term and its token. It
// fails with ErrNotLeader if the term is over at the group (Done then
// closes), and without asking the group when Done is closed already (the
// error then wraps Err's reason too); ErrValueTooLarge over 4096 bytes.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	g := l.g
	if len(value) > lockapi.MaxValueLen {
		return fmt.Errorf("%w: %d bytes, at most %d", lockapi.ErrValueTooLarge, len(value), lockapi.MaxValueLen)
	}
	if err := g.Err(); err != nil {
		return fmt.Errorf("%w: the term is over: %w", lockapi.ErrNotLeader, err)
	}
	type proclaim struct {
		SessionID wid    `json:"session_id"`
		Token     wid    `json:"token"`
		Value     string `json:"value"`
	}
	err := g.s.c.call(ctx, callSpec{method: "POST", path: electionPath(g.name, "proclaim"), secret: g.s.secret, session: true,
		in: proclaim{wid(g.s.id), wid(g.token), value}}, &campaignAnswer{})
	if err == nil {
		g.mu.Lock()
		g.value = value
		g.mu.Unlock()
		return nil
	}
	if errors.Is(err, lockapi.ErrNotLeader) || errors.Is(err, lockapi.ErrSessionExpired) {
		return g.s.settle(g, err, lockapi.ErrNotLeader)
	}
	return err
}

// Resign ends this term: the next candidate, if any, leads at once. If the
// term was already over at the group, nothing changes and the error wraps
// ErrNotLeader, so a late Resign never deposes a successor. Done is closed
// once a replica answered; if none did, the error wraps ErrUnavailable and
// Resign may be called again. Like Release, a resign asked again after a
// lost answer returns nil when it finds the term over.
func (l *Leadership) Resign(ctx context.Context) error {
	g := l.g
	if err := g.Err(); err != nil {
		return fmt.Errorf("%w: the term is over: %w", lockapi.ErrNotLeader, err)
	}
	type resign struct {
		SessionID wid `json:"session_id"`
		Token     wid `json:"token"`
	}
	var unsure bool
	err := g.s.c.call(ctx, callSpec{method: "POST", path: electionPath(g.name, "resign"), secret: g.s.secret, session: true,
		in: resign{wid(g.s.id), wid(g.token)}, unsure: &unsure}, nil)
	return g.s.settle(g, forgiveRetry(err, unsure, lockapi.ErrNotLeader), lockapi.ErrNotLeader)
}

func lockPath(name, verb string) string {
	return "/v1/locks/" + url.PathEscape(name) + "/" + verb
}

func electionPath(name, verb string) string {
	return "/v1/elections/" + url.PathEscape(name) + "/" + verb
}

// Poll bounds of a waiting call: the API answers a waiting acquire as soon
// as it is queued, and again with its state each time it is asked; the
// client asks again after pollMin, doubling to pollMax while nothing
// changes.
var (
	pollMin = 20 * time.Millisecond
	pollMax = 500 * time.Millisecond
)
