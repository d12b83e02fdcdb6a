package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/bench/lockbench"
)

// w9 is the idle-sessions workload: f.w9Sessions sessions, round-robin over
// the replicas, TTL f.w9TTL, each takes one lock (bench/W9/<n>) and then
// nothing happens for f.w9Idle. What idle costs is measured over that
// window from the leader's Stats (deltas of Entries, Commands, KeepAlives,
// KeepAliveEntries, Renewals, Expiries), the process's CPU time (getrusage: the three replicas and the
// clients share this process, so it is the whole group's CPU, not the
// leader's alone) and the Go heap (after a collection) the sessions added.
func w9(ctx context.Context, f flags, dir string) (lockbench.Result, w9Check, error) {
	res := lockbench.Result{System: "fencelock", Workload: "W9"}
	c, err := startCluster(ctx, dir, f.replicas, nil)
	if err != nil {
		return res, w9Check{}, err
	}
	defer c.Close()
	leader, err := c.Leader(ctx)
	if err != nil {
		return res, w9Check{}, err
	}
	heap0, rss0 := heapBytes(), rssMB()

	// Open the sessions and take the locks, f.w9Parallel at a time.
	n := f.w9Sessions
	sessions := make([]*fencelock.Session, n)
	var (
		done   atomic.Int64
		mu     sync.Mutex
		setup  = make(lockbench.Samples, 0, n)
		begin  = time.Now()
		report = progress("W9 sessions holding a lock", &done, func() string {
			st := c.node(leader).Stats()
			return fmt.Sprintf("sessions %d locks %d expiries %d", st.Sessions, st.LocksHeld, st.Expiries)
		})
	)
	// A session that fails to open or to take its lock (on an overloaded
	// group: expired before its first keep-alive applied) is counted, not
	// fatal: how many is part of what W9 shows. More than half failing
	// ends the run.
	var failed atomic.Int64
	held := make([]bool, n) // opened and took its lock
	var firstErr atomic.Value
	err = parallel(f.w9Parallel, n, func(i int) error {
		t0 := time.Now()
		s, err := c.node(i%c.Replicas()).NewSession(ctx, fencelock.WithTTL(f.w9TTL))
		if err == nil {
			sessions[i] = s
			_, err = s.Acquire(ctx, fmt.Sprintf("bench/W9/%d", i))
		}
		if err != nil {
			firstErr.CompareAndSwap(nil, fmt.Errorf("session %d: %w", i, err))
			if failed.Add(1) > int64(n/2) {
				return fmt.Errorf("more than half the sessions failed; first: %v", firstErr.Load())
			}
			return nil
		}
		d := time.Since(t0)
		held[i] = true
		mu.Lock()
		setup = append(setup, d)
		mu.Unlock()
		done.Add(1)
		return nil
	})
	report()
	if err != nil {
		return res, w9Check{}, err
	}
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(os.Stderr, "W9: %d of %d sessions failed to open or take their lock; first: %v\n", failed.Load(), n, e)
	}
	setupTime := time.Since(begin)
	heap1, rss1 := heapBytes(), rssMB()

	// The idle window, on the leader of now (it should not move: the
	// notes say if it did).
	if leader, err = c.Leader(ctx); err != nil {
		return res, w9Check{}, err
	}
	ln := c.node(leader)
	st0, cpu0, t0 := ln.Stats(), cpuTime(), time.Now()
	changes0 := leaderChanges(c)
	tick := time.NewTicker(10 * time.Second)
	idleOver := time.NewTimer(f.w9Idle)
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			return res, w9Check{}, ctx.Err()
		case <-idleOver.C:
			waiting = false
		case <-tick.C:
			st := ln.Stats()
			el := time.Since(t0).Seconds()
			fmt.Fprintf(os.Stderr, "W9 idle %.0fs: entries/s %.1f keep-alives/s %.1f expiries %d (rss %.0f MB)\n", el,
				float64(st.Entries-st0.Entries)/el, float64(st.KeepAlives-st0.KeepAlives)/el, st.Expiries-st0.Expiries, rssMB())
		}
	}
	tick.Stop()
	st1, cpu1, el := ln.Stats(), cpuTime(), time.Since(t0)
	changes := leaderChanges(c) - changes0
	heap2 := heapBytes()

	secs := el.Seconds()
	entries := st1.Entries - st0.Entries
	commands := st1.Commands - st0.Commands
	keepAlives := st1.KeepAlives - st0.KeepAlives
	keepAliveEntries := st1.KeepAliveEntries - st0.KeepAliveEntries
	renewals := st1.Renewals - st0.Renewals
	expiries := st1.Expiries - st0.Expiries
	ended := 0 // of the sessions that held their lock
	for i, s := range sessions {
		if held[i] && s.Err() != nil {
			ended++
		}
	}
	setupFailed := int(failed.Load())
	expiriesTotal := st1.Expiries
	cpuPct := (cpu1 - cpu0).Seconds() / secs * 100
	perSession := (float64(heap1) - float64(heap0)) / float64(max(n-int(failed.Load()), 1))
	chk := w9Check{Check: "W9", Target: "keepalive_entries_per_s <= 10 and expiries == 0 and sessions_lost == 0",
		KeepAliveEntriesPerS: round2(float64(keepAliveEntries) / secs), Expiries: expiries, SessionsLost: ended + setupFailed}
	chk.Pass = chk.KeepAliveEntriesPerS <= 10 && chk.Expiries == 0 && chk.SessionsLost == 0
	if !chk.Pass {
		var why []string
		if chk.KeepAliveEntriesPerS > 10 {
			why = append(why, fmt.Sprintf("%.1f entries/s carry the keep-alives (%.0f commands/s)", chk.KeepAliveEntriesPerS, float64(keepAlives)/secs))
		}
		if chk.Expiries > 0 {
			why = append(why, fmt.Sprintf("%d sessions expired in the idle window", chk.Expiries))
		}
		if chk.SessionsLost > 0 {
			why = append(why, fmt.Sprintf("%d of %d sessions failed at setup or ended", chk.SessionsLost, n))
		}
		chk.Why = strings.Join(why, "; ")
	}

	s := setup.Pct
	res = lockbench.Result{System: "fencelock", Workload: "W9", Workers: n, DurationS: round2(secs), Ops: n - setupFailed,
		OpsPerS: round2(float64(keepAlives) / secs), P50: s(.5), P99: s(.99), P999: s(.999), Max: s(1),
		Errors: int(expiries) + ended + setupFailed}
	res.Notes = strings.Join([]string{
		kv("sessions", n), kv("ttl_s", f.w9TTL.Seconds()), kv("idle_s", secs),
		kv("entries_per_s", float64(entries)/secs), kv("commands_per_s", float64(commands)/secs),
		kv("keepalive_commands_per_s", float64(keepAlives)/secs),
		kv("other_commands", commands-keepAlives),
		kv("keepalive_entries_per_s", float64(keepAliveEntries)/secs),
		kv("renewals_per_s", float64(renewals)/secs),
		kv("renewals_per_keepalive_command", float64(renewals)/max(float64(keepAlives), 1)),
		kv("expiries", expiries), kv("expiries_since_start", expiriesTotal), kv("setup_failed", setupFailed),
		kv("sessions_ended", ended), kv("leader_changes", changes),
		kv("process_cpu_pct", cpuPct), kv("process_cpu_pct_of_machine", cpuPct/float64(runtime.NumCPU())),
		kv("cpus", runtime.NumCPU()),
		kv("heap_per_session_bytes", perSession), kv("heap_mb_before", mb(heap0)), kv("heap_mb_loaded", mb(heap1)),
		kv("heap_mb_after_idle", mb(heap2)),
		kv("rss_mb_before", rss0), kv("rss_mb_loaded", rss1), kv("rss_per_replica_mb", rss1/float64(c.Replicas())),
		kv("setup_s", setupTime.Seconds()), kv("setup_parallel", f.w9Parallel),
		kv("leader", leader),
		"ops_per_s_is_keepalive_commands_per_s p_ms_are_open_plus_acquire_per_session cpu_and_memory_are_the_process_3_replicas_and_clients",
	}, " ")
	return res, chk, nil // the sessions end with their nodes
}

// w9Check is the line that says whether W9 met its target.
type w9Check struct {
	Check                string  `json:"check"`
	Target               string  `json:"target"`
	KeepAliveEntriesPerS float64 `json:"keepalive_entries_per_s"`
	Expiries             uint64  `json:"expiries"`
	SessionsLost         int     `json:"sessions_lost"` // failed to open or lock, or ended by the end
	Pass                 bool    `json:"pass"`
	Why                  string  `json:"why,omitempty"`
}

func (c w9Check) JSON() string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false) // the target reads "<=", not "\u003c="
	_ = e.Encode(c)
	return strings.TrimSpace(b.String())
}

func leaderChanges(c *cluster) uint64 {
	var n uint64
	for i := range c.Replicas() {
		if nd := c.node(i); nd != nil {
			n += nd.Stats().LeaderChanges
		}
	}
	return n
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapBytes is the live Go heap after a collection.
func heapBytes() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

func round2(x float64) float64 { return float64(int64(x*100+0.5)) / 100 }
