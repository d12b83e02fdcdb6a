package fencelock

import "context"

// Claimer is a resource's fence that can record a token without a write:
// Claim raises the resource's high-water mark to token, refusing a token
// lower than the mark with an error satisfying errors.Is(err, ErrStaleToken).
// A token equal to the mark is admitted. *Fencer, *fencesql.Fencer and
// fencehttp.Middleware's fences implement it.
//
// # Claim at grant
//
// A fence refuses a holder the group has moved past only once the
// successor's token has reached it. If the successor's first write is what
// carries it there, a deposed holder that wakes from a pause can still write
// until then, and after a crash that gap lasts until the new holder gets
// round to writing. Claiming the token at the resource as soon as it is
// granted closes the gap from the successor's side:
//
//	lead, err := session.Campaign(ctx, "orders/primary", addr)
//	...
//	lctx := lead.Context(ctx)
//	if err := fences.Claim(lctx, "orders", lead.Token()); err != nil {
//		// ErrStaleToken: a later term already reached the resource; or the
//		// term already ended (GrantErr); or the resource is unreachable
//	}
//	// from here on the resource refuses every earlier term's writes
//
// From the moment Claim returns nil, the resource refuses every lower
// token, whether or not the new holder ever writes. Between the grant and
// the claim's commit a predecessor's write can still be admitted; its
// holder's own deadline check (Done, Err, GrantErr, just before the write)
// is what stops it there, since the holder's deadline passes before the
// group can grant anyone else. If Claim fails for another reason (the
// resource cannot be reached), the gap stays open until a fenced write or a
// retried Claim gets through.
type Claimer interface {
	Claim(ctx context.Context, resource string, token uint64) error
}

// Claim raises resource's mark to token without a write, refusing a lower
// token with a *StaleTokenError as Admit does (see Claimer). If ctx carries
// a grant (Lock.Context) that is over by the holder's clock, or ctx has
// ended, Claim changes nothing and returns that error.
func (f *Fencer) Claim(ctx context.Context, resource string, token uint64) error {
	if err := GrantErr(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.Admit(resource, token)
}
