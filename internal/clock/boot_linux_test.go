//go:build linux

package clock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// On Linux, Real's Boot reads CLOCK_BOOTTIME itself: not the monotonic
// clock, which would stop during a suspend. CLOCK_BOOTTIME is
// CLOCK_MONOTONIC plus the time spent suspended, so between two readings it
// advances at least as far as the monotonic clock, and its raw value is the
// kernel's own.
func TestRealBootIsBootTimeOnLinux(t *testing.T) {
	require.Equal(t, "CLOCK_BOOTTIME", BootSource())

	var before, after, mono unix.Timespec
	require.NoError(t, unix.ClockGettime(unix.CLOCK_BOOTTIME, &before))
	got := Boot(Real)
	require.NoError(t, unix.ClockGettime(unix.CLOCK_BOOTTIME, &after))
	require.NoError(t, unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono))
	require.GreaterOrEqual(t, got.ns, before.Nano(), "the reading is CLOCK_BOOTTIME's")
	require.LessOrEqual(t, got.ns, after.Nano())
	require.GreaterOrEqual(t, after.Nano(), mono.Nano()-int64(time.Millisecond),
		"boot time is never behind the monotonic clock")
}
