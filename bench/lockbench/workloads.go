package lockbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Workloads are the IDs Run knows; W6 is system-specific and run by each
// benchmark itself. W7 and W8 need a Client that is also Recipes. W1 runs
// in two placements, the worker's session on the consensus leader's replica
// and on a follower's: "W1" in a list given to ParseWorkloads means both.
var Workloads = []string{W1Leader, W1Follower, "W2", "W3", "W4", "W5", "W7", "W8"}

// The placements of W1.
const (
	W1Leader   = "W1-leader"
	W1Follower = "W1-follower"
)

// aliases are the names ParseWorkloads expands.
var aliases = map[string][]string{"W1": {W1Leader, W1Follower}}

// Options are the knobs common to every workload.
type Options struct {
	System     string        // the "system" field of each line
	Duration   time.Duration // W2 and W3 measurement time; 0 means 10s
	Workers    int           // overrides each workload's worker count when > 0
	Iterations int           // W1 pairs; 0 means 2000
	Trials     int           // W5 trials; 0 means 3
}

func (o Options) duration() time.Duration {
	if o.Duration > 0 {
		return o.Duration
	}
	return 10 * time.Second
}

func (o Options) workers(def int) int {
	if o.Workers > 0 {
		return o.Workers
	}
	return def
}

// sessionTTL is the TTL of the workers' sessions, except in W5.
const sessionTTL = 10 * time.Second

// byOptions are the workloads that need nothing but the cluster and the
// options, by name.
var byOptions = map[string]func(context.Context, Cluster, Options) (Result, error){
	"W3": w3, "W4": w4, "W5": w5, "W7": w7, "W8": w8, "W11": w11,
}

// Run runs one workload on a cluster started by start in dir.
func Run(ctx context.Context, o Options, workload string, start Starter, dir string) (Result, error) {
	c, err := start(ctx, dir)
	if err != nil {
		return Result{}, fmt.Errorf("start cluster: %w", err)
	}
	defer c.Close()
	if _, err := c.Leader(ctx); err != nil {
		return Result{}, err
	}
	var r Result
	switch workload {
	case "W1": // the session on replica 0, wherever the leader is
		r, err = w1(ctx, c, o, "")
	case W1Leader:
		r, err = w1(ctx, c, o, "leader")
	case W1Follower:
		r, err = w1(ctx, c, o, "follower")
	case "W2":
		r, err = throughput(ctx, c, o.workers(64), o.duration(), "W2")
	default:
		if run, ok := byOptions[workload]; ok {
			r, err = run(ctx, c, o)
		} else {
			err = fmt.Errorf("unknown workload %q", workload)
		}
	}
	r.System, r.Workload = o.System, workload
	return r, err
}

// clients opens one session per worker, round-robin over the replicas.
func clients(ctx context.Context, c Cluster, n int, ttl time.Duration) ([]Client, error) {
	cs := make([]Client, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { cs[i], errs[i] = c.NewClient(ctx, i%c.Replicas(), ttl) })
	}
	wg.Wait()
	return cs, errors.Join(errs...)
}

// W1: one worker, acquire then release its own lock. placement puts the
// worker's session on the leader's replica ("leader"), on the replica after
// it ("follower"), or on replica 0 (""). The leader is read once before the
// session opens and again at the end: the notes say whether it moved.
func w1(ctx context.Context, c Cluster, o Options, placement string) (Result, error) {
	n := o.Iterations
	if n <= 0 {
		n = 2000
	}
	leaderAtStart, err := c.Leader(ctx)
	if err != nil {
		return Result{}, err
	}
	replica := 0
	switch placement {
	case "leader":
		replica = leaderAtStart
	case "follower":
		replica = (leaderAtStart + 1) % c.Replicas()
	}
	cl, err := c.NewClient(ctx, replica, sessionTTL)
	if err != nil {
		return Result{}, err
	}
	res, err := Uncontended(ctx, cl, "bench/W1/0", n)
	_ = cl.Close(ctx)
	if err != nil {
		return res, err
	}
	leader, _ := c.Leader(ctx)
	res.addNote("worker_on_leader=%d worker_replica=%d leader_at_start=%d leader_at_end=%d",
		b2i(leader == replica), replica, leaderAtStart, leader)
	if placement != "" {
		res.addNote("placement=%s", placement)
		if leader != leaderAtStart {
			res.addNote("leader_moved_during_run")
		}
	}
	return res, nil
}

// Uncontended runs W1's loop on one client: 20 warm-up pairs, then n
// measured pairs of acquire(name) then release. The result has the acquire
// quantiles, pairs/s and, in Notes, release_p50_ms and release_p99_ms; a
// failed call is counted in Errors and the loop goes on. It fails only if a
// warm-up pair does (the name or the cluster is unusable).
func Uncontended(ctx context.Context, cl Client, name string, n int) (Result, error) {
	for range 20 { // warm up: connections, the first proposals
		h, err := cl.Acquire(ctx, name)
		if err != nil {
			return Result{}, err
		}
		if err := h.Release(ctx); err != nil {
			return Result{}, err
		}
	}
	acq, rel := make(samples, 0, n), make(samples, 0, n)
	errs := 0
	start := time.Now()
	for range n {
		t0 := time.Now()
		h, err := cl.Acquire(ctx, name)
		if err != nil {
			errs++
			continue
		}
		t1 := time.Now()
		acq = append(acq, t1.Sub(t0))
		if err := h.Release(ctx); err != nil {
			errs++
			continue
		}
		rel = append(rel, time.Since(t1))
	}
	el := time.Since(start)
	a, r := acq.sorted(), rel.sorted()
	res := Result{Workers: 1, DurationS: round1(el.Seconds()), Ops: len(rel),
		OpsPerS: round1(float64(len(rel)) / el.Seconds()),
		P50:     a.pct(.5), P99: a.pct(.99), P999: a.pct(.999), Max: a.pct(1), Errors: errs}
	res.addNote("release_p50_ms=%v release_p99_ms=%v", r.pct(.5), r.pct(.99))
	return res, nil
}

// throughput (W2): every worker loops acquire+release on its own lock.
func throughput(ctx context.Context, c Cluster, workers int, d time.Duration, wl string) (Result, error) {
	return Throughput(ctx, c, workers, d, func(i int) string { return fmt.Sprintf("bench/%s/%d", wl, i) })
}

// Throughput runs W2's loop: workers clients, round-robin over the
// replicas, each loops acquire+release on its own lock name(i) for 2s of
// warm-up and then d measured. The result has pairs/s and the acquire
// quantiles over d; failed calls are counted in Errors.
func Throughput(ctx context.Context, c Cluster, workers int, d time.Duration, name func(worker int) string) (Result, error) {
	cs, err := clients(ctx, c, workers, sessionTTL)
	if err != nil {
		return Result{}, err
	}
	var (
		mu     sync.Mutex
		acq    samples
		ends   []time.Time // when each measured pair's release returned
		pairs  int
		errs   int
		wg     sync.WaitGroup
		starts = make(chan struct{})
	)
	stop := time.Now().Add(d + 2*time.Second) // 2s warm-up, then d measured
	measureFrom := stop.Add(-d)
	// The CPU every process of the system spent in the measured window:
	// on a box of few cores, throughput is bounded by it.
	spent := measureCPU(ctx, newCPUClock(c), measureFrom, stop)
	for i, cl := range cs {
		wg.Go(func() {
			name := name(i)
			var mine samples
			var mineEnds []time.Time
			var ok, bad int
			<-starts
			for time.Now().Before(stop) {
				t0 := time.Now()
				h, err := cl.Acquire(ctx, name)
				if err != nil {
					bad++
					continue
				}
				lat := time.Since(t0)
				if err := h.Release(ctx); err != nil {
					bad++
					continue
				}
				if end := time.Now(); t0.After(measureFrom) && end.Before(stop) {
					mine, mineEnds = append(mine, lat), append(mineEnds, end)
					ok++
				}
			}
			mu.Lock()
			acq = append(acq, mine...)
			ends = append(ends, mineEnds...)
			pairs += ok
			errs += bad
			mu.Unlock()
		})
	}
	race(ctx, starts, &wg, cs)
	a := acq.sorted()
	res := Result{Workers: workers, DurationS: d.Seconds(), Ops: pairs,
		OpsPerS: round1(float64(pairs) / d.Seconds()),
		P50:     a.pct(.5), P99: a.pct(.99), P999: a.pct(.999), Max: a.pct(1), Errors: errs}
	if w, ok := <-spent; ok {
		if n := w.pairsIn(ends); n > 0 {
			res.Notes = fmt.Sprintf("cpu_us_per_pair=%.1f cores=%.2f",
				float64(w.spent.Nanoseconds())/1e3/float64(n), w.spent.Seconds()/w.to.Sub(w.from).Seconds())
		}
	}
	return res, nil
}

// W3: every worker loops on one lock; the figures are the waits. Tokens
// must rise from grant to grant; a grant with token 0 (a system that has
// none) is counted as untokened instead of checked.
func w3(ctx context.Context, c Cluster, o Options) (Result, error) {
	workers, d := o.workers(16), o.duration()
	cs, err := clients(ctx, c, workers, sessionTTL)
	if err != nil {
		return Result{}, err
	}
	const name = "bench/W3/0"
	var (
		mu         sync.Mutex
		waits      samples
		grants     int
		errs       int
		overlaps   atomic.Int64
		inside     atomic.Int32
		lastToken  uint64
		tokenFalls int
		untokened  int // grants with no token (0): nothing to check
		perWorker  = make([]int, workers)
		wg         sync.WaitGroup
		starts     = make(chan struct{})
	)
	stop := time.Now().Add(d + 2*time.Second)
	measureFrom := stop.Add(-d)
	for i, cl := range cs {
		wg.Go(func() {
			<-starts
			for time.Now().Before(stop) {
				t0 := time.Now()
				h, err := cl.Acquire(ctx, name)
				if err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
					continue
				}
				wait := time.Since(t0)
				if !inside.CompareAndSwap(0, 1) {
					overlaps.Add(1)
				}
				mu.Lock()
				if tok := h.Token(); tok == 0 { // a system without fencing tokens (redsync)
					untokened++
				} else {
					if tok <= lastToken {
						tokenFalls++
					}
					lastToken = tok
				}
				if t0.After(measureFrom) && time.Now().Before(stop) {
					waits = append(waits, wait)
					grants++
					perWorker[i]++
				}
				mu.Unlock()
				inside.Store(0)
				if err := h.Release(ctx); err != nil {
					mu.Lock()
					errs++
					mu.Unlock()
				}
			}
		})
	}
	race(ctx, starts, &wg, cs)
	w := waits.sorted()
	lo, hi := grants, 0
	for _, g := range perWorker {
		lo, hi = min(lo, g), max(hi, g)
	}
	res := Result{Workers: workers, DurationS: d.Seconds(), Ops: grants,
		OpsPerS: round1(float64(grants) / d.Seconds()),
		P50:     w.pct(.5), P99: w.pct(.99), P999: w.pct(.999), Max: w.pct(1),
		Errors: errs + int(overlaps.Load()) + tokenFalls}
	res.addNote("overlaps=%d token_not_rising=%d grants_per_worker_min=%d grants_per_worker_max=%d",
		overlaps.Load(), tokenFalls, lo, hi)
	if untokened > 0 {
		res.addNote("untokened_grants=%d", untokened)
	}
	return res, nil
}

// W4: W2 at 8 workers; at t=3s the leader replica is stopped. The window is
// from the last success before the stop to the first success after it, on
// the surviving replicas. Every call gets attemptTimeout and is retried after
// it, as a client with a deadline per call would (a request in flight to a
// dead leader may otherwise hang for the server's own request timeout).
func w4(ctx context.Context, c Cluster, o Options) (Result, error) {
	workers := o.workers(8)
	cs, err := clients(ctx, c, workers, sessionTTL)
	if err != nil {
		return Result{}, err
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		return Result{}, err
	}
	const total, killAt, attemptTimeout = 8 * time.Second, 3 * time.Second, 250 * time.Millisecond
	var (
		mu        sync.Mutex
		acq       samples
		successes []time.Time // on surviving replicas
		ops, errs int
		wg        sync.WaitGroup
		starts    = make(chan struct{})
	)
	begin := time.Now()
	stop := begin.Add(total)
	// try runs f with attemptTimeout until it succeeds or the run ends.
	try := func(f func(context.Context) error) (int, error) {
		failed := 0
		for {
			deadline := time.Now().Add(attemptTimeout)
			if deadline.After(stop) {
				deadline = stop
			}
			actx, cancel := context.WithDeadline(ctx, deadline)
			err := f(actx)
			cancel()
			if err == nil || !time.Now().Before(stop) {
				return failed, err
			}
			failed++
			time.Sleep(time.Millisecond) // a replica without a leader may refuse at once
		}
	}
	for i, cl := range cs {
		if i%c.Replicas() == leader {
			continue // its replica will be stopped: it has no survivor's view
		}
		wg.Go(func() {
			name := fmt.Sprintf("bench/W4/%d", i)
			var mine []time.Time
			var lat samples
			retries := 0
			<-starts
			for time.Now().Before(stop) {
				t0 := time.Now()
				var h Held
				n, err := try(func(ctx context.Context) (err error) {
					h, err = cl.Acquire(ctx, name)
					return err
				})
				retries += n
				if err != nil {
					break
				}
				lat = append(lat, time.Since(t0))
				mine = append(mine, time.Now())
				n, err = try(h.Release)
				retries += n
				if err != nil {
					break
				}
				mine = append(mine, time.Now())
			}
			mu.Lock()
			defer mu.Unlock()
			successes = append(successes, mine...)
			acq = append(acq, lat...)
			ops += len(lat)
			errs += retries
		})
	}
	close(starts)
	time.Sleep(time.Until(begin.Add(killAt)))
	killStart := time.Now()
	if err := c.Stop(leader); err != nil {
		return Result{}, err
	}
	killDone := time.Now()
	wg.Wait()
	for i, cl := range cs {
		if i%c.Replicas() != leader {
			_ = cl.Close(ctx)
		}
	}
	var last, first time.Time
	for _, t := range successes {
		if t.Before(killStart) && t.After(last) {
			last = t
		}
		if t.After(killDone) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	a := acq.sorted()
	res := Result{Workers: workers, DurationS: total.Seconds(), Ops: ops,
		OpsPerS: round1(float64(ops) / total.Seconds()),
		P50:     a.pct(.5), P99: a.pct(.99), P999: a.pct(.999), Max: a.pct(1), Errors: errs}
	if first.IsZero() || last.IsZero() {
		res.Errors++
		res.addNote("unavailable_ms=-1 no_success_after_kill")
		return res, nil
	}
	res.addNote("unavailable_ms=%v stop_call_ms=%v killed_replica=%d attempt_timeout_ms=%d errors_are_timed_out_attempts",
		ms(first.Sub(last)), ms(killDone.Sub(killStart)), leader, attemptTimeout.Milliseconds())
	return res, nil
}

// W5: the holder (TTL 2s) stops heartbeating with one waiter queued; the
// figure is the time from its last acknowledged heartbeat to the waiter's
// grant, minus the TTL.
func w5(ctx context.Context, c Cluster, o Options) (Result, error) {
	trials := o.Trials
	if trials <= 0 {
		trials = 3
	}
	const ttl = 2 * time.Second
	var totals samples
	var overheads []float64
	errs := 0
	for t := range trials {
		name := fmt.Sprintf("bench/W5/%d", t)
		holder, err := c.NewClient(ctx, 0, ttl)
		if err != nil {
			return Result{}, err
		}
		waiter, err := c.NewClient(ctx, 1, ttl)
		if err != nil {
			return Result{}, err
		}
		if _, err := holder.Acquire(ctx, name); err != nil {
			return Result{}, err
		}
		type grant struct {
			h   Held
			at  time.Time
			err error
		}
		got := make(chan grant, 1)
		go func() {
			h, err := waiter.Acquire(ctx, name)
			got <- grant{h, time.Now(), err}
		}()
		last, err := holder.StopHeartbeats(ctx)
		if err != nil {
			return Result{}, err
		}
		g := <-got
		if g.err != nil {
			errs++
			continue
		}
		total := g.at.Sub(last())
		totals = append(totals, total)
		overheads = append(overheads, float64(total-ttl)/1e6)
		_ = g.h.Release(ctx)
		_ = waiter.Close(ctx)
		_ = holder.Close(ctx)
	}
	s := totals.sorted()
	res := Result{Workers: 2, DurationS: 0, Ops: len(totals), P50: s.pct(.5), P99: s.pct(.99),
		P999: s.pct(.999), Max: s.pct(1), Errors: errs}
	res.addNote("overhead_ms=%v ttl_ms=%d trials=%d", round1(Median(overheads)), ttl.Milliseconds(), trials)
	return res, nil
}

// race lets the workers go at once, waits for them all, and closes their
// clients.
func race(ctx context.Context, starts chan struct{}, wg *sync.WaitGroup, cs []Client) {
	close(starts)
	wg.Wait()
	for _, cl := range cs {
		_ = cl.Close(ctx)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
