// Command bench is lockbench for fencelock: it runs the workloads of
// WORKLOADS.md (W1-W10) against 3 replicas in this process on loopback, each
// with its own data dir on local disk, durability as shipped, and prints one
// JSON line per workload.
//
//	go run ./bench -workload all                  # fencelock alone
//	go run ./bench -workload W1,W2 -peer etcd -runs 3  # interleaved with etcd, plus ratio lines
//	go run ./bench -workload W1,W2,W3 -peer redis -runs 3  # interleaved with one fsync'd Redis (a floor), plus ratio lines
//	go run ./bench -workload W1,W2,W3 -http            # also over the HTTP API, plus its ratio over in-process
//	go run ./bench -workload W1,W2,W3 -client -peer etcd -runs 3  # also through the Go client to three serve processes, plus its ratios over in-process and etcd
//	go run ./bench -workload W1,W2 -runs 5 -traced -before 81eb4ff^  # tracing on over off, and off over the build before tracing
//	go run ./bench -workload W9 -w9-sessions 2000 -w9-idle 20s  # idle sessions (W9 runs only when named)
//	go run ./bench -workload W10                       # many groups (only when named): W10a per G, W10b, a check line
//	go run ./bench -workload W11 -peer etcd -runs 3    # rolling restart (W11 runs only when named)
//	go run ./bench -workload W12 -peer etcd -runs 1    # the service's rolling restart under its clients (only when named)
//	go run ./bench -workload W13                       # placement (only when named): 9 replicas, every group vs own groups
//	go run ./bench -sweep W2,W6 -peer etcd             # sweeps: docs/perf/w2-sweep.json + .svg charts, w6-sweep.*
//	go run ./bench -sweep W10                          # W10 (a) at G = 1,2,4,8: docs/perf/w10-sweep.*
//	go run ./bench -charts docs/perf/w2-sweep.json     # redraw a sweep's charts from its JSON
//
// W1 runs in two placements, W1-leader and W1-follower (the worker's
// session on the raft leader's replica, or on a follower's); -workload W1
// means both, each with its own ratio line.
//
// With -peer etcd, the etcd peer (bench/etcdpeer, a module of its own so the
// library never depends on etcd) is built once and run for the same
// workload right after (or, every other run, right before) fencelock, and a
// final line per workload gives fencelock's median figures over etcd's.
// -peer redis does the same with bench/redispeer: one redis-server it
// starts with appendfsync always, locked with redsync (W1-W3; a floor to
// measure against, not a peer: no replica, no fencing token).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/bench/lockbench"
)

func main() {
	if runChild() { // W6 restarts a replica in a process of its own
		return
	}
	if runFloorChild() { // -http-floor's stub servers
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type flags struct {
	workload, dir, peer, peerDir               string
	cpuProfile, blockProfile, mutexProfile     string
	execTrace                                  string
	handoff                                    int
	duration                                   time.Duration
	workers, runs, iterations, replicas        int
	keep, http, floor, client, clientInProcess bool
	traced                                     bool
	before                                     string
	w6Locks, w6Sessions, w6Extra, w6Workers    int

	w9Sessions, w9Parallel int
	w9TTL, w9Idle          time.Duration

	w10Groups          string
	w10Idle, w10Settle time.Duration

	w12Clients, w12Rounds int

	sweep, sweepWorkers, sweepLocks, sweepOut, charts, chartDir string
	sweepDuration                                               time.Duration
	w6MemLimit, w6HeapProfile                                   string
	w6Trace                                                     bool
}

func run() error {
	var f flags
	flag.StringVar(&f.workload, "workload", "all", "workloads: all, or a list such as W1,W3")
	flag.DurationVar(&f.duration, "duration", 10*time.Second, "measured time of W2 and W3")
	flag.IntVar(&f.workers, "workers", 0, "workers of W2, W3 and W4 (0: as specified, 64/16/8)")
	flag.IntVar(&f.iterations, "iterations", 2000, "W1 pairs")
	flag.StringVar(&f.dir, "dir", "", "where the replicas' data dirs go (default: a new temp dir, removed after)")
	flag.BoolVar(&f.keep, "keep", false, "keep the data dirs")
	flag.StringVar(&f.peer, "peer", "", "also run this peer side by side: etcd, or redis (one fsync'd redis-server with redsync: a floor, W1-W3 only)")
	flag.BoolVar(&f.http, "http", false, "also run W1-W3 through the HTTP API (system fencelock-http) and print its ratio over the in-process calls")
	flag.BoolVar(&f.floor, "http-floor", false, "also run W1 and W2 through the raw HTTP client against three stub servers, each a process of its own, that answer every call at once with no consensus behind it (system http-floor): what net/http and JSON alone cost between processes here, a floor under any service over them")
	flag.BoolVar(&f.client, "client", false, "also run W1-W3 through the Go client package against three `fencelock serve` processes built from this tree (system fencelock-client) and print its ratios over the in-process calls and over the -peer; with -before, the serve processes built at each revision run through this build's client instead of that build's in-process bench")
	flag.BoolVar(&f.clientInProcess, "client-inprocess", false, "with -client: the serve processes' API runs in this process instead (httpapi over replicas here, system fencelock-client-inprocess), so that -cpuprofile, -blockprofile and -trace see both sides of a call")
	flag.BoolVar(&f.traced, "traced", false, "also run W1-W3 with every replica recording OpenTelemetry spans (the SDK, a batching exporter that counts them) and print the traced figures over the untraced ones")
	flag.StringVar(&f.before, "before", "", "also run W1-W3 with this command built at these git revisions (a comma-separated list; temporary worktrees), interleaved, and print this build's figures over each one's (e.g. the last commit before a change)")
	flag.StringVar(&f.peerDir, "peerdir", "", "source dir of the peer (default: bench/etcdpeer or bench/redispeer, found next to this command)")
	flag.IntVar(&f.runs, "runs", 1, "repeat every workload this many times (interleaved with the peer)")
	flag.IntVar(&f.replicas, "replicas", 3, "replicas in the group (the workloads are specified for 3)")
	flag.IntVar(&f.w6Locks, "w6-locks", 1_000_000, "W6: locks held")
	flag.IntVar(&f.w6Sessions, "w6-sessions", 10_000, "W6: sessions holding them")
	flag.IntVar(&f.w6Extra, "w6-ops", 200_000, "W6: lock operations while a follower is down")
	flag.IntVar(&f.w6Workers, "w6-workers", 512, "W6: goroutines taking the locks")
	flag.IntVar(&f.w9Sessions, "w9-sessions", 100_000, "W9: idle sessions, each holding one lock")
	flag.DurationVar(&f.w9TTL, "w9-ttl", 10*time.Second, "W9: the sessions' TTL")
	flag.DurationVar(&f.w9Idle, "w9-idle", 60*time.Second, "W9: the idle window measured")
	flag.IntVar(&f.w9Parallel, "w9-parallel", 512, "W9: sessions opened (and their lock taken) at once")
	flag.StringVar(&f.w10Groups, "w10-groups", "1,2,4,8", "W10 (a): the counts of groups over 3 replicas")
	flag.DurationVar(&f.w10Idle, "w10-idle", 3*time.Second, "W10 (a): the idle window whose process CPU is measured at each count of groups")
	flag.DurationVar(&f.w10Settle, "w10-settle", 30*time.Second, "W10: how long to wait for the leader balancer to spread the leaders before measuring anyway")
	flag.IntVar(&f.w12Clients, "w12-clients", 16, "W12: client sessions, each cycling its own lock and holding another")
	flag.IntVar(&f.w12Rounds, "w12-rounds", 2, "W12: rolling restarts (SIGTERM) of every replica before the SIGKILL")
	flag.StringVar(&f.sweep, "sweep", "", "run sweeps instead of workloads: W2, W6, W10, or a list (W2 also on the -peer; W10 measures -duration a point)")
	flag.StringVar(&f.sweepWorkers, "sweep-workers", "1,2,4,8,16,32,64,128,256", "W2 sweep: worker counts")
	flag.DurationVar(&f.sweepDuration, "sweep-duration", 5*time.Second, "W2 sweep: measured time per point and system (after a 2s warm-up)")
	flag.StringVar(&f.sweepLocks, "sweep-locks", "10k,30k,100k,300k,1M", "W6 sweep: locks held")
	flag.StringVar(&f.sweepOut, "sweep-out", filepath.Join("docs", "perf"), "where sweeps write their JSON and SVG charts")
	flag.StringVar(&f.charts, "charts", "", "only redraw the charts of this sweep JSON, next to it")
	flag.StringVar(&f.chartDir, "chartdir", "", "source dir of the chart drawer (default: bench/chart, found next to this command)")
	// Not below the restored state's live heap (about 270 MB for 1M locks):
	// under that the collector runs back to back and the restore takes 3x.
	flag.StringVar(&f.w6MemLimit, "w6-memlimit", "256MiB", "W6: GOMEMLIMIT of the restarted replica's process (empty: none)")
	flag.BoolVar(&f.w6Trace, "w6-trace", false, "W6: the restarted replica prints its memory every 200ms to stderr")
	flag.StringVar(&f.w6HeapProfile, "w6-heapprofile", "", "W6: write a heap profile of the restarted replica here once it caught up")
	flag.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of the fencelock runs here")
	flag.StringVar(&f.blockProfile, "blockprofile", "", "write a block profile here")
	flag.StringVar(&f.mutexProfile, "mutexprofile", "", "write a mutex profile here")
	flag.StringVar(&f.execTrace, "trace", "", "write a Go execution trace of the fencelock runs here (go tool trace; -pprof=sched shows waits for a CPU)")
	flag.IntVar(&f.handoff, "handoff", 0, "only measure this many goroutine handoffs each way (a woken goroutine's delay to run; see handoff.go) and print their quantiles")
	flag.Parse()

	if f.handoff > 0 {
		printHandoff(os.Stdout, f.handoff)
		return nil
	}
	if f.charts != "" {
		return redraw(f.charts, f.chartDir)
	}
	all := append(append([]string{}, lockbench.Workloads...), "W6")
	workloads, err := lockbench.ParseWorkloads(f.workload, append(all, "W9", "W10", "W11", "W12", "W13"))
	if err != nil {
		return err
	}
	if f.workload == "" || f.workload == "all" {
		workloads = all // W9 holds 100,000 sessions for a minute, W10 runs clusters of its own shapes, W11 and W12 restart every replica: only when named
	}
	var sweeps []string
	if f.sweep != "" {
		if sweeps, err = lockbench.ParseWorkloads(f.sweep, []string{"W2", "W6", "W10"}); err != nil {
			return fmt.Errorf("-sweep: %w", err)
		}
	}
	root := f.dir
	if root == "" {
		if root, err = os.MkdirTemp("", "lockbench-"); err != nil {
			return err
		}
		if !f.keep {
			defer os.RemoveAll(root)
		}
	}
	var befores []*peer
	if f.before != "" {
		for i, rev := range strings.Split(f.before, ",") {
			b, err := buildBefore(strings.TrimSpace(rev), root, i, f.client)
			if err != nil {
				return err
			}
			befores = append(befores, b)
		}
	}
	var peer *peer
	if f.peer != "" {
		if f.peer != "etcd" && f.peer != "redis" {
			return fmt.Errorf("unknown peer %q (have: etcd, redis)", f.peer)
		}
		if peer, err = buildPeer(f.peer, f.peerDir, root); err != nil {
			return err
		}
	}
	var serveBin string
	if f.client && !f.clientInProcess {
		serveBin = filepath.Join(root, "fencelock-serve")
		src, err := repoRoot()
		if err != nil {
			return err
		}
		if err := buildServeAt(src, serveBin); err != nil {
			return err
		}
	}
	stop, err := profile(f)
	if err != nil {
		return err
	}
	defer stop()

	if len(sweeps) > 0 {
		for _, w := range sweeps {
			var sw sweepFile
			switch w {
			case "W2":
				sw, err = sweepW2(context.Background(), f, root, peer)
			case "W6":
				sw, err = sweepW6(context.Background(), f, root)
			default:
				sw, err = sweepW10(context.Background(), f, root)
			}
			if err != nil {
				return fmt.Errorf("sweep %s: %w", w, err)
			}
			if err := writeSweep(sw, f.sweepOut, f.chartDir); err != nil {
				return err
			}
		}
		return nil
	}

	o := lockbench.Options{System: "fencelock", Duration: f.duration, Workers: f.workers, Iterations: f.iterations}
	ctx := context.Background()
	ours := map[string][]lockbench.Result{}
	theirs := map[string][]lockbench.Result{}
	overHTTP := map[string][]lockbench.Result{}
	floor := map[string][]lockbench.Result{}
	throughClient := map[string][]lockbench.Result{}
	traced := map[string][]lockbench.Result{}
	earlier := make([]map[string][]lockbench.Result, len(befores)) // by befores' index
	for i := range befores {
		earlier[i] = map[string][]lockbench.Result{}
	}
	runBefores := func(w string, r int) error {
		for i, b := range befores {
			if f.client { // the service at that revision, through this client
				if err := runClient(ctx, o, w, b.serve, fmt.Sprintf("%s-%s-%d", filepath.Join(root, b.dirPrefix), w, r), clientSystem+"@"+b.rev, f.keep, earlier[i]); err != nil {
					return err
				}
				continue
			}
			if err := b.run(ctx, f, w, r, earlier[i]); err != nil {
				return err
			}
		}
		return nil
	}
	var spans atomic.Int64
	for r := range f.runs {
		for _, w := range workloads {
			peerFirst := peer != nil && r%2 == 1 && !fencelockOnly(w)
			beforeFirst := len(befores) > 0 && r%2 == 1 && tracedWorkload(w)
			if beforeFirst {
				if err := runBefores(w, r); err != nil {
					return err
				}
			}
			if peerFirst {
				if err := peer.run(ctx, f, w, r, theirs); err != nil {
					return err
				}
			}
			dir := filepath.Join(root, fmt.Sprintf("fencelock-%s-%d", w, r))
			var res lockbench.Result
			var check string
			switch w {
			case "W6":
				res, err = w6(ctx, f, dir)
			case "W12":
				res, err = w12(ctx, f, dir, w12Options(f))
			case "W9":
				var chk w9Check
				res, chk, err = w9(ctx, f, dir)
				check = chk.JSON()
			case "W13": // prints its lines as it goes: one per placement
				_, err = w13(ctx, f, dir)
				if !f.keep {
					os.RemoveAll(dir)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", w, err)
				}
				continue
			case "W10": // prints its lines as it goes: one per point and part
				var chk w10Check
				if _, chk, err = w10(ctx, f, dir); err == nil {
					fmt.Println(chk.JSON())
				}
				if !f.keep {
					os.RemoveAll(dir)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", w, err)
				}
				continue
			default:
				res, err = lockbench.Run(ctx, o, w, starter(f.replicas, nil), dir)
			}
			if err != nil {
				return fmt.Errorf("%s: %w", w, err)
			}
			if !f.keep {
				os.RemoveAll(dir)
			}
			fmt.Println(res.JSON())
			if check != "" {
				fmt.Println(check)
			}
			ours[w] = append(ours[w], res)
			if f.http && (strings.HasPrefix(w, "W1") || w == "W2" || w == "W3") {
				ho := o
				ho.System = "fencelock-http"
				hr, err := measure(f, dir+"-http", w+" over HTTP", func() (lockbench.Result, error) {
					return lockbench.Run(ctx, ho, w, httpStarter(f.replicas), dir+"-http")
				})
				if err != nil {
					return err
				}
				overHTTP[w] = append(overHTTP[w], hr)
			}
			if f.floor && floorWorkload(w) {
				fo := o
				fo.System = floorSystem
				fr, err := lockbench.Run(ctx, fo, w, floorStarter(f.replicas), dir+"-floor")
				if err != nil {
					return fmt.Errorf("%s on the HTTP floor: %w", w, err)
				}
				fmt.Println(fr.JSON())
				floor[w] = append(floor[w], fr)
			}
			if f.client && serviceWorkload(w) {
				if err := runClient(ctx, o, w, serveBin, dir+"-client", clientSystem, f.keep, throughClient); err != nil {
					return err
				}
			}
			if f.traced && tracedWorkload(w) {
				to := o
				to.System = "fencelock-traced"
				spans.Store(0)
				tr, err := lockbench.Run(ctx, to, w, tracedStarter(f.replicas, &spans), dir+"-traced")
				if err != nil {
					return fmt.Errorf("%s traced: %w", w, err)
				}
				if !f.keep {
					os.RemoveAll(dir + "-traced")
				}
				tr.Notes = strings.TrimSpace(tr.Notes + fmt.Sprintf(" spans_exported=%d", spans.Load()))
				fmt.Println(tr.JSON())
				traced[w] = append(traced[w], tr)
			}
			if len(befores) > 0 && !beforeFirst && tracedWorkload(w) {
				if err := runBefores(w, r); err != nil {
					return err
				}
			}
			if peer != nil && !peerFirst && !fencelockOnly(w) {
				if err := peer.run(ctx, f, w, r, theirs); err != nil {
					return err
				}
			}
		}
	}
	// The HTTP API's overhead: its figures over the in-process ones (the
	// ratio line names the in-process system as the peer).
	for _, w := range workloads {
		if len(overHTTP[w]) > 0 {
			fmt.Println(lockbench.Compare("fencelock-inprocess", w, overHTTP[w], ours[w]).JSON())
		}
	}
	// The HTTP floor under the service: the client's figures over it.
	for _, w := range workloads {
		if len(floor[w]) > 0 && len(throughClient[w]) > 0 {
			fmt.Println(compareAs(clientSystem, floorSystem, w, throughClient[w], floor[w]).JSON())
		}
	}
	// The service through the Go client: over the in-process calls, and
	// over the peer's.
	for _, w := range workloads {
		if len(throughClient[w]) == 0 {
			continue
		}
		fmt.Println(compareAs(clientSystem, "fencelock-inprocess", w, throughClient[w], ours[w]).JSON())
		if peer != nil && len(theirs[w]) > 0 {
			fmt.Println(compareAs(clientSystem, f.peer, w, throughClient[w], theirs[w]).JSON())
		}
	}
	// Tracing's cost: traced over untraced, and this build over -before's
	// (with -client: this tree's service over the one built at each).
	for _, w := range workloads {
		if len(traced[w]) > 0 {
			fmt.Println(lockbench.Compare("fencelock-untraced", w, traced[w], ours[w]).JSON())
		}
		for i, b := range befores {
			switch {
			case len(earlier[i][w]) == 0:
			case f.client:
				fmt.Println(compareAs(clientSystem, clientSystem+"@"+b.rev, w, throughClient[w], earlier[i][w]).JSON())
			default:
				fmt.Println(lockbench.Compare(b.name, w, ours[w], earlier[i][w]).JSON())
			}
		}
	}
	if peer != nil {
		for _, w := range workloads {
			if len(theirs[w]) > 0 {
				fmt.Println(lockbench.Compare(f.peer, w, ours[w], theirs[w]).JSON())
			}
		}
	}
	return nil
}

// fencelockOnly are the workloads the etcd peer has no counterpart of.
func fencelockOnly(w string) bool { return w == "W6" || w == "W9" || w == "W10" || w == "W13" }

// profile starts the profiles asked for and returns what writes them.
func profile(f flags) (func(), error) {
	var stops []func()
	// record starts what writes path until the stops (the CPU profile, the
	// execution trace), if path was asked for.
	record := func(path string, start func(io.Writer) error, stop func()) error {
		if path == "" {
			return nil
		}
		out, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := start(out); err != nil {
			return err
		}
		stops = append(stops, func() { stop(); out.Close() })
		return nil
	}
	if err := record(f.cpuProfile, pprof.StartCPUProfile, pprof.StopCPUProfile); err != nil {
		return nil, err
	}
	if err := record(f.execTrace, trace.Start, trace.Stop); err != nil {
		return nil, err
	}
	write := func(name, path string) func() {
		return func() {
			out, err := os.Create(path)
			if err == nil {
				_ = pprof.Lookup(name).WriteTo(out, 0)
				out.Close()
			}
		}
	}
	if f.blockProfile != "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
		stops = append(stops, write("block", f.blockProfile))
	}
	if f.mutexProfile != "" {
		runtime.SetMutexProfileFraction(10)
		stops = append(stops, write("mutex", f.mutexProfile))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}, nil
}

// peer is the binary of a system run beside fencelock, built once: the etcd
// peer, or this command at an earlier revision (-before).
type peer struct {
	bin, root string
	// name labels its result lines ("etcd", "fencelock@REV"); dirPrefix
	// starts the names of its data dirs.
	name, dirPrefix string
	// rev and serve, of a -before build with -client: its revision and its
	// fencelock command.
	rev, serve string
}

// buildPeer builds the peer named kind ("etcd" or "redis") from its module,
// bench/<kind>peer (or dir).
func buildPeer(kind, dir, root string) (*peer, error) {
	mod := kind + "peer"
	if dir == "" {
		_, self, _, _ := runtime.Caller(0)
		for _, d := range []string{filepath.Join("bench", mod), mod, filepath.Join(filepath.Dir(self), mod)} {
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
				dir = d
				break
			}
		}
		if dir == "" {
			return nil, fmt.Errorf("cannot find bench/%s: run from the repository root or pass -peerdir", mod)
		}
	}
	bin := filepath.Join(root, mod)
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("build the %s peer in %s: %w", kind, dir, err)
	}
	return &peer{bin: bin, root: root, name: kind, dirPrefix: kind}, nil
}

func (p *peer) run(ctx context.Context, f flags, w string, r int, into map[string][]lockbench.Result) error {
	args := []string{"-workload", w,
		"-duration", f.duration.String(), "-workers", fmt.Sprint(f.workers),
		"-iterations", fmt.Sprint(f.iterations),
		"-dir", filepath.Join(p.root, fmt.Sprintf("%s-%s-%d", p.dirPrefix, w, r))}
	if w == "W12" { // only builds that know W12 know its flags
		args = append(args, "-w12-clients", fmt.Sprint(f.w12Clients), "-w12-rounds", fmt.Sprint(f.w12Rounds))
	}
	cmd := exec.CommandContext(ctx, p.bin, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s %s: %w", p.name, w, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		res, err := lockbench.Parse(line)
		if err != nil {
			return fmt.Errorf("%s printed %q: %w", p.name, line, err)
		}
		if res.System != p.name { // an earlier fencelock calls itself fencelock
			res.System = p.name
			line = res.JSON()
		}
		fmt.Println(line)
		into[w] = append(into[w], res)
	}
	return nil
}
