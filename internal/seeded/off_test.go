//go:build !fencelock_seeded

package seeded

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Without the tag no defect is planted, whatever the environment says: the
// hooks are constant and the margin is the session's own.
func TestNothingPlantedWithoutTheTag(t *testing.T) {
	t.Setenv("FENCELOCK_SEEDED_BUG", string(MarginDropped))
	require.False(t, Enabled)
	for _, b := range All {
		require.False(t, On(b), "%s", b)
	}
	require.Equal(t, 300*time.Millisecond, Margin(300*time.Millisecond))
}
