package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
)

// handoffDelays measures what one goroutine handing work to another costs
// on this machine, the step every raft command takes a dozen times (caller
// to proposer, proposer to step worker, step worker to a send queue and an
// apply worker, apply worker back to the caller).
//
// awake: the waker readies the other goroutine and keeps running for
// busy, so the readied one runs only when an idle processor's thread is
// woken to take it (or when the waker is done). blocking: the waker blocks
// right after, so the readied one runs on the waker's own processor. Each
// is measured n times after an idle pause, like a replica between bursts.
func handoffDelays(n int, busy time.Duration) (awake, blocking []time.Duration) {
	in := make(chan time.Time, 1)
	out := make(chan time.Duration, 1)
	go func() {
		for t := range in {
			out <- time.Since(t)
		}
	}()
	defer close(in)
	for i := 0; i < n; i++ {
		time.Sleep(300 * time.Microsecond)
		in <- time.Now()
		for t := time.Now(); time.Since(t) < busy; {
			// the waker's own work; the loop's clock reads keep it preemptible
		}
		awake = append(awake, <-out)
	}
	for i := 0; i < n; i++ {
		time.Sleep(300 * time.Microsecond)
		in <- time.Now()
		blocking = append(blocking, <-out)
	}
	slices.Sort(awake)
	slices.Sort(blocking)
	return awake, blocking
}

// quantile of sorted ds, q in [0, 1].
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// printHandoff writes the -handoff line: the two delays' p50, p90 and p99.
func printHandoff(w io.Writer, n int) {
	const busy = 500 * time.Microsecond
	awake, blocking := handoffDelays(n, busy)
	fmt.Fprintf(w, "handoff (GOMAXPROCS %d, %d each): waker keeps running %v: p50 %v p90 %v p99 %v; waker blocks: p50 %v p90 %v p99 %v\n",
		runtime.GOMAXPROCS(0), n, busy,
		quantile(awake, .5).Round(time.Microsecond), quantile(awake, .9).Round(time.Microsecond), quantile(awake, .99).Round(time.Microsecond),
		quantile(blocking, .5).Round(time.Microsecond), quantile(blocking, .9).Round(time.Microsecond), quantile(blocking, .99).Round(time.Microsecond))
	threads := threadWakeDelays(n, busy)
	fmt.Fprintf(w, "thread wake (futex, the waker keeps running %v; no Go scheduler in between): p50 %v p90 %v p99 %v\n",
		busy, quantile(threads, .5).Round(time.Microsecond), quantile(threads, .9).Round(time.Microsecond), quantile(threads, .99).Round(time.Microsecond))
}
