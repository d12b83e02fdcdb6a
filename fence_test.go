package fencelock

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/testhook"
)

func TestFencerAdmitsRisingAndEqualTokens(t *testing.T) {
	f := NewFencer()
	require.Equal(t, uint64(0), f.Highest("r"))
	require.NoError(t, f.Admit("r", 5))
	require.NoError(t, f.Admit("r", 5), "the same holder writes again")
	require.NoError(t, f.Admit("r", 9))
	require.Equal(t, uint64(9), f.Highest("r"))

	err := f.Admit("r", 7)
	require.ErrorIs(t, err, ErrStaleToken)
	var stale *StaleTokenError
	require.True(t, errors.As(err, &stale))
	require.Equal(t, StaleTokenError{Resource: "r", Token: 7, Highest: 9}, *stale)
	require.Contains(t, err.Error(), "9", "the error names the highest token seen")
	require.Equal(t, uint64(9), f.Highest("r"), "a refusal leaves the mark alone")

	require.NoError(t, f.Admit("other", 1), "resources are independent")
}

func TestFencerDoRunsWriteOnlyWhenAdmitted(t *testing.T) {
	f := NewFencer()
	var writes []uint64
	write := func(tok uint64) func() error {
		return func() error { writes = append(writes, tok); return nil }
	}
	require.NoError(t, f.Do("r", 3, write(3)))
	require.ErrorIs(t, f.Do("r", 2, write(2)), ErrStaleToken)
	require.NoError(t, f.Do("r", 4, write(4)))
	require.Equal(t, []uint64{3, 4}, writes)

	boom := errors.New("disk full")
	require.ErrorIs(t, f.Do("r", 6, func() error { return boom }), boom)
	require.Equal(t, uint64(6), f.Highest("r"), "the mark is raised on admission, even if the write fails")
	require.ErrorIs(t, f.Do("r", 5, write(5)), ErrStaleToken)
}

func TestFencerRaiseRestoresPersistedMark(t *testing.T) {
	f := NewFencer()
	f.Raise("r", 10)
	f.Raise("r", 4)
	require.Equal(t, uint64(10), f.Highest("r"))
	require.ErrorIs(t, f.Admit("r", 9), ErrStaleToken)
}

// An older token's write can never land after a newer token was admitted:
// Do holds the resource's check for the whole write.
func TestFencerDoSerialisesWritesPerResource(t *testing.T) {
	f := NewFencer()
	inOld := make(chan struct{})
	releaseOld := make(chan struct{})
	var mu sync.Mutex
	var order []uint64
	record := func(tok uint64) {
		mu.Lock()
		order = append(order, tok)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		require.NoError(t, f.Do("r", 1, func() error {
			close(inOld)
			<-releaseOld
			record(1)
			return nil
		}))
	}()
	<-inOld
	newDone := make(chan error, 1)
	go func() {
		defer wg.Done()
		newDone <- f.Do("r", 2, func() error { record(2); return nil })
	}()
	select {
	case <-newDone:
		t.Fatal("a newer token's write ran while an older write held the check")
	default:
	}
	// Another resource is not held up.
	require.NoError(t, f.Do("other", 1, func() error { return nil }))
	close(releaseOld)
	wg.Wait()
	require.NoError(t, <-newDone)
	require.Equal(t, []uint64{1, 2}, order)
}

func TestFencerConcurrentAdmissionsKeepTheMaximum(t *testing.T) {
	f := NewFencer()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 500 {
				_ = f.Admit("r", uint64(i*8+w))
			}
		}()
	}
	wg.Wait()
	require.Equal(t, uint64(499*8+7), f.Highest("r"))
}

func TestFencerClaim(t *testing.T) {
	f := NewFencer()
	ctx := context.Background()
	require.NoError(t, f.Claim(ctx, "r", 5))
	require.NoError(t, f.Claim(ctx, "r", 5), "an equal token is admitted")
	require.ErrorIs(t, f.Claim(ctx, "r", 4), ErrStaleToken)
	require.Equal(t, uint64(5), f.Highest("r"))
	ended, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, f.Claim(ended, "r", 9), context.Canceled)
	require.Equal(t, uint64(5), f.Highest("r"), "a claim with an ended context changes nothing")
	var _ Claimer = f
}

// Claim at grant: the successor claims its token at the resource as soon as
// it is granted, and the deposed holder's write, made with its token after
// waking from a pause past its TTL, is refused although the successor never
// wrote. The control resource, which the successor did not claim, admits
// that same late write: the gap the claim closes.
func TestClaimAtGrantRefusesPredecessorBeforeSuccessorWrites(t *testing.T) {
	cl, ctx, leader, a, b := holderAndWaiter(t)
	fences := NewFencer()
	la, err := a.Acquire(ctx, "claim/lock")
	require.NoError(t, err)
	actx := la.Context(ctx)
	require.NoError(t, fences.Claim(actx, "claimed", la.Token()))
	require.NoError(t, fences.DoFence("claimed", la.Fence(), func() error { return nil }))
	require.NoError(t, fences.Do("unclaimed", la.Token(), func() error { return nil }))

	successor := pauseHolderUntilPassedOn(t, ctx, cl.node(leader), a, b, "claim/lock")
	require.Greater(t, successor.Token(), la.Token())
	require.NoError(t, fences.Claim(successor.Context(ctx), "claimed", successor.Token()))
	testhook.Resume(a)

	// A stand-in for a write that passed its holder's check just before the
	// pause: it carries the old token to the resource.
	var wrote []string
	err = fences.DoFence("claimed", la.Fence(), func() error { wrote = append(wrote, "claimed"); return nil })
	require.ErrorIs(t, err, ErrStaleToken, "refused before the successor ever wrote")
	require.NoError(t, fences.Do("unclaimed", la.Token(), func() error { wrote = append(wrote, "unclaimed"); return nil }),
		"control: without a claim the fence knows of no successor yet")
	require.Equal(t, []string{"unclaimed"}, wrote)
	require.ErrorIs(t, fences.Claim(actx, "claimed", la.Token()), ErrSessionExpired,
		"a claim through the deposed holder's grant context is refused at the holder")
	require.Equal(t, successor.Token(), fences.Highest("claimed"))
}

// The group rule: the first admitted nonzero group keys the resource; a
// fence of another group is refused whatever its token, and changes
// nothing; group 0 and bare tokens are checked by token alone while the
// resource is keyed to no group, and refused once it is.
func TestFencerGroupRule(t *testing.T) {
	const g1, g2 = 0xfeed, 0xbeef
	f := NewFencer()
	var writes []Fence
	write := func(fe Fence) func() error { return func() error { writes = append(writes, fe); return nil } }

	require.NoError(t, f.Do("r", 3, write(Fence{Token: 3})), "a bare token keys nothing")
	require.Zero(t, f.Group("r"))
	require.NoError(t, f.DoFence("r", Fence{Group: g1, Token: 5}, write(Fence{Group: g1, Token: 5})))
	require.Equal(t, uint64(g1), f.Group("r"), "adopted on the first nonzero group")

	for _, tok := range []uint64{1, 5, 1 << 40} {
		err := f.DoFence("r", Fence{Group: g2, Token: tok}, write(Fence{Group: g2, Token: tok}))
		require.ErrorIs(t, err, ErrOtherGroup, "token %d", tok)
		require.NotErrorIs(t, err, ErrStaleToken, "another group's token is not comparable, so not stale")
		var other *OtherGroupError
		require.ErrorAs(t, err, &other)
		require.Equal(t, OtherGroupError{Resource: "r", Fence: Fence{Group: g2, Token: tok}, Group: g1}, *other)
		require.Contains(t, err.Error(), "000000000000beef")
	}
	require.ErrorIs(t, f.ClaimFence(context.Background(), "r", Fence{Group: g2, Token: 9}), ErrOtherGroup)
	require.Equal(t, uint64(5), f.Highest("r"), "a refused group leaves the mark alone")
	require.Equal(t, uint64(g1), f.Group("r"))

	err := f.DoFence("r", Fence{Token: 6}, write(Fence{Token: 6}))
	require.ErrorIs(t, err, ErrOtherGroup, "group 0 on a keyed resource")
	var other *OtherGroupError
	require.ErrorAs(t, err, &other)
	require.Equal(t, OtherGroupError{Resource: "r", Fence: Fence{Token: 6}, Group: g1}, *other)
	require.Contains(t, err.Error(), "carries no group")
	require.ErrorIs(t, f.Admit("r", 7), ErrOtherGroup, "a bare token on a keyed resource")
	require.ErrorIs(t, f.Do("r", 7, write(Fence{Token: 7})), ErrOtherGroup)
	require.ErrorIs(t, f.ClaimFence(context.Background(), "r", Fence{Token: 7}), ErrOtherGroup)
	require.ErrorIs(t, f.Claim(context.Background(), "r", 7), ErrOtherGroup, "no grant in ctx: a bare token")
	require.Equal(t, uint64(5), f.Highest("r"), "group 0 never raises a keyed resource's mark")
	require.ErrorIs(t, f.DoFence("r", Fence{Group: g1, Token: 4}, write(Fence{Group: g1, Token: 4})), ErrStaleToken)
	require.NoError(t, f.DoFence("r", Fence{Group: g1, Token: 7}, write(Fence{Group: g1, Token: 7})))
	require.Equal(t, uint64(g1), f.Group("r"), "group 0 does not unkey the resource")
	require.Equal(t, []Fence{{Token: 3}, {Group: g1, Token: 5}, {Group: g1, Token: 7}}, writes)

	// Unkeyed, group 0 is the token alone and keys nothing.
	require.NoError(t, f.DoFence("u", Fence{Token: 6}, write(Fence{Token: 6})))
	require.NoError(t, f.Admit("u", 7))
	require.ErrorIs(t, f.Admit("u", 6), ErrStaleToken)
	require.Zero(t, f.Group("u"))

	// A stale fence does not key the resource: only an admitted one does.
	f.Raise("s", 10)
	require.ErrorIs(t, f.DoFence("s", Fence{Group: g2, Token: 9}, write(Fence{})), ErrStaleToken)
	require.Zero(t, f.Group("s"))
	require.NoError(t, f.ClaimFence(context.Background(), "s", Fence{Group: g2, Token: 10}))
	require.Equal(t, uint64(g2), f.Group("s"), "resources are keyed independently")
}

// Rekey is the operator's re-key after the group was replaced: the new
// group's low tokens are admitted, the old group's refused.
func TestFencerRekey(t *testing.T) {
	const old, fresh = 0x1111, 0x2222
	f := NewFencer()
	require.NoError(t, f.DoFence("r", Fence{Group: old, Token: 1 << 40}, func() error { return nil }))
	require.ErrorIs(t, f.DoFence("r", Fence{Group: fresh, Token: 3}, func() error { return nil }), ErrOtherGroup,
		"a group bootstrapped again from empty Dirs starts low, and is not this resource's")

	require.ErrorIs(t, f.Rekey("r", 0), ErrInvalidFence)
	require.Equal(t, uint64(old), f.Group("r"), "a refused re-key changes nothing")
	require.Equal(t, uint64(1<<40), f.Highest("r"))

	require.NoError(t, f.Rekey("r", fresh))
	require.Equal(t, uint64(fresh), f.Group("r"))
	require.Zero(t, f.Highest("r"))
	require.NoError(t, f.DoFence("r", Fence{Group: fresh, Token: 3}, func() error { return nil }))
	ran := false
	err := f.DoFence("r", Fence{Group: old, Token: 1<<40 + 1}, func() error { ran = true; return nil })
	require.ErrorIs(t, err, ErrOtherGroup, "the old group's holder, even with a higher token")
	require.False(t, ran)
	require.ErrorIs(t, f.DoFence("r", Fence{Group: fresh, Token: 2}, func() error { return nil }), ErrStaleToken)

	// Restoring a persisted mark: Rekey, then Raise.
	restored := NewFencer()
	require.NoError(t, restored.Rekey("r", f.Group("r")))
	restored.Raise("r", f.Highest("r"))
	require.ErrorIs(t, restored.ClaimFence(context.Background(), "r", Fence{Group: old, Token: 9}), ErrOtherGroup)
	require.ErrorIs(t, restored.ClaimFence(context.Background(), "r", Fence{Group: fresh, Token: 2}), ErrStaleToken)
	require.NoError(t, restored.ClaimFence(context.Background(), "r", Fence{Group: fresh, Token: 3}))
}

// The probe: a resource keyed to group feed at token 100 is sent
// Fence{0, 5000} (a bare token from another deployment). It must be refused
// as of no group and leave the mark alone, so that the group's next holder,
// token 200, is admitted; before, the group-0 fence raised the mark to 5000
// and 200 was refused as stale, hiding that two groups write.
func TestFencerRefusesGroupZeroOnAKeyedResource(t *testing.T) {
	const feed = 0xfeed
	f := NewFencer()
	require.NoError(t, f.ClaimFence(context.Background(), "r", Fence{Group: feed, Token: 100}))
	ran := false
	err := f.DoFence("r", Fence{Token: 5000}, func() error { ran = true; return nil })
	require.ErrorIs(t, err, ErrOtherGroup)
	require.NotErrorIs(t, err, ErrStaleToken)
	require.False(t, ran, "the refused write did not run")
	require.Equal(t, uint64(100), f.Highest("r"), "group 0 never raises the mark")
	require.NoError(t, f.DoFence("r", Fence{Group: feed, Token: 200}, func() error { return nil }),
		"the group's next holder is admitted")
	require.Equal(t, uint64(200), f.Highest("r"))
}
