package main

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/stretchr/testify/require"
)

// unsetenv unsets key for the test, restoring it after.
func unsetenv(t *testing.T, key string) {
	t.Setenv(key, "")
	require.NoError(t, os.Unsetenv(key))
}

// serve's memory limit is 90% of the container's, unless GOMEMLIMIT or
// AUTOMEMLIMIT=off say otherwise; AUTOMEMLIMIT takes another ratio; no
// container limit, or a provider that fails, leaves the runtime's.
func TestSetMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	const container = 512 << 20
	size := float64(container)
	want90 := int64(size * memoryRatio) // rounded down, as the library does
	called := false
	limit512 := func() (uint64, error) { called = true; return container, nil }

	unsetenv(t, "GOMEMLIMIT")
	unsetenv(t, "AUTOMEMLIMIT")
	require.Equal(t, want90, setMemoryLimit(quiet, limit512))
	require.Equal(t, want90, debug.SetMemoryLimit(-1))

	t.Setenv("AUTOMEMLIMIT", "0.5")
	require.Equal(t, int64(container/2), setMemoryLimit(quiet, limit512))

	for _, env := range [][2]string{{"AUTOMEMLIMIT", "off"}, {"GOMEMLIMIT", "256MiB"}} {
		debug.SetMemoryLimit(123 << 20)
		called = false
		t.Setenv(env[0], env[1])
		require.Equal(t, int64(123<<20), setMemoryLimit(quiet, limit512), env)
		require.False(t, called, "%v: the container's limit was read", env)
		require.Equal(t, int64(123<<20), debug.SetMemoryLimit(-1), env)
		unsetenv(t, env[0])
	}

	require.Equal(t, int64(math.MaxInt64), setMemoryLimit(quiet, func() (uint64, error) { return 0, memlimit.ErrNoLimit }))

	debug.SetMemoryLimit(123 << 20)
	broken := func() (uint64, error) { return 0, errors.New("cgroup unreadable") }
	require.Equal(t, int64(123<<20), setMemoryLimit(quiet, broken))
	require.Equal(t, int64(123<<20), debug.SetMemoryLimit(-1))
}
