package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Rated clock's readings and timers run at its rate: a slow clock's
// Boot and Now advance less than the real clock around them, and its
// timer fires later by the real clock; a fast one's the other way.
func TestRatedClockRunsAtItsRate(t *testing.T) {
	var j Jumping
	for _, rate := range []float64{0.8, 1.25} {
		r, err := NewRated(&j, rate)
		require.NoError(t, err)
		const d = 50 * time.Millisecond
		m0, b0, n0 := time.Now(), r.Boot(), r.Now()
		tm := r.NewTimer(d)
		<-tm.C()
		b1, n1, m1 := r.Boot(), r.Now(), time.Now()
		realD := m1.Sub(m0)
		require.GreaterOrEqual(t, float64(realD), float64(d)/rate, "the timer fired early by the real clock (rate %v)", rate)
		require.GreaterOrEqual(t, b1.Sub(b0), d, "the timer fired before d by the rated clock (rate %v)", rate)
		require.InDelta(t, float64(realD)*rate, float64(b1.Sub(b0)), float64(2*time.Millisecond), "Boot's rate %v", rate)
		require.InDelta(t, float64(realD)*rate, float64(n1.Sub(n0)), float64(2*time.Millisecond), "Now's rate %v", rate)
	}
	_, err := NewRated(&j, 0)
	require.Error(t, err)
}

// A wall step of its Jumping moves a Rated clock's wall reading, not its
// durations.
func TestRatedClockTakesWallSteps(t *testing.T) {
	var j Jumping
	r, err := NewRated(&j, 1.05)
	require.NoError(t, err)
	before := r.Now()
	require.NoError(t, j.Jump(time.Hour))
	after := r.Now()
	require.Less(t, after.Sub(before), time.Second)
	require.InDelta(t, float64(time.Hour), float64(after.Round(0).Sub(before.Round(0))), float64(time.Second))
}
