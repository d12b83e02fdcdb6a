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
// token it checks, whether or not the new holder ever writes. A claim is not
// a barrier: a write admitted before it and made after its check, outside
// the fence (a handler behind fencehttp.Middleware with a fence other than
// an in-process *Fencer, or code that checks with Admit and writes later),
// can still land after it. Only a write made inside the fence's check
// (Fencer.DoFence, fencesql.Fencer.Do in the write's transaction,
// fencefile's appends) cannot land after a higher token was admitted; a
// resource that needs that makes its writes there. Between the grant and
// the claim's commit a predecessor's write can still be admitted; its
// holder's own deadline check (Done, Err, GrantErr, just before the write)
// is what stops it there, since the holder's deadline passes before the
// group can grant anyone else. If Claim fails for another reason (the
// resource cannot be reached), the gap stays open until a fenced write or a
// retried Claim gets through.
type Claimer interface {
	Claim(ctx context.Context, resource string, token uint64) error
}

// FenceClaimer is a Claimer that also keeps the group a resource is keyed
// to: ClaimFence records fence as Claim records a token, and refuses a fence
// of another group than the resource's with an error satisfying
// errors.Is(err, ErrOtherGroup) (see Fencer's Groups). A resource is fenced
// by the locks of one group: a claim made with a grant of "x@billing" keys
// it to billing, and from then on a grant of any other group of the
// deployment (the default one included) is refused there, whatever its
// token. *Fencer and
// *fencesql.Fencer implement it; fencehttp.Middleware uses it when its fence
// does, and checks tokens alone otherwise.
type FenceClaimer interface {
	Claimer
	ClaimFence(ctx context.Context, resource string, fence Fence) error
}

// Claim raises resource's mark to token without a write, refusing a lower
// token with a *StaleTokenError as Admit does (see Claimer). If ctx carries
// a grant (Lock.Context), the token is checked with that grant's group, as
// ClaimFence checks a fence: a resource keyed to another group refuses it
// with an *OtherGroupError. Without a grant in ctx the token is bare
// (group 0), which a resource keyed to a group refuses with an
// *OtherGroupError (see Fencer's Groups). If that grant is over by the holder's clock, or
// ctx has ended, Claim changes nothing and returns that error.
func (f *Fencer) Claim(ctx context.Context, resource string, token uint64) error {
	// The group is the grant's, read now: a grant made before its replica
	// learnt the group's ID carries it by the time it is claimed.
	g, _ := FenceFrom(ctx)
	return f.ClaimFence(ctx, resource, Fence{Group: g.Group, Token: token})
}

// ClaimFence raises resource's mark to fence's token without a write, as
// Claim does, checking fence's group as DoFence does: a fence of another
// nonzero group than the resource's is refused with an *OtherGroupError and
// changes nothing; so is Group 0 on a resource keyed to a group. The group is fence's, whatever grant ctx carries; ctx is
// checked as for Claim.
func (f *Fencer) ClaimFence(ctx context.Context, resource string, fence Fence) error {
	if err := GrantErr(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return f.DoFence(resource, fence, func() error { return nil })
}
