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
// A Boot reading and a monotonic one cannot be taken at the same instant, so
// each Boot reading is bracketed by two monotonic ones: the Boot interval
// lies between the monotonic interval inside it and the one around it,
// however long the process was preempted between two readings.
func TestRealBootAdvancesWithMonotonic(t *testing.T) {
	const grain = 100 * time.Microsecond // the two clocks' reading granularity, not a speed
	mA := time.Now()
	b0 := Boot(Real)
	mB := time.Now()
	time.Sleep(20 * time.Millisecond) // the interval being measured
	mC := time.Now()
	b1 := Boot(Real)
	mD := time.Now()
	boot := b1.Sub(b0)
	require.GreaterOrEqual(t, boot, mC.Sub(mB)-grain, "Boot ran slower than the monotonic clock")
	require.LessOrEqual(t, boot, mD.Sub(mA)+grain, "Boot ran faster than the monotonic clock")
	require.GreaterOrEqual(t, boot, 20*time.Millisecond-time.Millisecond)
}

// A wall-clock step moves neither the Jumping clock's monotonic reading nor
// its Boot reading: the Boot interval is no longer than the monotonic one
// around it.
func TestJumpMovesNoBootReading(t *testing.T) {
	var j Jumping
	m0 := time.Now()
	before := Boot(&j)
	require.NoError(t, j.Jump(time.Hour))
	after := Boot(&j)
	m1 := time.Now()
	require.LessOrEqual(t, after.Sub(before), m1.Sub(m0))
	require.GreaterOrEqual(t, after.Sub(before), time.Duration(0))
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
	m0 := time.Now()
	before := Boot(c)
	c.off = time.Hour
	after := Boot(c)
	m1 := time.Now()
	// The hour, plus the time that passed between the readings (by the
	// wall clock, which the monotonic one bounds unless it steps).
	require.GreaterOrEqual(t, after.Sub(before), time.Hour)
	require.LessOrEqual(t, after.Sub(before), time.Hour+m1.Sub(m0)+time.Millisecond)
}
