package clock

import "time"

// Instant is a reading of the clock a holder's deadline is measured on: a
// count of nanoseconds from an origin fixed for the life of the process. Only
// differences between Instants of one clock mean anything.
//
// It exists because time.Time's monotonic reading is, on Linux,
// CLOCK_MONOTONIC, which stops while the machine is suspended: a deadline
// measured on it moves later by the length of every suspend, and a holder
// suspended past its TTL would wake believing it still holds its locks.
// Real's Instants count suspended time where the OS offers such a clock
// (CLOCK_BOOTTIME on Linux; see BootSource).
type Instant struct{ ns int64 }

// Add returns the instant d after i.
func (i Instant) Add(d time.Duration) Instant { return Instant{i.ns + int64(d)} }

// Sub returns the duration i − j.
func (i Instant) Sub(j Instant) time.Duration { return time.Duration(i.ns - j.ns) }

// Before reports whether i is before j.
func (i Instant) Before(j Instant) bool { return i.ns < j.ns }

// After reports whether i is after j.
func (i Instant) After(j Instant) bool { return i.ns > j.ns }

// Booter is implemented by clocks that can read a clock counting the time the
// machine spent suspended. Real and Jumping implement it.
type Booter interface {
	// Boot returns the current reading. It never goes backwards, and it
	// advances while the process is paused and, where BootSource says so,
	// while the machine is suspended.
	Boot() Instant
}

// Boot returns c's reading for deadlines: c.Boot() when c implements
// Booter, otherwise c.Now() measured from a fixed origin (so a test clock
// that only tells the time still drives deadlines, with the properties of
// its Now: with a monotonic reading, no wall step moves it; without one,
// every wall step does).
func Boot(c Clock) Instant {
	if b, ok := c.(Booter); ok {
		return b.Boot()
	}
	return Instant{int64(c.Now().Sub(origin))}
}

// origin is the zero of the fallback readings: the monotonic reading at
// start-up.
var origin = time.Now()

// Boot reads the suspend-counting clock of this OS (see BootSource).
func (realClock) Boot() Instant { return Instant{bootNanos()} }

// Boot is Real's reading: a wall step moves neither it nor the monotonic
// reading.
func (j *Jumping) Boot() Instant { return Real.(Booter).Boot() }

// BootSource names the clock Real's Boot reads: "CLOCK_BOOTTIME" on Linux,
// which counts suspended time, or "monotonic" (Go's monotonic clock) where
// fencelock knows no such clock or the kernel refused it; whether that counts
// suspended time depends on the OS.
func BootSource() string { return bootSource }
