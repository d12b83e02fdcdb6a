package lockapi

import (
	"context"
	"time"
)

// The interfaces below are what an embedded *fencelock.Session and a
// remote *client.Session both satisfy, so that code written against them
// runs either way by changing one constructor. Locker names its calls
// Lock, TryLock, Lead and TryLead (Acquire, TryAcquire, Campaign and
// TryCampaign with the result as an interface value), because Go has no
// covariant results.

// Grant is one grant held by a session, a lock's or a term of leadership:
// its fencing token, and when its holder must stop acting.
//
// Done closes, by the holder's own clock, no later than the group could
// give the grant to another; Err is nil until then and says why after.
type Grant interface {
	// Token is the grant's fencing token: tokens rise with every grant in
	// the group, so a resource that refuses lower ones refuses a holder
	// whose grant has passed on.
	Token() uint64
	// Fence is the token with its group's ID.
	Fence() Fence
	Done() <-chan struct{}
	Err() error
	// Context returns a context that ends when the grant does.
	Context(parent context.Context) context.Context
}

// LockGrant is a held lock: *fencelock.Lock, and *client.Lock.
type LockGrant interface {
	Grant
	Name() string
	// Release frees the lock; a grant that is no longer current is left
	// alone and the error wraps ErrNotHeld.
	Release(ctx context.Context) error
}

// Term is a term of leadership: *fencelock.Leadership, and
// *client.Leadership.
type Term interface {
	Grant
	Election() string
	Value() string
	// Proclaim replaces the leader's value; ErrNotLeader if the term is over.
	Proclaim(ctx context.Context, value string) error
	// Resign ends the term; ErrNotLeader if it was over already.
	Resign(ctx context.Context) error
}

// Locker is a session that can take locks and campaign: *fencelock.Session,
// and *client.Session. Lock is Acquire, TryLock TryAcquire, Lead Campaign,
// TryLead TryCampaign, with the same errors (ErrLocked, ErrElectionTaken,
// ErrSessionExpired, ErrUnavailable, ...); on an error the grant returned
// is a nil interface.
//
// Done closes, by the holder's clock, no later than the group could expire
// the session and pass its grants on; Err is nil until then.
type Locker interface {
	ID() uint64
	Lock(ctx context.Context, name string, opts ...AcquireOption) (LockGrant, error)
	TryLock(ctx context.Context, name string, opts ...AcquireOption) (LockGrant, error)
	Lead(ctx context.Context, election, value string, opts ...AcquireOption) (Term, error)
	TryLead(ctx context.Context, election, value string, opts ...AcquireOption) (Term, error)
	Done() <-chan struct{}
	Err() error
	Close(ctx context.Context) error
}

// AcquireOption configures one acquire or campaign call (and their Try
// forms, shared and semaphore ones).
type AcquireOption func(*AcquireSettings)

// AcquireSettings is what a list of AcquireOptions asks for, read by
// ReadAcquireOptions.
type AcquireSettings struct {
	MaxHold       time.Duration // WithMaxHold; 0: no bound
	QueuePosition func(int)     // WithQueuePosition; nil: none
}

// ReadAcquireOptions applies opts (nil ones skipped) to empty settings and
// reports them. It checks nothing: the call that takes them does.
func ReadAcquireOptions(opts ...AcquireOption) AcquireSettings {
	var s AcquireSettings
	for _, f := range opts {
		if f != nil {
			f(&s)
		}
	}
	return s
}

// WithQueuePosition makes a call that has to wait report where it waits:
// f(1) at the head of the lock's queue (or the election's candidates),
// f(n) with n−1 requests ahead, first when the group queued the request
// and again each time its place changes, never out of order. f is not
// called for a request granted at once or refused, nor after the call
// returned; it must not block.
func WithQueuePosition(f func(position int)) AcquireOption {
	return func(s *AcquireSettings) { s.QueuePosition = f }
}

// WithMaxHold bounds how long the grant lasts: the group frees it d after
// it made it, even while the session lives, and the holder stops first
// (Done closes, Err is ErrMaxHoldExceeded) by its own clock. d must lie in
// [2 × safety margin, MaxHoldLimit], else the call fails with
// ErrInvalidMaxHold; 0, the default, is no bound.
func WithMaxHold(d time.Duration) AcquireOption {
	return func(s *AcquireSettings) { s.MaxHold = d }
}

// SessionOption configures a new session.
type SessionOption func(*SessionSettings)

// SessionSettings is what a list of SessionOptions asks for, read by
// ReadSessionOptions. A Locker implemented outside package fencelock (the
// client package, a test double) takes the same options and must refuse
// those it cannot honour rather than ignore them.
type SessionSettings struct {
	TTL               time.Duration // WithTTL; 0: the implementation's default
	Name              string        // WithSessionName
	Named             bool          // WithSessionName was given
	Margin            time.Duration // WithSafetyMargin; 0: the default
	LockDelay         time.Duration // WithLockDelay
	Resume            bool          // an embedded session's WithResume was given a token
	ExternalKeepAlive bool          // WithExternalKeepAlive
	// Embedded holds the options only an embedded session reads (package
	// fencelock's resume token and its own hooks); nil when none was given.
	// Its value means nothing outside that package.
	Embedded any
}

// ReadSessionOptions applies opts (nil ones skipped) to empty settings and
// reports them. It checks nothing: the session's constructor does.
func ReadSessionOptions(opts ...SessionOption) SessionSettings {
	var s SessionSettings
	ApplySessionOptions(&s, opts...)
	return s
}

// ApplySessionOptions applies opts (nil ones skipped) over s, whose fields
// are the defaults an option leaves alone.
func ApplySessionOptions(s *SessionSettings, opts ...SessionOption) {
	for _, f := range opts {
		if f != nil {
			f(s)
		}
	}
}

// WithTTL sets the session's time to live: how long the group keeps it,
// and its locks, after the last keep-alive it applied. Between 100ms and
// 24h (else ErrInvalidTTL); the default is the implementation's.
func WithTTL(ttl time.Duration) SessionOption { return func(s *SessionSettings) { s.TTL = ttl } }

// WithSafetyMargin sets how long before TTL runs out, by the holder's own
// clock, the holder gives the session up when it could not renew it. The
// default is TTL/5; it must lie in (0, TTL/2], else ErrInvalidTTL.
func WithSafetyMargin(m time.Duration) SessionOption {
	return func(s *SessionSettings) { s.Margin = m }
}

// WithLockDelay gives the session a lock-delay: if the group expires the
// session, or an operator ends it, each lock it held is granted to nobody
// for d. The default, 0, is no delay; d beyond the bound fails with
// ErrInvalidLockDelay.
func WithLockDelay(d time.Duration) SessionOption {
	return func(s *SessionSettings) { s.LockDelay = d }
}

// WithSessionName names the session, so that every view of a holder,
// waiter, candidate or leader shows who it is rather than a number. It
// must pass CheckSessionName, else the session is not opened
// (ErrInvalidSessionName).
func WithSessionName(name string) SessionOption {
	return func(s *SessionSettings) { s.Name, s.Named = name, true }
}
