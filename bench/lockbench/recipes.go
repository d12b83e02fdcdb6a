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

func recipes(cs []Client) ([]Recipes, error) {
	rs := make([]Recipes, len(cs))
	for i, c := range cs {
		r, ok := c.(Recipes)
		if !ok {
			return nil, fmt.Errorf("%T has no shared locks or semaphores", c)
		}
		rs[i] = r
	}
	return rs, nil
}

// W7: 15 readers (shared) and 1 writer (exclusive) loop on one lock, each
// holding ~0 then releasing; the figures are the waits by mode. A writer
// seen inside with anyone, or a reader with the writer, counts as an
// overlap (an error): inside is from Acquire's return to Release's call,
// within the grant, so an overlap seen is a real one.
func w7(ctx context.Context, c Cluster, o Options) (Result, error) {
	workers, d := o.workers(16), o.duration()
	cs, err := clients(ctx, c, workers, sessionTTL)
	if err != nil {
		return Result{}, err
	}
	rs, err := recipes(cs)
	if err != nil {
		return Result{}, err
	}
	const name = "bench/W7/0"
	var (
		mu              sync.Mutex
		rwait, wwait    samples
		errs            int
		readers, writer atomic.Int32
		overlaps        atomic.Int64
		wg              sync.WaitGroup
		starts          = make(chan struct{})
	)
	stop := time.Now().Add(d + 2*time.Second)
	measureFrom := stop.Add(-d)
	for i := range cs {
		isWriter := i == 0
		wg.Go(func() {
			var mine samples
			bad := 0
			<-starts
			for time.Now().Before(stop) {
				t0 := time.Now()
				var h Held
				var err error
				if isWriter {
					h, err = rs[i].AcquireExclusive(ctx, name)
				} else {
					h, err = rs[i].AcquireShared(ctx, name)
				}
				if err != nil {
					bad++
					continue
				}
				wait := time.Since(t0)
				if isWriter {
					writer.Add(1)
					if readers.Load() != 0 || writer.Load() != 1 {
						overlaps.Add(1)
					}
					writer.Add(-1)
				} else {
					readers.Add(1)
					if writer.Load() != 0 {
						overlaps.Add(1)
					}
					readers.Add(-1)
				}
				if t0.After(measureFrom) && time.Now().Before(stop) {
					mine = append(mine, wait)
				}
				if err := h.Release(ctx); err != nil {
					bad++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if isWriter {
				wwait = append(wwait, mine...)
			} else {
				rwait = append(rwait, mine...)
			}
			errs += bad
		})
	}
	race(ctx, starts, &wg, cs)
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
	cs, err := clients(ctx, c, workers, sessionTTL)
	if err != nil {
		return Result{}, err
	}
	rs, err := recipes(cs)
	if err != nil {
		return Result{}, err
	}
	const name = "bench/W8/0"
	var (
		mu           sync.Mutex
		waits        samples
		errs         int
		inside, most atomic.Int32
		wg           sync.WaitGroup
		starts       = make(chan struct{})
	)
	stop := time.Now().Add(d + 2*time.Second)
	measureFrom := stop.Add(-d)
	for i := range cs {
		wg.Go(func() {
			var mine samples
			bad := 0
			<-starts
			for time.Now().Before(stop) {
				t0 := time.Now()
				h, err := rs[i].AcquireSemaphore(ctx, name, permits)
				if err != nil {
					bad++
					continue
				}
				wait := time.Since(t0)
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// Hold for a moment, so that holders do overlap and the
				// count means something.
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if t0.After(measureFrom) && time.Now().Before(stop) {
					mine = append(mine, wait)
				}
				if err := h.Release(ctx); err != nil {
					bad++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			waits = append(waits, mine...)
			errs += bad
		})
	}
	race(ctx, starts, &wg, cs)
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
