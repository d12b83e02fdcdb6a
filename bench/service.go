package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/bench/lockbench"
	flclient "github.com/fencelock/fencelock/client"
)

// The "client" system (-client): W1-W3 through the Go client package
// against three `fencelock serve` processes on loopback, as deployed (each
// on its own --dir, with --http-peers; the processes of W12's serveGroup).
// Its figures over the in-process ones are what the service adds: two
// processes' hops, HTTP and JSON, the client's heartbeats and its polling
// of a queued acquire, and the server's checks that a grant it answers is
// backed by the group.

// clientSystem names the client system's result lines.
const clientSystem = "fencelock-client"

// clientStarter starts size serve processes of the fencelock command bin
// (built once for the whole run) in a workload's dir.
func clientStarter(bin string, size int) lockbench.Starter {
	return func(ctx context.Context, dir string) (lockbench.Cluster, error) {
		g, err := startServeGroup(ctx, bin, dir, size, nil)
		if err != nil {
			return nil, err
		}
		return serviceCluster{g, g.urls}, nil
	}
}

// clientInProcessStarter is the client system on the HTTP API of replicas
// in this process (the -http system's), for -client-inprocess: the
// profiles of this process (-cpuprofile, -blockprofile, -trace) then see
// the server's side of each call beside the client's.
func clientInProcessStarter(size int) lockbench.Starter {
	start := httpStarter(size)
	return func(ctx context.Context, dir string) (lockbench.Cluster, error) {
		c, err := start(ctx, dir)
		if err != nil {
			return nil, err
		}
		hc := c.(*httpCluster)
		return serviceCluster{hc, hc.urls}, nil
	}
}

// replicaSet is a lockbench.Cluster but for its clients.
type replicaSet interface {
	Replicas() int
	Leader(ctx context.Context) (int, error)
	Stop(replica int) error
	Close() error
}

// serviceCluster is a group of replicas serving the API at urls, as a
// lockbench.Cluster whose clients are the Go client's: each worker is a
// client.Client of its own (one process of a service's), its first
// endpoint the replica the workload puts it on.
type serviceCluster struct {
	replicaSet
	urls []string
}

// Pids are the serve processes' (lockbench.Processes), so that W2's CPU
// figure counts the replicas' CPU beside the clients'; servers in this
// process have none of their own.
func (c serviceCluster) Pids() []int {
	if p, ok := c.replicaSet.(lockbench.Processes); ok {
		return p.Pids()
	}
	return nil
}

// Pids are the running serve processes' IDs.
func (g *serveGroup) Pids() []int {
	g.mu.Lock()
	defer g.mu.Unlock()
	var pids []int
	for _, p := range g.procs {
		if p != nil && p.Process != nil {
			pids = append(pids, p.Process.Pid)
		}
	}
	return pids
}

// Stop kills replica i's process (a lockbench.Cluster stops hard).
func (g *serveGroup) Stop(i int) error { return g.Kill(context.Background(), i) }

func (c serviceCluster) NewClient(ctx context.Context, i int, ttl time.Duration) (lockbench.Client, error) {
	n := len(c.urls)
	endpoints := make([]string, 0, n)
	for k := range n { // replica i first: the session opens there
		endpoints = append(endpoints, c.urls[(i+k)%n])
	}
	cl, err := flclient.New(ctx, flclient.Config{Endpoints: endpoints})
	if err != nil {
		return nil, err
	}
	s, err := cl.NewSession(ctx, fencelock.WithTTL(ttl), fencelock.WithSessionName("lockbench"))
	if err != nil {
		cl.Close()
		return nil, err
	}
	return serviceClient{cl, s}, nil
}

type serviceClient struct {
	cl *flclient.Client
	s  *flclient.Session
}

func (c serviceClient) Acquire(ctx context.Context, name string) (lockbench.Held, error) {
	l, err := c.s.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// StopHeartbeats: a client session heartbeats on its own until closed;
// W5, which needs it, is not run on this system.
func (c serviceClient) StopHeartbeats(context.Context) (func() time.Time, error) {
	return nil, fmt.Errorf("%w: a client session's heartbeats stop only with the session", errors.ErrUnsupported)
}

func (c serviceClient) Close(ctx context.Context) error {
	err := c.s.Close(ctx)
	c.cl.Close()
	return err
}

// serviceWorkload says whether workload w runs on the client system too.
func serviceWorkload(w string) bool { return tracedWorkload(w) }

// buildServeAt builds the fencelock command of the source tree src (a
// checkout of this repository) to the file out.
func buildServeAt(src, out string) error {
	cmd := exec.Command("go", "build", "-o", out, "./cmd/fencelock")
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/fencelock in %s: %v\n%s", src, err, b)
	}
	return nil
}

// runClient runs workload w on the client system with the serve processes
// of bin in dir, prints its line labelled system and adds it to into.
// A workload the client system does not run (W5: its sessions cannot stop
// heartbeating) is an error.
// With bin "", the replicas run in this process (clientInProcessStarter).
func runClient(ctx context.Context, o lockbench.Options, w, bin, dir, system string, keep bool, into map[string][]lockbench.Result) error {
	if !serviceWorkload(w) {
		return fmt.Errorf("%s does not run on %s (W1-W3 only)", w, system)
	}
	o.System = system
	start := clientStarter(bin, 3)
	if bin == "" {
		start, o.System = clientInProcessStarter(3), system+"-inprocess"
	}
	res, err := lockbench.Run(ctx, o, w, start, dir)
	if err != nil {
		return fmt.Errorf("%s on %s: %w (the replicas' logs: %s)", w, system, err, dir)
	}
	if !keep {
		os.RemoveAll(dir)
	}
	fmt.Println(res.JSON())
	into[w] = append(into[w], res)
	return nil
}

// compareAs is lockbench.Compare with the ratio line labelled
// "system/peer" (Compare's own label starts with "fencelock/").
func compareAs(system, peer, w string, ours, theirs []lockbench.Result) lockbench.Ratio {
	r := lockbench.Compare(peer, w, ours, theirs)
	r.System = system + "/" + peer
	return r
}
