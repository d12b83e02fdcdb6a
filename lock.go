package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Lock is one grant of a named exclusive lock to a session.
//
// Holding a Lock is a belief, not a guarantee: a process that pauses longer
// than its session's TTL may still hold a Lock whose grant the group has
// passed on. Guard every write to the protected resource with Token, checked
// by the resource (see Fencer), and stop acting when Done is closed.
type Lock struct{ *grant }

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
func (s *Session) Acquire(ctx context.Context, name string) (*Lock, error) {
	return s.acquire(ctx, name, true)
}

// TryAcquire takes the lock if it is free, and fails with ErrLocked at once
// if it is held; it never queues.
func (s *Session) TryAcquire(ctx context.Context, name string) (*Lock, error) {
	return s.acquire(ctx, name, false)
}

func (s *Session) acquire(ctx context.Context, name string, wait bool) (*Lock, error) {
	if !fsm.ValidName(name) {
		return nil, invalidName(name)
	}
	g, err := s.request(ctx, fsm.Command{Kind: fsm.KindAcquire, Name: name, Wait: wait})
	if err != nil {
		return nil, err
	}
	return &Lock{g}, nil
}

// Session returns the session that holds the lock; nil for the zero Lock.
func (l *Lock) Session() *Session { return l.g().s }

// Name returns the lock's name.
func (l *Lock) Name() string { return l.g().name }

// Token returns the fencing token of this grant. Tokens rise strictly with
// every grant in the group, across leader changes and restarts, so a
// resource that refuses tokens lower than the highest it has seen (Fencer)
// refuses a holder as soon as a later holder's token has reached it: the
// later holder's first write, or a claim of its token made at grant time.
func (l *Lock) Token() uint64 { return l.g().token }

// Done is closed when the holder must stop acting: the lock was released, or
// the session ended (expired, not renewed in time, closed, node closed). A
// holder cut off from the group sees Done close by its own clock before the
// group could grant the lock to anyone else.
//
// Like Session.Done, it checks the session's deadline when called.
func (l *Lock) Done() <-chan struct{} { return l.g().doneChan() }

// Err returns nil while the lock is held and, once Done is closed, why:
// ErrNotHeld after a release, or the session's error.
func (l *Lock) Err() error { return l.g().reason() }

// Release frees the lock; the head of its queue, if any, is granted in the
// same step. It sends the name and token: if this grant is no longer current
// (the session expired and the lock passed on), nothing changes and the error
// is ErrNotHeld, so a late release never frees a successor's lock.
func (l *Lock) Release(ctx context.Context) error { return l.g().giveBack(ctx) }

// g is the lock's grant; the zero Lock (and a nil *Lock) has one that is
// already over.
func (l *Lock) g() *grant {
	if l == nil || l.grant == nil {
		return neverLock
	}
	return l.grant
}
