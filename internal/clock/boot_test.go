package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInstantArithmetic(t *testing.T) {
	a := Instant{ns: 1000}
	b := a.Add(1500 * time.Millisecond)
	require.Equal(t, 1500*time.Millisecond, b.Sub(a))
	require.Equal(t, -1500*time.Millisecond, a.Sub(b))
	require.True(t, a.Before(b))
	require.False(t, b.Before(a))
	require.True(t, b.After(a))
	require.False(t, a.After(a))
	require.False(t, a.Before(a))
}

// Real's Boot runs at the monotonic clock's rate while the machine is awake.
func TestRealBootAdvancesWithMonotonic(t *testing.T) {
	b0, m0 := Boot(Real), time.Now()
	time.Sleep(20 * time.Millisecond) // the interval being measured
	b1, m1 := Boot(Real), time.Now()
	mono := m1.Sub(m0)
	require.InDelta(t, float64(mono), float64(b1.Sub(b0)), float64(5*time.Millisecond))
	require.GreaterOrEqual(t, b1.Sub(b0), 20*time.Millisecond-time.Millisecond)
}

// A wall-clock step moves neither the Jumping clock's monotonic reading nor
// its Boot reading.
func TestJumpMovesNoBootReading(t *testing.T) {
	var j Jumping
	before := Boot(&j)
	require.NoError(t, j.Jump(time.Hour))
	require.Less(t, Boot(&j).Sub(before), time.Second)
	require.GreaterOrEqual(t, Boot(&j).Sub(before), time.Duration(0))
}

// wallOnly tells the time without a monotonic reading and offers no Boot.
type wallOnly struct{ off time.Duration }

func (c *wallOnly) Now() time.Time                            { return time.Now().Round(0).Add(c.off) }
func (c *wallOnly) NewTimer(d time.Duration) Timer            { return Real.NewTimer(d) }
func (c *wallOnly) AfterFunc(d time.Duration, f func()) Timer { return Real.AfterFunc(d, f) }

// A clock without Boot drives deadlines through its Now, with Now's
// properties: here a wall step moves the reading, as it must for the tests'
// wall-only control clock to show what a wall-clock design would do.
func TestBootFallsBackOnNow(t *testing.T) {
	c := &wallOnly{}
	before := Boot(c)
	c.off = time.Hour
	require.InDelta(t, float64(time.Hour), float64(Boot(c).Sub(before)), float64(time.Second))
}
