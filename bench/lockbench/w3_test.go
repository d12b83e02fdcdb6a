package lockbench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tokenFake is the fake's exclusive lock with tokens made by tok from the
// fake's rising count: to show W3 checking them, or not having any.
type tokenFake struct {
	*fake
	tok func(rising uint64) uint64
}

func (f tokenFake) NewClient(context.Context, int, time.Duration) (Client, error) {
	return tokenClient{fakeClient{f.fake}, f.tok}, nil
}

type tokenClient struct {
	fakeClient
	tok func(uint64) uint64
}

type tokenHeld struct {
	fakeHeld
	token uint64
}

func (h tokenHeld) Token() uint64 { return h.token }

func (c tokenClient) Acquire(ctx context.Context, name string) (Held, error) {
	h, err := c.fakeClient.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	fh := h.(fakeHeld)
	return tokenHeld{fh, c.tok(fh.token)}, nil
}

func runW3(t *testing.T, tok func(uint64) uint64) Result {
	o := Options{System: "fake", Duration: 200 * time.Millisecond, Workers: 4}
	r, err := Run(context.Background(), o, "W3", func(context.Context, string) (Cluster, error) {
		return tokenFake{newFake(1), tok}, nil
	}, t.TempDir())
	require.NoError(t, err)
	require.Positive(t, r.Ops)
	return r
}

func TestW3ChecksTokensRiseAndCountsGrantsWithoutOne(t *testing.T) {
	r := runW3(t, func(n uint64) uint64 { return n })
	require.Zero(t, r.Errors, r.Notes)
	_, ok := r.Note("untokened_grants")
	require.False(t, ok, r.Notes)

	// Tokens that fall every other grant are errors.
	r = runW3(t, func(n uint64) uint64 { return 1000 - n%2*500 })
	falls, ok := r.Note("token_not_rising")
	require.True(t, ok)
	require.Positive(t, falls)
	require.GreaterOrEqual(t, r.Errors, int(falls))

	// A system with no tokens (0) is not an error: its grants are counted.
	r = runW3(t, func(uint64) uint64 { return 0 })
	require.Zero(t, r.Errors, r.Notes)
	n, ok := r.Note("untokened_grants")
	require.True(t, ok, r.Notes)
	require.GreaterOrEqual(t, n, float64(r.Ops), "every grant, warm-up's included")
}
