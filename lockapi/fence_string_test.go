package lockapi

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// Fence.String writes what "%016x:%d" writes, in one allocation (the
// string): every grant the API answers carries one.
func TestFenceStringFormatAndAllocations(t *testing.T) {
	for _, f := range []Fence{{}, {Group: 0xab, Token: 7}, {Group: 1<<64 - 1, Token: 1<<64 - 1}, {Group: 1 << 60, Token: 10}, {Group: 0x1234567890abcdef}} {
		require.Equal(t, fmt.Sprintf("%016x:%d", f.Group, f.Token), f.String())
	}
	f := Fence{Group: 0x00000000000000ab, Token: 169738240}
	require.LessOrEqual(t, testing.AllocsPerRun(100, func() { _ = f.String() }), 1.0)
}

func FuzzFenceString(f *testing.F) {
	f.Add(uint64(0), uint64(0))
	f.Add(uint64(0xab), uint64(7))
	f.Fuzz(func(t *testing.T, group, token uint64) {
		fc := Fence{Group: group, Token: token}
		require.Equal(t, fmt.Sprintf("%016x:%d", group, token), fc.String())
	})
}
