// Package clock is the time source of fencelock's timers: the leader's
// session-expiry timers and each client's session deadline. The leader's
// timers use the process's monotonic clock, so a wall-clock jump neither
// expires nor extends a session. A holder's deadline is measured on Boot,
// which also counts the time the machine was suspended where the OS offers
// such a clock (CLOCK_BOOTTIME on Linux): a suspend can make a holder give
// its session up early, never late. Timers are Go's runtime timers either
// way; every deadline is checked against Boot when they fire. Tests
// substitute clocks of their own.
package clock

import "time"

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine after d; the returned timer's
	// C is nil.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a resettable one-shot timer.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real is the process clock. time.Now carries a monotonic reading, and
// Sub, Before and After use it, so durations measured with Real ignore
// changes to the wall clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time        { return t.t.C }
func (t realTimer) Stop() bool                 { return t.t.Stop() }
func (t realTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
