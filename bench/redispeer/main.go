// Command redispeer runs the lockbench workloads W1-W3 against one
// redis-server it starts itself (loopback, a temp dir, appendonly with
// appendfsync always: every write fsync'd before it is answered; no RDB
// snapshots, no replication), locking with redsync's Mutex over go-redis,
// and prints one JSON line per workload with "system":"redis". It is a
// module of its own so that fencelock's go.mod never depends on Redis
// clients; `go run ./bench -peer redis` in the repository root builds and
// runs it side by side with fencelock.
//
// It is a floor, not a peer: one node's durable write is the least a
// durable lock can cost on this machine, but that node has no replica (its
// loss loses the locks), redsync over replicas is unsafe on failover, and a
// redsync lock has no fencing token. The workloads that stop or restart a
// replica (W4, W11, W12), crash a session (W5) or need shared locks and
// semaphores (W7, W8) print a line saying they were not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// runs are the workloads the floor has a meaning for.
var runs = map[string]bool{lockbench.W1Leader: true, lockbench.W1Follower: true, "W2": true, "W3": true}

func main() {
	var (
		workload = flag.String("workload", "all", "workloads: all, or a list such as W1,W3")
		duration = flag.Duration("duration", 10*time.Second, "measured time of W2 and W3")
		workers  = flag.Int("workers", 0, "workers of W2 and W3 (0: as specified)")
		iters    = flag.Int("iterations", 2000, "W1 pairs")
		dir      = flag.String("dir", "", "where the server's dir goes (default: a new temp dir, removed after)")
		_        = flag.Int("w12-clients", 16, "ignored: W12 is not run")
		_        = flag.Int("w12-rounds", 2, "ignored: W12 is not run")
	)
	flag.Parse()
	if err := run(os.Stdout, *workload, *dir, lockbench.Options{System: "redis", Duration: *duration,
		Workers: *workers, Iterations: *iters}); err != nil {
		fmt.Fprintln(os.Stderr, "redispeer:", err)
		os.Exit(1)
	}
}

// run runs the workloads named, each on a fresh server in root, and writes
// one line per workload to out.
func run(out io.Writer, workload, root string, o lockbench.Options) error {
	workloads, err := lockbench.ParseWorkloads(workload, append(append([]string{}, lockbench.Workloads...), "W6", "W11", "W12"))
	if err != nil {
		return err
	}
	if root == "" {
		if root, err = os.MkdirTemp("", "redispeer-"); err != nil {
			return err
		}
	}
	defer os.RemoveAll(root)
	for _, w := range workloads {
		if !runs[w] {
			r := lockbench.Result{System: "redis", Workload: w,
				Notes: "not run: one redis-server has no replica to stop, restart or fail over to, and redsync has no session, shared lock or semaphore"}
			fmt.Fprintln(out, r.JSON())
			continue
		}
		res, err := lockbench.Run(context.Background(), o, w, start, filepath.Join(root, w))
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		res.Notes = strings.TrimSpace(res.Notes + " server=redis-server appendfsync=always replicas=0 lock=redsync")
		fmt.Fprintln(out, res.JSON())
	}
	return nil
}
