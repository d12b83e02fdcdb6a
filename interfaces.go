package fencelock

import (
	"context"
	"github.com/fencelock/fencelock/lockapi"
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
type Grant = lockapi.Grant

// LockGrant is a held lock: *Lock, and the client's *client.Lock.
type LockGrant = lockapi.LockGrant

// Term is a term of leadership: *Leadership, and the client's
// *client.Leadership.
type Term = lockapi.Term

// Locker is a session that can take locks and campaign: *Session, and the
// client's *client.Session. Its methods mean what the Session methods they
// stand for mean (Lock is Acquire, TryLock TryAcquire, Lead Campaign,
// TryLead TryCampaign), with the same errors (ErrLocked, ErrElectionTaken,
// ErrSessionExpired, ErrUnavailable, ...).
//
// Done closes, by the holder's clock, no later than the group could expire
// the session and pass its grants on; Err is nil until then.
type Locker = lockapi.Locker

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
type SessionSettings = lockapi.SessionSettings

// ReadSessionOptions applies opts to empty settings and reports them. It
// checks nothing: NewSession does.
func ReadSessionOptions(opts ...SessionOption) SessionSettings {
	return lockapi.ReadSessionOptions(opts...)
}

// AcquireSettings is what a list of AcquireOptions asks for, read by
// ReadAcquireOptions, for a Locker implemented outside this package.
type AcquireSettings = lockapi.AcquireSettings

// ReadAcquireOptions applies opts to empty settings and reports them. It
// checks nothing: the call that takes them does.
func ReadAcquireOptions(opts ...AcquireOption) AcquireSettings {
	return lockapi.ReadAcquireOptions(opts...)
}
