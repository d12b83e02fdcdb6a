package fencelock

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/session"
)

// Lock is one grant of a named lock to a session: exclusive (Acquire),
// shared (AcquireShared) or one permit of a semaphore (AcquireSemaphore).
//
// Holding a Lock is a belief, not a guarantee: a process that pauses longer
// than its session's TTL may still hold a Lock whose grant the group has
// passed on. Guard every write to the protected resource with Token, checked
// by the resource (see Fencer), and stop acting when Done is closed.
type Lock struct{ grant *session.Grant }

// Acquire waits in the lock's FIFO queue until the lock is granted to this
// call, then returns it with its fencing token. The wait costs nothing while
// it lasts: the group grants the lock to the head of the queue in the same
// step that frees it, and wakes only that caller.
//
// Every Acquire is its own waiter: two goroutines of one session exclude each
// other like two sessions do. If ctx ends while queued, the call leaves the
// queue (and releases the lock, if the grant raced ahead of it) and returns
// ctx.Err(). If the group cannot be reached before ctx ends, the error
// satisfies errors.Is for both ErrUnavailable and ctx.Err(), and nothing is
// granted. If the session ends meanwhile, its error is returned.
//
// Options: WithMaxHold bounds how long the grant lasts.
func (s *Session) Acquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.acquireMode(ctx, name, false, 0, true, opts)
}

// TryAcquire takes the lock if it is free, and fails with ErrLocked at once
// if it is held; it never queues.
func (s *Session) TryAcquire(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.acquireMode(ctx, name, false, 0, false, opts)
}

// AcquireShared waits until lock name is granted to this call in shared
// mode, then returns it with its own fencing token. A name is one lock with
// two modes: any number of shared holders (up to MaxHoldersPerLock) at
// once, or one exclusive holder (Acquire).
//
// The lock is fair. Shared and exclusive requests wait in one FIFO queue,
// and the group grants the head of the queue as soon as the holders admit
// it: consecutive shared requests at the head are granted together, in
// the same step, and a shared request that arrives while an exclusive one
// waits queues behind it even though the lock is held in shared mode. So a
// stream of readers cannot starve a writer: the writer is granted once the
// readers granted before it have released, and the readers behind it once
// it has. Every grant, shared or exclusive, takes the next token of the
// group's one rising counter, so an exclusive holder's token is above that
// of every shared grant made before it, and a Fencer that admits the
// highest token seen refuses the readers it followed.
//
// A shared holder's writes are not fenced against the other shared
// holders'; Token still orders them against the exclusive holders before
// and after. Waiting, cancellation and the session's end behave as for
// Acquire. AcquireShared on a semaphore's name fails with
// ErrPermitConflict.
func (s *Session) AcquireShared(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.acquireMode(ctx, name, true, 0, true, opts)
}

// TryAcquireShared takes lock name in shared mode if the holders admit it
// and nobody waits before it, and fails with ErrLocked at once otherwise
// (held exclusively, or an exclusive request is queued); it never queues.
func (s *Session) TryAcquireShared(ctx context.Context, name string, opts ...AcquireOption) (*Lock, error) {
	return s.acquireMode(ctx, name, true, 0, false, opts)
}

// AcquireSemaphore waits until one of the permits of the counting
// semaphore name is granted to this call: at most permits calls hold the
// semaphore at once, each with its own fencing token, granted in FIFO
// order with the same fairness as AcquireShared. Release gives the permit
// back, and expiry, cancellation and revocation end it as they end a
// Lock's grant.
//
// The semaphore exists while it is held or waited for, and the request
// that created it fixed its permit count for as long: a call naming
// another count fails with ErrPermitConflict at once and changes nothing,
// as does a call naming a lock's name (or Acquire naming a semaphore's).
// permits must be 1 to MaxHoldersPerLock, else ErrInvalidPermits.
func (s *Session) AcquireSemaphore(ctx context.Context, name string, permits int, opts ...AcquireOption) (*Lock, error) {
	if err := checkPermits(permits); err != nil {
		return nil, err
	}
	return s.acquireMode(ctx, name, true, permits, true, opts)
}

// TryAcquireSemaphore takes a permit of semaphore name if one is free and
// nobody waits before it, and fails with ErrLocked at once otherwise; it
// never queues.
func (s *Session) TryAcquireSemaphore(ctx context.Context, name string, permits int, opts ...AcquireOption) (*Lock, error) {
	if err := checkPermits(permits); err != nil {
		return nil, err
	}
	return s.acquireMode(ctx, name, true, permits, false, opts)
}

func checkPermits(permits int) error {
	if permits < 1 || permits > MaxHoldersPerLock {
		return fmt.Errorf("%w: %d, allowed 1 to %d", ErrInvalidPermits, permits, MaxHoldersPerLock)
	}
	return nil
}

// acquireMode runs Acquire (exclusive), AcquireShared (shared, permits 0)
// or AcquireSemaphore (shared, permits > 0) and their Try forms.
func (s *Session) acquireMode(ctx context.Context, name string, shared bool, permits int, wait bool,
	opts []AcquireOption) (*Lock, error) {
	g, err := s.s.Acquire(ctx, name, shared, permits, wait, acquireOpts(opts))
	if err != nil {
		return nil, err
	}
	return &Lock{grant: g}, nil
}

// Shared reports whether the grant is a shared one, which other holders
// may hold at once: AcquireShared's, or a semaphore's permit.
func (l *Lock) Shared() bool { return l.g().Shared() }

// Permits returns the permit count of the semaphore this is a permit of;
// 0 for a lock.
func (l *Lock) Permits() int { return l.g().Permits() }

// Session returns the session that holds the lock; nil for the zero Lock.
func (l *Lock) Session() *Session { return owner(l.g()) }

// Name returns the lock's name.
func (l *Lock) Name() string { return l.g().Name() }

// Token returns the fencing token of this grant. Tokens rise strictly with
// every grant in the group, across leader changes and restarts, so a
// resource that refuses tokens lower than the highest it has seen (Fencer)
// refuses a holder as soon as a later holder's token has reached it: the
// later holder's first write, or a claim of its token made at grant time.
func (l *Lock) Token() uint64 { return l.g().Token() }

// Done is closed when the holder must stop acting: the lock was released, or
// the session ended (expired, not renewed in time, closed, node closed), or
// its maximum hold (WithMaxHold) ran out. A holder cut off from the group
// sees Done close by its own clock before the group could grant the lock
// to anyone else.
//
// Like Session.Done, it checks the session's deadline when called.
func (l *Lock) Done() <-chan struct{} { return l.g().Done() }

// Err returns nil while the lock is held and, once Done is closed, why:
// ErrNotHeld after a release, ErrMaxHoldExceeded after its maximum hold,
// or the session's error.
func (l *Lock) Err() error { return l.g().Err() }

// Release frees the lock; the head of its queue, if any, is granted in the
// same step. It sends the name and token: if this grant is no longer current
// (the session expired and the lock passed on), nothing changes and the error
// is ErrNotHeld, so a late release never frees a successor's lock.
func (l *Lock) Release(ctx context.Context) error { return l.g().GiveBack(ctx) }

// g is the lock's grant; the zero Lock (and a nil *Lock) has one that is
// already over.
func (l *Lock) g() *session.Grant {
	if l == nil || l.grant == nil {
		return neverLock
	}
	return l.grant
}

// neverLock and neverLeadership stand for the grant of a zero Lock or
// Leadership: like any zero value in Go it is usable, and it behaves as a
// grant that is already over (Done closed, Err and Release ErrNotHeld).
var neverLock, neverLeadership = session.Ended(false), session.Ended(true)

// owner is the Session that holds g; nil for an ended grant's.
func owner(g *session.Grant) *Session {
	if s := g.Session(); s != nil {
		return s.Owner().(*Session)
	}
	return nil
}
