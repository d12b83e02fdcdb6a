package lockbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Restarter is a Cluster whose replicas can be restarted as a deploy does
// (W11): a graceful stop, then a start on the same data.
type Restarter interface {
	// StopGracefully stops replica i the way its service shuts down on
	// SIGTERM (handing leadership over where the system does).
	StopGracefully(ctx context.Context, i int) error
	// Restart starts replica i again on its data and returns once it has
	// caught up with the group.
	Restart(ctx context.Context, i int) error
}

// Resumer is a Client that keeps its session (and its locks) through a
// restart of its own replica: Suspend before the replica stops, Resume
// once it runs again. A Client without it just goes on calling.
type Resumer interface {
	Suspend(ctx context.Context) error
	Resume(ctx context.Context) error
}

// w11ttl is the worker's session TTL: every restart must end well within it.
const w11ttl = 5 * time.Second

// W11: one W1 worker on a replica that stays up while each other replica,
// leader first, is stopped gracefully, restarted on its data and caught up;
// then the worker's own replica, its session resumed. A call "waits beyond
// its normal latency" by its duration minus the p50 of the phase alone.
func w11(ctx context.Context, c Cluster, o Options) (Result, error) {
	rs, ok := c.(Restarter)
	if !ok {
		return Result{}, fmt.Errorf("W11: %T cannot restart replicas", c)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		return Result{}, err
	}
	w := (leader + 1) % c.Replicas()
	cl, err := c.NewClient(ctx, w, w11ttl)
	if err != nil {
		return Result{}, err
	}
	// A lock held through everything: lost if a probe can take it at the end.
	if _, err := cl.Acquire(ctx, "bench/W11/held"); err != nil {
		return Result{}, err
	}

	type call struct {
		start time.Time
		took  time.Duration
	}
	var (
		mu      sync.Mutex
		calls   []call
		failed  int
		stop    = make(chan struct{})
		stopped = make(chan struct{})
	)
	const attempt = 10 * time.Second
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			actx, cancel := context.WithTimeout(ctx, attempt)
			h, err := cl.Acquire(actx, "bench/W11/0")
			if err == nil {
				err = h.Release(actx)
			}
			cancel()
			mu.Lock()
			if err != nil {
				failed++
			} else {
				calls = append(calls, call{t0, time.Since(t0)})
			}
			mu.Unlock()
			if err != nil && ctx.Err() != nil {
				return
			}
		}
	}()
	waitCalls := func(n int) {
		for {
			mu.Lock()
			got := len(calls)
			mu.Unlock()
			if got >= n || ctx.Err() != nil {
				return
			}
			time.Sleep(5 * time.Millisecond) // polling a counter the worker feeds
		}
	}
	waitCalls(500) // the alone phase
	mu.Lock()
	alone := make(samples, len(calls))
	for i, ct := range calls {
		alone[i] = ct.took
	}
	aloneN := len(calls)
	mu.Unlock()
	normal := time.Duration(alone.sorted().pct(.5) * float64(time.Millisecond))
	// What the same sum comes to with no restart at all: the alone phase's
	// own excess per call (its calls slower than their median). A window's
	// baseline is that times its calls, so a window can be read as its
	// excess over what its calls would have waited anyway.
	var aloneExcess time.Duration
	for _, d := range alone {
		aloneExcess += max(d-normal, 0)
	}
	perCall := aloneExcess / time.Duration(max(aloneN, 1))

	type window struct {
		replica    int
		from, to   time.Time
		stopped    time.Time // the graceful stop returned
		started    time.Time // the restart returned (caught up)
		stopMS     float64
		restartMS  float64
		wasLeader  bool
		excess     time.Duration
		longestExc time.Duration
		calls      int
	}
	var windows []window
	order := []int{leader}
	for i := range c.Replicas() {
		if i != leader && i != w {
			order = append(order, i)
		}
	}
	for _, i := range order {
		cur, err := c.Leader(ctx)
		if err != nil {
			return Result{}, err
		}
		win := window{replica: i, from: time.Now(), wasLeader: cur == i}
		if err := rs.StopGracefully(ctx, i); err != nil {
			return Result{}, fmt.Errorf("stop %d: %w", i, err)
		}
		win.stopped = time.Now()
		win.stopMS = ms(win.stopped.Sub(win.from))
		t1 := time.Now()
		if err := rs.Restart(ctx, i); err != nil {
			return Result{}, fmt.Errorf("restart %d: %w", i, err)
		}
		win.started = time.Now()
		win.restartMS = ms(win.started.Sub(t1))
		mu.Lock()
		n := len(calls)
		mu.Unlock()
		waitCalls(n + 50) // the worker goes on with all three up
		win.to = time.Now()
		windows = append(windows, win)
	}
	close(stop)
	<-stopped

	// The worker's own replica: its session suspended, the replica
	// restarted, the session resumed; the figure is the time from the
	// stop to the first pair after it.
	ownStart := time.Now()
	res, canResume := cl.(Resumer)
	if canResume {
		if err := res.Suspend(ctx); err != nil {
			return Result{}, fmt.Errorf("suspend: %w", err)
		}
	}
	if err := rs.StopGracefully(ctx, w); err != nil {
		return Result{}, fmt.Errorf("stop %d: %w", w, err)
	}
	if err := rs.Restart(ctx, w); err != nil {
		return Result{}, fmt.Errorf("restart %d: %w", w, err)
	}
	if canResume {
		if err := res.Resume(ctx); err != nil {
			return Result{}, fmt.Errorf("resume: %w", err)
		}
	}
	for {
		actx, cancel := context.WithTimeout(ctx, attempt)
		h, err := cl.Acquire(actx, "bench/W11/0")
		if err == nil {
			err = h.Release(actx)
		}
		cancel()
		if err == nil {
			break
		}
		failed++
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
	}
	ownMS := ms(time.Since(ownStart))

	// Locks lost: a probe on another replica gets the held lock within
	// twice the TTL only if the worker's session ended.
	lost := 0
	probe, err := c.NewClient(ctx, leader, w11ttl)
	if err != nil {
		return Result{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, 2*w11ttl)
	if _, err := probe.Acquire(pctx, "bench/W11/held"); err == nil {
		lost = 1
	} else if !errors.Is(err, context.DeadlineExceeded) && pctx.Err() == nil {
		cancel()
		return Result{}, fmt.Errorf("probe: %w", err)
	}
	cancel()
	_ = probe.Close(ctx)
	_ = cl.Close(ctx)

	// where says in which step of the rolling restart a call started,
	// to name what the longest wait coincided with.
	where := func(t time.Time) string {
		for _, win := range windows {
			switch {
			case t.Before(win.from):
			case t.Before(win.stopped):
				return fmt.Sprintf("r%d.stopping+%vms", win.replica, ms(t.Sub(win.from)))
			case t.Before(win.started):
				return fmt.Sprintf("r%d.restarting+%vms", win.replica, ms(t.Sub(win.stopped)))
			case t.Before(win.to):
				return fmt.Sprintf("r%d.restarted+%vms", win.replica, ms(t.Sub(win.started)))
			}
		}
		return "between"
	}
	var all samples
	var total, longest time.Duration
	longestAt := "none"
	for _, ct := range calls[aloneN:] {
		all = append(all, ct.took)
		e := max(ct.took-normal, 0)
		total += e
		if e > longest {
			longest, longestAt = e, where(ct.start)
		}
		for k := range windows {
			end := ct.start.Add(ct.took)
			if end.After(windows[k].from) && ct.start.Before(windows[k].to) {
				windows[k].excess += e
				windows[k].longestExc = max(windows[k].longestExc, e)
				windows[k].calls++
			}
		}
	}
	a := all.sorted()
	r := Result{Workers: 1, Ops: len(all), P50: a.pct(.5), P99: a.pct(.99), P999: a.pct(.999), Max: a.pct(1), Errors: failed}
	r.addNote("normal_ms=%v longest_excess_ms=%v longest_at=%s total_excess_ms=%v failed_acquires=%d locks_lost=%d worker_replica=%d own_restart_ms=%v resumed=%v",
		ms(normal), ms(longest), longestAt, ms(total), failed, lost, w, ownMS, canResume)
	for _, win := range windows {
		base := perCall * time.Duration(win.calls)
		r.addNote("r%d(leader=%v): excess_ms=%v longest_ms=%v stop_ms=%v restart_ms=%v calls=%d baseline_ms=%v over_baseline_ms=%v",
			win.replica, win.wasLeader, ms(win.excess), ms(win.longestExc), win.stopMS, win.restartMS,
			win.calls, ms(base), ms(win.excess-base))
	}
	return r, nil
}
