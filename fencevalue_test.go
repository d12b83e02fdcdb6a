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
