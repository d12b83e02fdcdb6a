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
		// Each rated reading is taken between two real ones, so that a
		// preemption beside it (a loaded machine) widens the real interval
		// the rated one must fall in rather than shifting it: a single
		// real reading beside each once failed by 3.3ms under load.
		lo0, b0, n0, hi0 := time.Now(), r.Boot(), r.Now(), time.Now()
		tm := r.NewTimer(d)
		<-tm.C()
		lo1, b1, n1, hi1 := time.Now(), r.Boot(), r.Now(), time.Now()
		least, most := lo1.Sub(hi0), hi1.Sub(lo0)
		require.GreaterOrEqual(t, float64(most), float64(d)/rate, "the timer fired early by the real clock (rate %v)", rate)
		require.GreaterOrEqual(t, b1.Sub(b0), d, "the timer fired before d by the rated clock (rate %v)", rate)
		const slack = float64(time.Millisecond) // the rated clock's rounding
		for what, got := range map[string]time.Duration{"Boot": b1.Sub(b0), "Now": n1.Sub(n0)} {
			require.GreaterOrEqual(t, float64(got), float64(least)*rate-slack, "%s's rate %v: %v in a real %v..%v", what, rate, got, least, most)
			require.LessOrEqual(t, float64(got), float64(most)*rate+slack, "%s's rate %v: %v in a real %v..%v", what, rate, got, least, most)
		}
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
