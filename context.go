package fencelock

import "context"

type grantKey struct{}

// Context returns a context derived from parent that is cancelled when Done
// closes (its cause is Err's reason) and that carries this grant's token for
// TokenFrom, so a holder's in-flight queries and calls stop when it loses
// the lock, and fencing helpers downstream find the token without plumbing.
//
// Cancellation is only as prompt as Done: a process that wakes from a pause
// may run before its deadline timer does. TokenFrom re-checks the deadline,
// so check it immediately before each write.
func (l *Lock) Context(parent context.Context) context.Context {
	return l.context(parent)
}

// Context is Lock.Context for a term: cancelled when Done closes, carrying
// the term's epoch for TokenFrom.
func (l *Leadership) Context(parent context.Context) context.Context {
	return l.context(parent)
}

func (g *grant) context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(context.WithValue(parent, grantKey{}, g))
	// The watcher ends with the grant or with parent, whichever is first;
	// every grant ends at the latest when its Node closes.
	go func() {
		select {
		case <-g.done:
			cancel(g.reason())
		case <-ctx.Done():
			cancel(nil)
		}
	}()
	return ctx
}

// TokenFrom returns the fencing token of the grant that ctx carries (see
// Lock.Context). ok is false when ctx carries no grant, or when the grant is
// over — and it checks the holder's deadline by its own clock at the call,
// as Err does, so a process that just woke from a pause past its deadline
// sees ok false even before Done's timer has run. A helper that writes with
// the token calls it immediately before the write; the resource's fence
// still refuses a holder that pauses between the two.
func TokenFrom(ctx context.Context) (token uint64, ok bool) {
	g, _ := ctx.Value(grantKey{}).(*grant)
	if g == nil {
		return 0, false
	}
	if g.reason() != nil {
		return g.token, false
	}
	return g.token, true
}
