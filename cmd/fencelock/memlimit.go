package main

import (
	"log/slog"
	"os"
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryRatio is the share of the container's memory limit that serve
// gives the Go runtime as its soft limit (GOMEMLIMIT). The rest is for
// what the runtime does not count against it (memory outside the Go heap
// the kernel charges to the container, such as the log store's cache
// pages and thread stacks), so that the garbage collector works harder
// before the kernel's OOM killer ends the replica.
const memoryRatio = 0.9

// setMemoryLimit sets the Go runtime's soft memory limit to memoryRatio of
// the container's memory limit as provider reads it (memlimit.FromCgroup:
// cgroup v2's memory.max or v1's memory.limit_in_bytes, found through
// /proc/self/mountinfo), and returns the limit in force afterwards.
//
// Without a limit the runtime lets the heap double between collections,
// and a replica restoring a large snapshot goes past a container's limit
// and is killed; with one it collects sooner instead (docs/performance.md,
// W6). The operator's choice wins: GOMEMLIMIT set, or AUTOMEMLIMIT=off,
// leaves the limit as it is; AUTOMEMLIMIT=0.8 takes another ratio. A
// provider that finds no limit (no container, or "max") leaves the
// runtime's default, no limit; one that fails (not Linux, an unreadable
// cgroup) is logged and leaves it too: a limit is an aid, never a reason
// not to serve.
func setMemoryLimit(log *slog.Logger, provider memlimit.Provider) int64 {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		limit := debug.SetMemoryLimit(-1)
		log.Info("fencelock: Go memory limit from GOMEMLIMIT", "GOMEMLIMIT", v, "bytes", limit)
		return limit
	}
	limit, err := memlimit.Set(memlimit.WithRatio(memoryRatio), memlimit.WithProvider(provider))
	switch {
	case err != nil:
		log.Warn("fencelock: Go memory limit not set from the container's: set GOMEMLIMIT to about 90% of the memory this replica may use",
			"err", err)
	case os.Getenv("AUTOMEMLIMIT") == "off":
		log.Info("fencelock: Go memory limit left as it is (AUTOMEMLIMIT=off)", "bytes", limit)
	case limit > 0 && limit < 1<<62:
		log.Info("fencelock: Go memory limit set from the container's memory limit", "bytes", limit,
			"ratio", os.Getenv("AUTOMEMLIMIT"))
	default:
		log.Debug("fencelock: no container memory limit found; the Go runtime has none either")
	}
	return limit
}
