package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/session"
)

// Context returns a context derived from parent that ends when the grant
// does (its cause is Err's reason) and that carries this grant's token for
// TokenFrom, so a holder's in-flight queries and calls stop when it loses
// the lock, and fencing helpers downstream find the token without plumbing.
//
// The returned context's Done and Err check the holder's deadline by its own
// clock when called, as Lock.Err does: once the deadline has passed, Err is
// non-nil and Done is closed on that call, even if the deadline timer has
// not run yet, as happens to a process that wakes from a pause (SIGSTOP, a
// long GC pause, a frozen VM). A select that was already waiting on Done
// before the pause does not see it: on waking, a ticker or a request may be
// ready first and win the select while Done is still open. So check again,
// with ctx.Err() or GrantErr(ctx), immediately before each write; the
// fencing helpers that take a grant context (fencehttp.Transport,
// fencesql.Fencer.Do, Fencer.Claim) do. Contexts derived from this one
// (context.WithTimeout, and those database/sql and net/http make) end when
// it ends but do not check the deadline in their own Err; GrantErr and
// TokenFrom do, through any of them.
//
// Even a check made just before a write can be followed by a pause before
// the write lands; the resource's fence refuses such a write once the
// successor's token has reached it (see Claimer).
func (l *Lock) Context(parent context.Context) context.Context {
	return l.g().Context(parent)
}

// Context is Lock.Context for a term: it ends when the leadership does,
// checks the leader's deadline in Done and Err, and carries the term's epoch
// for TokenFrom.
func (l *Leadership) Context(parent context.Context) context.Context {
	return l.g().Context(parent)
}

// TokenFrom returns the fencing token of the grant that ctx carries (see
// Lock.Context), through any contexts derived from it. ok is false when ctx
// carries no grant (token is then 0), or when the grant is over (token is
// then the ended grant's). It checks the holder's deadline by its own clock
// at the call, as Err does, so a process that just woke from a pause past its
// deadline sees ok false even before Done's timer has run. A helper that
// writes with the token calls it immediately before the write; the
// resource's fence still refuses a holder that pauses between the two, once
// the successor's token has reached the resource.
func TokenFrom(ctx context.Context) (token uint64, ok bool) {
	g := session.From(ctx)
	if g == nil {
		return 0, false
	}
	if g.Err() != nil {
		return g.Token(), false
	}
	return g.Token(), true
}

// GrantErr re-checks the grant that ctx carries (see Lock.Context), through
// any contexts derived from it, by the holder's clock at the call: it
// returns nil while the grant holds, and once it is over why, as Lock.Err
// and Leadership.Err report it (ErrNotHeld, ErrNotLeader,
// ErrSessionExpired, ...), even if the deadline passed during a pause and no
// timer has run since. It returns nil for a context that carries no grant:
// it is the check a fencing helper makes immediately before a write, which a
// caller without a grant context has nothing to offer.
func GrantErr(ctx context.Context) error {
	g := session.From(ctx)
	if g == nil {
		return nil
	}
	return g.Err()
}
