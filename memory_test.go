package fencelock

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heapInUse is the live heap after two full collections (the second frees
// what the first's finalizers released).
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestMemoryPerSessionAndLock measures the heap a one-replica node (the
// replica and the holder side in one process, as an embedder runs it)
// holds per open session and per held lock: N sessions opened, then the
// same sessions holding N locks more. It is a measurement for
// docs/operations.md, not a check: set FENCELOCK_MEASURE_MEMORY=N to run it
// (and FENCELOCK_MEASURE_REPLICAS=3 for three replicas in the process: the
// difference to one is what two more replicas' copies of the state cost).
func TestMemoryPerSessionAndLock(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FENCELOCK_MEASURE_MEMORY"))
	if n <= 0 {
		t.Skip("a measurement: set FENCELOCK_MEASURE_MEMORY=N (sessions and locks) to run it")
	}
	replicas := 1 // FENCELOCK_MEASURE_REPLICAS=3: three replicas in the process, the sessions on one
	if r, _ := strconv.Atoi(os.Getenv("FENCELOCK_MEASURE_REPLICAS")); r > 0 {
		replicas = r
	}
	c := newCluster(t, replicas, func(cfg *Config) { cfg.SessionTTL = time.Minute })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c.leader(ctx)
	node := c.node(c.leader(ctx))
	const workers = 32
	run := func(f func(i int)) {
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += workers {
					f(i)
				}
			}()
		}
		wg.Wait()
	}

	before := heapInUse()
	goroutines := runtime.NumGoroutine()
	sessions := make([]*Session, n)
	run(func(i int) {
		s, err := node.NewSession(ctx)
		require.NoError(t, err)
		sessions[i] = s
	})
	withSessions := heapInUse()
	sessionGoroutines := runtime.NumGoroutine() - goroutines
	run(func(i int) {
		_, err := sessions[i].TryAcquire(ctx, fmt.Sprintf("jobs/%08d", i))
		require.NoError(t, err)
	})
	withLocks := heapInUse()
	perSession := float64(withSessions-before) / float64(n)
	perLock := float64(withLocks-withSessions) / float64(n)
	t.Logf("%d sessions: heap in use %d → %d bytes, %.0f bytes per session (holder and replica sides), %d goroutines more",
		n, before, withSessions, perSession, sessionGoroutines)
	t.Logf("%d locks held, one per session: heap in use %d → %d bytes, %.0f bytes per lock", n, withSessions, withLocks, perLock)
	fmt.Fprintf(os.Stderr, "MEMORY replicas=%d sessions=%d per_session_bytes=%.0f per_lock_bytes=%.0f goroutines_per_session=%.2f\n",
		replicas, n, perSession, perLock, float64(sessionGoroutines)/float64(n))
	for _, s := range sessions {
		require.NoError(t, s.Close(ctx))
	}
}
