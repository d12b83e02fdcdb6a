package clock

import (
	"sync/atomic"
	"time"
)

// Ahead is the process clock moved forward on demand (Set), monotonic
// reading included, while its timers run in real time: the clock of a
// process that woke from a pause before any of its timers could run. It is
// not a Booter, so Boot reads it as it reads Now. Tests use it.
type Ahead struct{ by atomic.Int64 }

// Now is the process's time, moved forward by Set.
func (c *Ahead) Now() time.Time { return time.Now().Add(time.Duration(c.by.Load())) }

// NewTimer counts d in real time.
func (c *Ahead) NewTimer(d time.Duration) Timer { return Real.NewTimer(d) }

// AfterFunc calls f after d, counted in real time.
func (c *Ahead) AfterFunc(d time.Duration, f func()) Timer { return Real.AfterFunc(d, f) }

// Set puts the clock d ahead of the process's.
func (c *Ahead) Set(d time.Duration) { c.by.Store(int64(d)) }
