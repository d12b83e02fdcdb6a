package integration_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Every grant carries its group's ID, the same on every replica, chosen by
// the group's first leader; a group bootstrapped separately has another.
func TestGrantsCarryTheGroupID(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	c.Leader(ctx)
	waitUntil(t, ctx, "every replica knows the group's ID", func() bool {
		for _, n := range running(c) {
			if n.Status().GroupID == 0 {
				return false
			}
		}
		return true
	})
	id := c.Node(1).Status().GroupID
	require.Equal(t, id, c.Node(2).Status().GroupID)
	require.Equal(t, id, c.Node(3).Status().GroupID)
	l, err := newSession(t, ctx, c.Node(2)).Acquire(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, fencelock.Fence{Group: id, Token: l.Token()}, l.Fence())
	f, ok := fencelock.FenceFrom(l.Context(ctx))
	require.True(t, ok)
	require.Equal(t, l.Fence(), f)

	other := fencelocktest.NewCluster(t, 1)
	waitUntil(t, ctx, "the other group's ID", func() bool { return other.Node(1).Status().GroupID != 0 })
	require.NotEqual(t, id, other.Node(1).Status().GroupID)

	// The ID survives a restart of the whole group.
	restartAll(c)
	c.Leader(ctx)
	require.Equal(t, id, c.Node(1).Status().GroupID)
}
