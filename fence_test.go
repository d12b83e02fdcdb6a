package fencelock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

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
	cl := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := cl.leader(ctx)
	a := newSession(t, ctx, cl.node(leader%3+1), WithTTL(time.Second))
	b := newSession(t, ctx, cl.node(leader), WithTTL(5*time.Second))
	fences := NewFencer()
	la, err := a.Acquire(ctx, "claim/lock")
	require.NoError(t, err)
	actx := la.Context(ctx)
	require.NoError(t, fences.Claim(actx, "claimed", la.Token()))
	require.NoError(t, fences.Do("claimed", la.Token(), func() error { return nil }))
	require.NoError(t, fences.Do("unclaimed", la.Token(), func() error { return nil }))
	res := acquireAsync(ctx, b, "claim/lock")
	waitWaiters(t, ctx, cl.node(leader), "claim/lock", 1)

	testhook.Pause(a)
	r := <-res
	require.NoError(t, r.err, "the group expired the paused holder and granted on")
	require.Greater(t, r.l.Token(), la.Token())
	require.NoError(t, fences.Claim(r.l.Context(ctx), "claimed", r.l.Token()))
	testhook.Resume(a)

	// A stand-in for a write that passed its holder's check just before the
	// pause: it carries the old token to the resource.
	var wrote []string
	err = fences.Do("claimed", la.Token(), func() error { wrote = append(wrote, "claimed"); return nil })
	require.ErrorIs(t, err, ErrStaleToken, "refused before the successor ever wrote")
	require.NoError(t, fences.Do("unclaimed", la.Token(), func() error { wrote = append(wrote, "unclaimed"); return nil }),
		"control: without a claim the fence knows of no successor yet")
	require.Equal(t, []string{"unclaimed"}, wrote)
	require.ErrorIs(t, fences.Claim(actx, "claimed", la.Token()), ErrSessionExpired,
		"a claim through the deposed holder's grant context is refused at the holder")
	require.Equal(t, r.l.Token(), fences.Highest("claimed"))
}
