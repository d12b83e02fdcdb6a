// Command etcdpeer runs the lockbench workloads W1-W5, W7, W8, W11 and W12 against an embedded
// 3-member etcd cluster (etcd 3.7.3, durability as shipped) on loopback,
// with etcd's own lock recipe (client/v3/concurrency: Session + Mutex; for
// W7 the RWMutex of client/v3/experimental/recipes, for W8 a semaphore by
// hand in recipes.go, etcd having none), and prints one JSON line per workload with "system":"etcd". It is a module of
// its own so that fencelock's go.mod never depends on etcd; `go run ./bench
// -peer etcd` in the repository root builds and runs it side by side with
// fencelock.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock/bench/lockbench"
)

func main() {
	var (
		workload = flag.String("workload", "all", "workloads: all, or a list such as W1,W3")
		duration = flag.Duration("duration", 10*time.Second, "measured time of W2 and W3")
		workers  = flag.Int("workers", 0, "workers of W2, W3 and W4 (0: as specified)")
		iters    = flag.Int("iterations", 2000, "W1 pairs")
		dir      = flag.String("dir", "", "where the members' data dirs go (default: a new temp dir, removed after)")
		w12c     = flag.Int("w12-clients", 16, "W12: client sessions, each cycling its own lock and holding another")
		w12r     = flag.Int("w12-rounds", 2, "W12: rolling restarts (graceful stops) of every member before the kill")
	)
	flag.Parse()
	w12o := lockbench.W12Options{Clients: *w12c, Rounds: *w12r,
		Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, "etcdpeer: "+format+"\n", args...) }}
	if err := run(*workload, *dir, lockbench.Options{System: "etcd", Duration: *duration,
		Workers: *workers, Iterations: *iters}, w12o); err != nil {
		fmt.Fprintln(os.Stderr, "etcdpeer:", err)
		os.Exit(1)
	}
}

func run(workload, root string, o lockbench.Options, w12o lockbench.W12Options) error {
	workloads, err := lockbench.ParseWorkloads(workload, append(append([]string{}, lockbench.Workloads...), "W6", "W11", "W12"))
	if err != nil {
		return err
	}
	if root == "" {
		if root, err = os.MkdirTemp("", "etcdpeer-"); err != nil {
			return err
		}
	}
	defer os.RemoveAll(root)
	for _, w := range workloads {
		if w == "W6" {
			r := lockbench.Result{System: "etcd", Workload: "W6", Errors: 0,
				Notes: "not run: W6 measures fencelock's own memory, snapshot and catch-up targets; the peer tables give etcd no figure"}
			fmt.Println(r.JSON())
			continue
		}
		if w == "W12" {
			res, err := w12(context.Background(), filepath.Join(root, w), w12o)
			if err != nil {
				return fmt.Errorf("%s: %w", w, err)
			}
			fmt.Println(res.JSON())
			continue
		}
		res, err := lockbench.Run(context.Background(), o, w, start, filepath.Join(root, w))
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		fmt.Println(res.JSON())
	}
	return nil
}

func w12(ctx context.Context, dir string, o lockbench.W12Options) (lockbench.Result, error) {
	s, err := startService(ctx, dir)
	if err != nil {
		return lockbench.Result{}, fmt.Errorf("start cluster: %w", err)
	}
	defer s.Close()
	return lockbench.W12(ctx, s, "etcd", o)
}
