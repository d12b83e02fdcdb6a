//go:build fencelock_seeded

package seeded

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// With the tag, Plant plants one defect at a time and undo restores what
// was planted before.
func TestPlantOneAtATime(t *testing.T) {
	defer Plant("")() // whatever FENCELOCK_SEEDED_BUG planted, none for now
	undo := Plant(MarginDropped)
	require.True(t, On(MarginDropped))
	require.False(t, On(LeasePlusMargin))
	require.Equal(t, time.Duration(0), Margin(300*time.Millisecond))
	inner := Plant(LeasePlusMargin)
	require.Equal(t, -300*time.Millisecond, Margin(300*time.Millisecond))
	inner()
	require.True(t, On(MarginDropped))
	undo()
	for _, b := range All {
		require.False(t, On(b), "%s", b)
	}
	require.Len(t, All, 12)
}
