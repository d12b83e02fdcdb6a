//go:build linux

package clock

import (
	"math"
	"time"

	"golang.org/x/sys/unix"
)

// bootSource is decided once, at start-up: a process whose deadlines mixed
// readings of two clocks would compare unrelated numbers.
var bootSource, bootNanos = pickBoot()

// pickBoot uses CLOCK_BOOTTIME (Linux 2.6.39 and later), which runs at
// CLOCK_MONOTONIC's rate and also counts the time the machine was suspended.
// If the kernel, or a sandbox's seccomp filter, refuses it, it falls back to
// Go's monotonic clock.
func pickBoot() (string, func() int64) {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return "monotonic", monotonicNanos
	}
	return "CLOCK_BOOTTIME", func() int64 {
		var ts unix.Timespec
		// Once it has succeeded it cannot fail (the only errors are a bad
		// clock ID or a bad pointer). Were it to, err towards giving the
		// session up: a reading past every deadline.
		if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
			return math.MaxInt64 / 2
		}
		return ts.Nano()
	}
}

func monotonicNanos() int64 { return int64(time.Since(origin)) }
