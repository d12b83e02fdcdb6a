package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/lockapi"
)

// Fence is a grant's fencing token together with the ID of the group that
// granted it (Status.GroupID). A token only orders the grants of one group:
// another group's tokens, or this group's after it was bootstrapped again
// from empty Dirs (tokens then start low again), mean nothing against it. A
// durable fencer that keeps the group with its mark (fencesql) refuses
// such a token with ErrOtherGroup instead of admitting it or calling it
// stale, until an operator re-keys the resource on purpose.
//
// Group 0 is a fence without a group: a bare token, or a token from a
// version that did not hold grants back until the group's ID applied (a
// grant now always carries its group's ID). Fencers check it by its token
// alone on a resource keyed to no group, and refuse it with ErrOtherGroup
// (never raising the mark) on a resource keyed to a group (see Fencer's
// Groups).
type Fence = lockapi.Fence

// ErrInvalidFence reports a string that is not a Fence's String form.
var ErrInvalidFence = lockapi.ErrInvalidFence

// ErrOtherGroup: a fencer refused a token granted by another group (or by
// another incarnation of this group) than the one the resource is keyed
// to, or a token without a group (Group 0) at a keyed resource. A token is
// not comparable with another group's: re-key the resource if the group
// was replaced on purpose.
var ErrOtherGroup = lockapi.ErrOtherGroup

// ParseFence parses the String form of a Fence. A bare decimal token (no
// group) parses with Group 0, as does "0000000000000000:N": a fence that a
// resource keyed to a group refuses.
func ParseFence(s string) (Fence, error) { return lockapi.ParseFence(s) }

// Fence returns the lock's fence: its token and its group's ID.
func (l *Lock) Fence() Fence { return fenceOf(l.g()) }

// Fence returns the term's fence: its epoch and its group's ID.
func (l *Leadership) Fence() Fence { return fenceOf(l.g()) }

// FenceFrom returns the fence of the grant that ctx carries (see
// Lock.Context); ok is false as for TokenFrom, which it checks alike.
func FenceFrom(ctx context.Context) (f Fence, ok bool) {
	g := session.From(ctx)
	if g == nil {
		return Fence{}, false
	}
	return fenceOf(g), g.Err() == nil
}

// fenceOf reads the group's ID when asked rather than at the grant: the ID is
// set once for the group's whole life, so a grant made before this replica
// learnt it still belongs to it.
func fenceOf(g *session.Grant) Fence { return Fence{Group: g.GroupID(), Token: g.Token()} }
