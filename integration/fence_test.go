package integration_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Claim takes the group from the grant ctx carries: the claim keys the
// resource to the grant's group, and a resource keyed to another group
// refuses the grant's token, and the same token without a grant context (a
// bare token, group 0) too, while an unkeyed resource checks it alone.
func TestFencerClaimUsesTheGrantsGroup(t *testing.T) {
	c := fencelocktest.NewCluster(t, 1)
	ctx := testCtx(t)
	c.Leader(ctx)
	n := c.Node(1)
	waitUntil(t, ctx, "the group's ID", func() bool { return n.Status().GroupID != 0 })
	id := n.Status().GroupID
	l, err := newSession(t, ctx, n).Acquire(ctx, "claim/group")
	require.NoError(t, err)
	lctx := l.Context(ctx)

	f := fencelock.NewFencer()
	require.NoError(t, f.Claim(lctx, "mine", l.Token()))
	require.Equal(t, id, f.Group("mine"), "the claim keyed the resource to the grant's group")
	require.Equal(t, l.Token(), f.Highest("mine"))

	require.NoError(t, f.Rekey("theirs", id^1))
	err = f.Claim(lctx, "theirs", l.Token())
	require.ErrorIs(t, err, fencelock.ErrOtherGroup)
	var other *fencelock.OtherGroupError
	require.ErrorAs(t, err, &other)
	require.Equal(t, fencelock.Fence{Group: id, Token: l.Token()}, other.Fence)
	require.Zero(t, f.Highest("theirs"))
	require.ErrorIs(t, f.Claim(ctx, "theirs", l.Token()), fencelock.ErrOtherGroup, "no grant in ctx: a bare token, refused by a keyed resource")
	require.Zero(t, f.Highest("theirs"))
	require.NoError(t, f.Claim(ctx, "unkeyed", l.Token()), "no grant in ctx: the token alone on an unkeyed resource")
	require.Zero(t, f.Group("unkeyed"))
	require.Equal(t, id^1, f.Group("theirs"))
}
