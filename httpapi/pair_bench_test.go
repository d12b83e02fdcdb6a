//go:build unix

package httpapi_test

import (
	"context"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fencelocktest"
)

// BenchmarkServicePair is the probe of what the service adds per call
// (issue 49): acquire+release pairs through the Go client against three
// in-process replicas serving the HTTP API, as W2 runs them (each worker a
// client of its own, its session on its own replica, its own lock), so
// that -cpuprofile and -memprofile see both sides of a call. Beside
// allocs/op (the client's and the server's: one process) it reports the
// raft entries the default group took per pair, which says how well the
// service's commands pack.
//
//	go test -run '^$' -bench ServicePair -benchtime 5000x -cpuprofile cpu.out -memprofile mem.out ./httpapi/
//
// Its sub-benchmark "embedded" runs the same pairs on the same kind of
// cluster through the library's own sessions, one per worker on the same
// replicas: what the service adds is the difference.
func BenchmarkServicePair(b *testing.B) {
	b.Run("client", func(b *testing.B) { benchPairs(b, true) })
	b.Run("embedded", func(b *testing.B) { benchPairs(b, false) })
}

// cpuTime is the CPU time this process has spent, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pairer is what both kinds of session do in BenchmarkServicePair: one
// acquire+release pair of name.
type pairer func(ctx context.Context, name string) error

// pairs is the pairer of a session whose Acquire is acquire, whichever
// kind of session and lock it is.
func pairs[L interface{ Release(context.Context) error }](acquire func(ctx context.Context, name string) (L, error)) pairer {
	return func(ctx context.Context, name string) error {
		l, err := acquire(ctx, name)
		if err == nil {
			err = l.Release(ctx)
		}
		return err
	}
}

func benchPairs(b *testing.B, viaClient bool) {
	const workers = 16
	c := fencelocktest.NewCluster(b, 3, fencelocktest.WithHTTP())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c.Leader(ctx)
	sessions := make([]pairer, workers)
	for i := range sessions {
		if !viaClient {
			s, err := c.Node(uint64(i%3+1)).NewSession(ctx, fencelock.WithTTL(10*time.Second))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close(context.Background())
			sessions[i] = pairs(func(ctx context.Context, name string) (*fencelock.Lock, error) { return s.Acquire(ctx, name) })
			continue
		}
		id := uint64(i%3 + 1)
		eps := []string{c.URL(id), c.URL(id%3 + 1), c.URL((id+1)%3 + 1)}
		cl, err := client.New(ctx, client.Config{Endpoints: eps})
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		s, err := cl.NewSession(ctx, fencelock.WithTTL(10*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		sessions[i] = pairs(func(ctx context.Context, name string) (*client.Lock, error) { return s.Acquire(ctx, name) })
	}
	stats := func() (uint64, uint64) { st := c.Node(1).Stats(); return st.Entries, st.Commands }
	b.ReportAllocs()
	b.ResetTimer()
	entries0, commands0 := stats()
	cpu0 := cpuTime()
	work := make(chan struct{}, b.N)
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i, pair := range sessions {
		wg.Go(func() {
			name := "bench/pair-" + strconv.Itoa(i)
			for range work {
				if err := pair(ctx, name); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	// The CPU the process spent per pair, the client's and the
	// replicas' (with their API) together: on a shared machine a steadier
	// figure than ns/op, which counts the waits for a CPU too.
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/pair")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	// Node 1 applied every pair's entries once the last release answered
	// on a replica; it may lag that replica by the entries in flight.
	entries, commands := stats()
	b.ReportMetric(float64(entries-entries0)/float64(b.N), "entries/pair")
	b.ReportMetric(float64(commands-commands0)/float64(b.N), "commands/pair")
}
