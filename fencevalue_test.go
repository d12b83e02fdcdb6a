package fencelock

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFenceStringRoundTrip(t *testing.T) {
	for _, f := range []Fence{{Group: 0xfeed, Token: 262144}, {Group: math.MaxUint64, Token: math.MaxUint64}, {Token: 1}} {
		got, err := ParseFence(f.String())
		require.NoError(t, err)
		require.Equal(t, f, got)
	}
	f, err := ParseFence("262144")
	require.NoError(t, err)
	require.Equal(t, Fence{Token: 262144}, f, "a bare token has no group")
	for _, s := range []string{"", "0", "abc", "feed:1", "000000000000feed:", "000000000000feed:-1", "00000000000000zz:1", "000000000000feed:1:2", ":1"} {
		_, err := ParseFence(s)
		require.ErrorIs(t, err, ErrInvalidFence, "%q", s)
	}
}

// Headers and other languages send fences: whatever the string, ParseFence
// returns a fence that formats back to an equivalent one, or ErrInvalidFence.
func FuzzParseFence(f *testing.F) {
	for _, s := range []string{"000000000000feed:262144", "1", "ffffffffffffffff:18446744073709551615", ":", "x:y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fence, err := ParseFence(s)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidFence)
			return
		}
		require.NotZero(t, fence.Token)
		again, err := ParseFence(fence.String())
		require.NoError(t, err)
		require.Equal(t, fence, again)
	})
}

// Every grant carries its group's ID, the same on every replica, chosen by
// the group's first leader; a group bootstrapped separately has another.
func TestGrantsCarryTheGroupID(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	c.leader(ctx)
	waitUntil(t, ctx, "every replica knows the group's ID", func() bool {
		for _, n := range c.nodes {
			if n.Status().GroupID == 0 {
				return false
			}
		}
		return true
	})
	id := c.node(1).Status().GroupID
	require.Equal(t, id, c.node(2).Status().GroupID)
	require.Equal(t, id, c.node(3).Status().GroupID)
	l, err := newSession(t, ctx, c.node(2)).Acquire(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, Fence{Group: id, Token: l.Token()}, l.Fence())
	f, ok := FenceFrom(l.Context(ctx))
	require.True(t, ok)
	require.Equal(t, l.Fence(), f)

	other := newCluster(t, 1, nil)
	waitUntil(t, ctx, "the other group's ID", func() bool { return other.node(1).Status().GroupID != 0 })
	require.NotEqual(t, id, other.node(1).Status().GroupID)

	// The ID survives a restart of the whole group.
	c.closeAll()
	c.startAll()
	c.leader(ctx)
	require.Equal(t, id, c.node(1).Status().GroupID)
}
