package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/bench/lockbench"
	"github.com/fencelock/fencelock/httpapi"
)

// The "http-floor" system (-http-floor): W1 and W2 through the raw HTTP
// client of the -http system against three stub servers, each a process
// of its own, that decode each request's JSON and answer it at once with
// the JSON the API would (every acquire granted, a token counting up), with
// no consensus, no session and no lock behind them. What it measures is
// what net/http and JSON alone cost on this machine between processes: a
// floor under any service over them, so that a ratio the service misses
// can be told apart from one no service over HTTP could reach here. It
// keeps no lock: W3, whose check would see every worker hold the one lock
// at once, does not run on it.

const (
	floorSystem = "http-floor"
	floorEnv    = "FENCELOCK_BENCH_HTTP_FLOOR" // set in a stub server's process
)

// floorWorkload says whether workload w runs on the floor system.
func floorWorkload(w string) bool { return strings.HasPrefix(w, "W1") || w == "W2" }

// runFloorChild serves the stub API if this process is a stub server: it
// listens on a loopback port, prints its URL, and serves until its stdin
// closes (the benchmark ended or died).
func runFloorChild() bool {
	if os.Getenv(floorEnv) == "" {
		return false
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error:", err)
		return true
	}
	fmt.Println("http://" + ln.Addr().String())
	go http.Serve(ln, floorHandler())
	_, _ = io.Copy(io.Discard, os.Stdin)
	return true
}

// floorHandler answers the calls of httpClient as the API would, from
// nothing: a request's body is decoded into the API's request type, and
// the answer is the API's response type, encoded.
func floorHandler() http.Handler {
	var next atomic.Uint64
	answer := func(w http.ResponseWriter, r *http.Request, in, out any) {
		if in != nil {
			if err := json.NewDecoder(r.Body).Decode(in); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}
	lease := int64(10_000)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNoContent)
		case p == "/v1/sessions":
			var req httpapi.CreateSessionRequest
			answer(w, r, &req, httpapi.SessionResponse{SessionID: httpapi.ID(next.Add(1)), SessionSecret: strings.Repeat("s", 43)})
		case strings.HasSuffix(p, "/heartbeat"):
			answer(w, r, nil, httpapi.SessionResponse{})
		case strings.HasSuffix(p, "/acquire"):
			var req httpapi.AcquireRequest
			token := httpapi.ID(next.Add(1) << 16)
			answer(w, r, &req, httpapi.AcquireResponse{Granted: true, FencingToken: token,
				Fence: fmt.Sprintf("1234567890:%d", token), HolderSession: req.SessionID, LeaseMS: &lease})
		case strings.HasSuffix(p, "/release"):
			var req httpapi.ReleaseRequest
			answer(w, r, &req, httpapi.ReleaseResponse{Released: true})
		default:
			http.NotFound(w, r)
		}
	})
}

// floorCluster is three stub servers' processes.
type floorCluster struct {
	cmds  []*exec.Cmd
	stdin []io.Closer
	urls  []string
	hc    *http.Client
}

// floorStarter starts size stub servers, each this benchmark's own binary
// in a process of its own.
func floorStarter(size int) lockbench.Starter {
	return func(ctx context.Context, _ string) (lockbench.Cluster, error) {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		c := &floorCluster{hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
		for range size {
			cmd := exec.CommandContext(ctx, self)
			cmd.Env = append(os.Environ(), floorEnv+"=1")
			cmd.Stderr = os.Stderr
			in, err := cmd.StdinPipe()
			if err != nil {
				c.Close()
				return nil, err
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				c.Close()
				return nil, err
			}
			if err := cmd.Start(); err != nil {
				c.Close()
				return nil, err
			}
			c.cmds, c.stdin = append(c.cmds, cmd), append(c.stdin, in)
			url, err := bufio.NewReader(out).ReadString('\n')
			if url = strings.TrimSpace(url); err != nil || !strings.HasPrefix(url, "http://") {
				c.Close()
				return nil, fmt.Errorf("a stub server did not start: %q %v", url, err)
			}
			c.urls = append(c.urls, url)
		}
		return c, nil
	}
}

func (c *floorCluster) Replicas() int                       { return len(c.urls) }
func (c *floorCluster) Leader(context.Context) (int, error) { return 0, nil }

func (c *floorCluster) NewClient(ctx context.Context, i int, ttl time.Duration) (lockbench.Client, error) {
	return newHTTPClient(ctx, c.hc, c.urls[i], ttl)
}

// Stop: a stub has no state to lose, and no workload of its stops one.
func (c *floorCluster) Stop(int) error {
	return fmt.Errorf("%w: the HTTP floor's stubs are not stopped", errors.ErrUnsupported)
}

// Pids are the stubs' (lockbench.Processes): W2's CPU figure counts them.
func (c *floorCluster) Pids() []int {
	pids := make([]int, 0, len(c.cmds))
	for _, cmd := range c.cmds {
		pids = append(pids, cmd.Process.Pid)
	}
	return pids
}

// Close ends the stubs (their stdin closes) and waits for them.
func (c *floorCluster) Close() error {
	for _, in := range c.stdin {
		in.Close()
	}
	var err error
	for _, cmd := range c.cmds {
		err = errors.Join(err, cmd.Wait())
	}
	c.hc.CloseIdleConnections()
	return err
}
