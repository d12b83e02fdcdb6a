package fencelock

import (
	"context"
	"time"
)

// The interfaces below are what an embedded *Session and a remote
// *client.Session (package github.com/fencelock/fencelock/client, a process
// that is no replica and speaks the HTTP API) both satisfy, so that code
// written against them runs either way by changing one constructor:
//
//	var s fencelock.Locker = sess // a *fencelock.Session or a *client.Session
//	l, err := s.Lock(ctx, "jobs/report")
//
// Go has no covariant results: Session.Acquire returns a *Lock, and the
// client's a *client.Lock, so no one interface method can be both. Locker
// therefore names its calls Lock, TryLock, Lead and TryLead, each the same
// call as Acquire, TryAcquire, Campaign and TryCampaign with the result
// as an interface value; both session types define them as one-line
// adapters. The grant interfaces need no adapters: *Lock and *Leadership
// (and the client's) satisfy LockGrant and Term as they are.

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

// LockGrant is a held lock: *Lock, and the client's *client.Lock.
type LockGrant interface {
	Grant
	Name() string
	// Release frees the lock; a grant that is no longer current is left
	// alone and the error wraps ErrNotHeld.
	Release(ctx context.Context) error
}

// Term is a term of leadership: *Leadership, and the client's
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

// Locker is a session that can take locks and campaign: *Session, and the
// client's *client.Session. Its methods mean what the Session methods they
// stand for mean (Lock is Acquire, TryLock TryAcquire, Lead Campaign,
// TryLead TryCampaign), with the same errors (ErrLocked, ErrElectionTaken,
// ErrSessionExpired, ErrUnavailable, ...).
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

var (
	_ Locker    = (*Session)(nil)
	_ LockGrant = (*Lock)(nil)
	_ Term      = (*Leadership)(nil)
)

// Lock is Acquire for a Locker: it waits until lock name is granted to
// this call. It fails as Acquire does, and then returns a nil LockGrant
// (not a nil *Lock in an interface, which would not compare equal to nil).
func (s *Session) Lock(ctx context.Context, name string, opts ...AcquireOption) (LockGrant, error) {
	l, err := s.Acquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// TryLock is TryAcquire for a Locker: ErrLocked at once if the lock is
// held. On an error the LockGrant is nil.
func (s *Session) TryLock(ctx context.Context, name string, opts ...AcquireOption) (LockGrant, error) {
	l, err := s.TryAcquire(ctx, name, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Lead is Campaign for a Locker: it waits until the session leads
// election. On an error the Term is nil.
func (s *Session) Lead(ctx context.Context, election, value string, opts ...AcquireOption) (Term, error) {
	l, err := s.Campaign(ctx, election, value, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// TryLead is TryCampaign for a Locker: ErrElectionTaken at once if another
// session leads. On an error the Term is nil.
func (s *Session) TryLead(ctx context.Context, election, value string, opts ...AcquireOption) (Term, error) {
	l, err := s.TryCampaign(ctx, election, value, opts...)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// SessionSettings is what a list of SessionOptions asks for, read by
// ReadSessionOptions. It is for a Locker implemented outside this package
// (the client package, a test double), which takes the same options and
// must refuse those it cannot honour rather than ignore them.
type SessionSettings struct {
	TTL               time.Duration // WithTTL; 0: the implementation's default
	Name              string        // WithSessionName
	Named             bool          // WithSessionName was given
	Margin            time.Duration // WithSafetyMargin; 0: the default
	LockDelay         time.Duration // WithLockDelay
	Resume            bool          // WithResume was given a token
	ExternalKeepAlive bool          // WithExternalKeepAlive
}

// ReadSessionOptions applies opts to empty settings and reports them. It
// checks nothing: NewSession does.
func ReadSessionOptions(opts ...SessionOption) SessionSettings {
	var o sessionOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return SessionSettings{TTL: o.ttl, Name: o.name, Named: o.named, Margin: o.margin, LockDelay: o.delay,
		Resume: o.resume.session != 0, ExternalKeepAlive: o.external}
}

// AcquireSettings is what a list of AcquireOptions asks for, read by
// ReadAcquireOptions, for a Locker implemented outside this package.
type AcquireSettings struct {
	MaxHold       time.Duration // WithMaxHold; 0: no bound
	QueuePosition func(int)     // WithQueuePosition; nil: none
}

// ReadAcquireOptions applies opts to empty settings and reports them. It
// checks nothing: the call that takes them does.
func ReadAcquireOptions(opts ...AcquireOption) AcquireSettings {
	var o acquireOptions
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	return AcquireSettings{MaxHold: o.maxHold, QueuePosition: o.position}
}
