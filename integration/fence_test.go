package integration_test

import (
	"fmt"
	"sync"
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
	c, ctx := newCluster(t, 1)
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

// Every grant carries its group's ID, the same on every replica, chosen by
// the group's first leader; a group bootstrapped separately has another.
func TestGrantsCarryTheGroupID(t *testing.T) {
	c, ctx := newCluster(t, 3)
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

// In a brand-new group the very first grants already carry the group's ID:
// a grant is applied only after the ID (its entry has a higher index), so
// its fence, read the moment the grant is reported, never has group 0.
// Every replica opens a session and asks for a lock, then campaigns, at
// once, before any leader exists.
func TestFirstGrantsOfANewGroupCarryItsID(t *testing.T) {
	c, ctx := newCluster(t, 3)
	type seen struct {
		what  string
		group uint64
	}
	var mu sync.Mutex
	var seens []seen
	record := func(what string, group uint64) {
		mu.Lock()
		defer mu.Unlock()
		seens = append(seens, seen{what, group})
	}
	var wg sync.WaitGroup
	for id, n := range running(c) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := n.NewSession(ctx)
			if !assertNoError(t, err) {
				return
			}
			defer s.Close(ctx)
			l, err := s.Acquire(ctx, fmt.Sprintf("first-%d", id))
			if !assertNoError(t, err) {
				return
			}
			record(fmt.Sprintf("replica %d's first lock", id), l.Fence().Group)
			lead, err := s.Campaign(ctx, "first", "")
			if !assertNoError(t, err) {
				return
			}
			record(fmt.Sprintf("replica %d's term", id), lead.Fence().Group)
			assertNoError(t, lead.Resign(ctx)) // the next replica's turn
		}()
	}
	wg.Wait()
	id := c.Node(1).Status().GroupID
	require.NotZero(t, id)
	require.Len(t, seens, 6)
	for _, s := range seens {
		require.Equal(t, id, s.group, "%s: the group's ID", s.what)
	}
}
