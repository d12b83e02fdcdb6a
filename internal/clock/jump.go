package clock

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// Jumping is the process clock with a wall reading that tests can move, as an
// operator or NTP stepping the system clock would, while its monotonic
// reading flows on untouched. It shows that fencelock's timers rely on the
// monotonic reading only: every time.Time it returns carries both, and
// time.Time's Sub, Before and After use the monotonic one when both times
// have it.
type Jumping struct{ offset atomic.Int64 } // seconds added to the wall reading

// Now returns the time with its wall reading moved by every Jump so far.
func (j *Jumping) Now() time.Time {
	t, _ := shiftWall(time.Now(), j.offset.Load())
	return t
}

// NewTimer and AfterFunc count durations, which no wall jump changes.
func (j *Jumping) NewTimer(d time.Duration) Timer { return Real.NewTimer(d) }

// AfterFunc calls f after d.
func (j *Jumping) AfterFunc(d time.Duration, f func()) Timer { return Real.AfterFunc(d, f) }

// Jump moves the wall reading by d, whole seconds, forwards or backwards.
// It fails if this Go runtime lays out time.Time differently from what the
// clock expects (the check compares the readings after the move), so a test
// never passes on a jump that did not happen.
func (j *Jumping) Jump(d time.Duration) error {
	if d%time.Second != 0 {
		return fmt.Errorf("clock: jump %v is not whole seconds", d)
	}
	now := time.Now()
	off := j.offset.Load() + int64(d/time.Second)
	moved, ok := shiftWall(now, off)
	wall := moved.Round(0).Sub(now.Round(0)) // Round(0) drops the monotonic reading
	if !ok || moved.Sub(now) != 0 || wall != time.Duration(off)*time.Second {
		return fmt.Errorf("clock: cannot move the wall reading alone on this runtime (monotonic %v, wall %v)",
			moved.Sub(now), wall)
	}
	j.offset.Store(off)
	return nil
}

// goTime mirrors the layout of time.Time (Go 1.9 and later): with the
// hasMonotonic bit set, wall holds 33 bits of seconds since 1885 above 30
// bits of nanoseconds, and ext the monotonic reading.
type goTime struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const (
	hasMonotonic = 1 << 63
	nsecBits     = 30
	secMask      = 1<<33 - 1
)

// shiftWall moves t's wall reading by secs seconds and keeps its monotonic
// reading. It reports false, and returns t, if t has no monotonic reading
// or the result would leave the range the layout can hold.
func shiftWall(t time.Time, secs int64) (time.Time, bool) {
	if secs == 0 {
		return t, true
	}
	if unsafe.Sizeof(t) != unsafe.Sizeof(goTime{}) {
		return t, false
	}
	g := (*goTime)(unsafe.Pointer(&t))
	if g.wall&hasMonotonic == 0 {
		return t, false
	}
	s := int64(g.wall>>nsecBits&secMask) + secs
	if s < 0 || s > secMask {
		return t, false
	}
	g.wall = g.wall&^(secMask<<nsecBits) | uint64(s)<<nsecBits
	return t, true
}
