package session

import "context"

type grantKey struct{}

// grantContext is a grant's context: a cancelable context whose Done and Err
// first look at the grant, so that they answer by the holder's clock at the
// call rather than when the watcher goroutine gets to run. It embeds the
// *cancelCtx, so context.Cause and contexts derived from it work as usual
// (Done returns that context's own channel, which lets children register
// with it directly).
type grantContext struct {
	context.Context
	g      *Grant
	cancel context.CancelCauseFunc
}

func (c *grantContext) Done() <-chan struct{} {
	c.check()
	return c.Context.Done()
}

func (c *grantContext) Err() error {
	c.check()
	return c.Context.Err()
}

// check cancels the context now if the grant is over by the holder's clock.
func (c *grantContext) check() {
	if err := c.g.Err(); err != nil {
		c.cancel(err)
	}
}

// Context returns a context derived from parent that ends when g does (its
// cause is g's error) and carries g for From.
func (g *Grant) Context(parent context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(context.WithValue(parent, grantKey{}, g))
	// The watcher ends with the grant or with parent, whichever is first;
	// every grant ends at the latest when its Host closes. It makes the
	// cancellation prompt for those waiting on Done; check makes it exact
	// for those who ask.
	go func() {
		select {
		case <-g.done:
			cancel(g.Err())
		case <-ctx.Done():
			cancel(nil)
		}
	}()
	return &grantContext{Context: ctx, g: g, cancel: cancel}
}

// From returns the grant ctx carries (see Context), nil if none.
func From(ctx context.Context) *Grant {
	g, _ := ctx.Value(grantKey{}).(*Grant)
	return g
}
