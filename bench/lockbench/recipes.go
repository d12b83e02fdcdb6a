package lockbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Recipes is a Client that also takes a read-write lock in either mode and
// permits of a counting semaphore, for W7 and W8. Held.Release gives any
// of them back.
type Recipes interface {
	// AcquireShared and AcquireExclusive take the two modes of one lock
	// (a system whose read-write lock is not its mutex, as etcd's, needs
	// AcquireExclusive apart from Acquire).
	AcquireShared(ctx context.Context, name string) (Held, error)
	AcquireExclusive(ctx context.Context, name string) (Held, error)
	AcquireSemaphore(ctx context.Context, name string, permits int) (Held, error)
}

// ErrTooManyHolders fails a W8 run that saw more holders at once than the
// semaphore has permits.
var ErrTooManyHolders = errors.New("lockbench: more semaphore holders at once than permits")

// recipeClients opens n clients as W2's do, each with its Recipes; a
// system without them fails the run.
func recipeClients(ctx context.Context, c Cluster, n int) ([]Client, []Recipes, error) {
	cs, err := clients(ctx, c, n, sessionTTL)
	if err != nil {
		return nil, nil, err
	}
	rs := make([]Recipes, len(cs))
	for i, c := range cs {
		r, ok := c.(Recipes)
		if !ok {
			for _, cl := range cs {
				_ = cl.Close(ctx)
			}
			return nil, nil, fmt.Errorf("%T has no shared locks or semaphores", c)
		}
		rs[i] = r
	}
	return cs, rs, nil
}

// holdLoop runs W7's and W8's workers, one per client of cs, from the
// race's start for 2 s of warm-up and then d measured: each loops on
// acquire(i), calls inside(i) while it holds, and releases. It returns each
// worker's waits (of the acquires that started in the measured window and
// were let go before its end) and the failed acquires and releases in all,
// and closes the clients.
func holdLoop(ctx context.Context, cs []Client, d time.Duration, acquire func(i int) (Held, error), inside func(i int)) (waits []samples, errs int) {
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		starts = make(chan struct{})
	)
	waits = make([]samples, len(cs)) // waits[i] is worker i's alone until race returns
	stop := time.Now().Add(d + 2*time.Second)
	measureFrom := stop.Add(-d)
	for i := range cs {
		wg.Go(func() {
			bad := 0
			<-starts
			for time.Now().Before(stop) {
				t0 := time.Now()
				h, err := acquire(i)
				if err != nil {
					bad++
					continue
				}
				wait := time.Since(t0)
				inside(i)
				if t0.After(measureFrom) && time.Now().Before(stop) {
					waits[i] = append(waits[i], wait)
				}
				if err := h.Release(ctx); err != nil {
					bad++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			errs += bad
		})
	}
	race(ctx, starts, &wg, cs)
	return waits, errs
}

// W7: 15 readers (shared) and 1 writer (exclusive) loop on one lock, each
// holding ~0 then releasing; the figures are the waits by mode. A writer
// seen inside with anyone, or a reader with the writer, counts as an
// overlap (an error): inside is from Acquire's return to Release's call,
// within the grant, so an overlap seen is a real one.
func w7(ctx context.Context, c Cluster, o Options) (Result, error) {
	workers, d := o.workers(16), o.duration()
	cs, rs, err := recipeClients(ctx, c, workers)
	if err != nil {
		return Result{}, err
	}
	const name = "bench/W7/0"
	const writerWorker = 0
	var (
		readers, writer atomic.Int32
		overlaps        atomic.Int64
	)
	waits, errs := holdLoop(ctx, cs, d, func(i int) (Held, error) {
		if i == writerWorker {
			return rs[i].AcquireExclusive(ctx, name)
		}
		return rs[i].AcquireShared(ctx, name)
	}, func(i int) {
		if i == writerWorker {
			writer.Add(1)
			if readers.Load() != 0 || writer.Load() != 1 {
				overlaps.Add(1)
			}
			writer.Add(-1)
			return
		}
		readers.Add(1)
		if writer.Load() != 0 {
			overlaps.Add(1)
		}
		readers.Add(-1)
	})
	wwait := waits[writerWorker]
	var rwait samples
	for i, w := range waits {
		if i != writerWorker {
			rwait = append(rwait, w...)
		}
	}
	r, w := rwait.sorted(), wwait.sorted()
	secs := d.Seconds()
	res := Result{Workers: workers, DurationS: secs, Ops: len(r) + len(w),
		OpsPerS: round1(float64(len(r)+len(w)) / secs),
		P50:     r.pct(.5), P99: r.pct(.99), P999: r.pct(.999), Max: r.pct(1),
		Errors: errs + int(overlaps.Load())}
	res.addNote("read_ops_per_s=%v write_ops_per_s=%v read_p50_ms=%v read_p99_ms=%v write_p50_ms=%v write_p99_ms=%v write_max_ms=%v readers=%d writers=1 overlaps=%d latency_fields_are_reader_waits",
		round1(float64(len(r))/secs), round1(float64(len(w))/secs), r.pct(.5), r.pct(.99), w.pct(.5), w.pct(.99), w.pct(1),
		workers-1, overlaps.Load())
	return res, nil
}

// W8: 16 workers loop on one 4-permit semaphore, each holding ~0 then
// releasing; the figures are the waits, and the most holders seen inside
// at once (from Acquire's return to Release's call, within the grant) must
// not exceed the permits, or the run fails with ErrTooManyHolders.
func w8(ctx context.Context, c Cluster, o Options) (Result, error) {
	const permits = 4
	workers, d := o.workers(16), o.duration()
	cs, rs, err := recipeClients(ctx, c, workers)
	if err != nil {
		return Result{}, err
	}
	const name = "bench/W8/0"
	var inside, most atomic.Int32
	perWorker, errs := holdLoop(ctx, cs, d, func(i int) (Held, error) {
		return rs[i].AcquireSemaphore(ctx, name, permits)
	}, func(int) {
		n := inside.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		// Hold for a moment, so that holders do overlap and the count
		// means something.
		time.Sleep(time.Millisecond)
		inside.Add(-1)
	})
	var waits samples
	for _, w := range perWorker {
		waits = append(waits, w...)
	}
	w := waits.sorted()
	res := Result{Workers: workers, DurationS: d.Seconds(), Ops: len(w),
		OpsPerS: round1(float64(len(w)) / d.Seconds()),
		P50:     w.pct(.5), P99: w.pct(.99), P999: w.pct(.999), Max: w.pct(1), Errors: errs}
	res.addNote("max_holders=%d permits=%d", most.Load(), permits)
	if most.Load() > permits {
		return res, fmt.Errorf("%w: %d of %d", ErrTooManyHolders, most.Load(), permits)
	}
	return res, nil
}
