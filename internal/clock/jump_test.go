package clock

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestJumpMovesWallOnly(t *testing.T) {
	var j Jumping
	before := j.Now()
	require.NoError(t, j.Jump(time.Hour))
	after := j.Now()
	require.Less(t, after.Sub(before), time.Second, "durations use the monotonic reading, which did not jump")
	require.GreaterOrEqual(t, after.Sub(before), time.Duration(0))
	wall := after.Round(0).Sub(before.Round(0))
	require.InDelta(t, float64(time.Hour), float64(wall), float64(time.Second), "the wall reading jumped")
	require.Contains(t, after.String(), "m=+", "it still carries a monotonic reading")
	require.True(t, after.After(before))

	require.NoError(t, j.Jump(-3*time.Hour))
	back := j.Now()
	require.GreaterOrEqual(t, back.Sub(after), time.Duration(0), "a backward jump does not turn time back")
	require.InDelta(t, float64(-2*time.Hour), float64(back.Round(0).Sub(before.Round(0))), float64(time.Second))
	require.True(t, strings.Contains(back.String(), "m=+"))

	require.Error(t, j.Jump(time.Millisecond))
}

func TestShiftWallRefusesTimesWithoutMonotonicReading(t *testing.T) {
	wallOnly := time.Now().Round(0)
	got, ok := shiftWall(wallOnly, 60)
	require.False(t, ok)
	require.Equal(t, wallOnly, got)
}
