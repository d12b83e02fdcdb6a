package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/bench/lockbench"
	flclient "github.com/fencelock/fencelock/client"
)

// W12's fencelock side: three `fencelock serve` processes on loopback, each
// on its own --dir, driven through the Go client package, plus the
// `fencelock lock -- CMD` command and the Python client of
// examples/python as holders in processes of their own.

//go:embed w12holder.py
var w12HolderPy []byte

// repoRoot is the repository this command's source is in.
func repoRoot() (string, error) {
	_, self, _, ok := runtime.Caller(0)
	if ok {
		root := filepath.Dir(filepath.Dir(self))
		if _, err := os.Stat(filepath.Join(root, "cmd", "fencelock")); err == nil {
			return root, nil
		}
	}
	if _, err := os.Stat(filepath.Join("cmd", "fencelock")); err == nil {
		return ".", nil
	}
	return "", errors.New("cannot find the repository's cmd/fencelock: run from the repository root")
}

// buildServe builds the fencelock command into dir once and returns its path.
func buildServe(dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "fencelock")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/fencelock")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/fencelock: %v\n%s", err, out)
	}
	return bin, nil
}

// loopbackPort returns a free loopback address below Linux's ephemeral
// range (32768-60999), so that no outgoing connection's source port takes
// it between its check here and the replica's listen.
func loopbackPort() (string, error) {
	for range 1000 {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 10000+rand.IntN(22000)))
		if err == nil {
			addr := l.Addr().String()
			l.Close()
			return addr, nil
		}
	}
	return "", errors.New("no free loopback port below the ephemeral range")
}

// serveGroup is the W12 Service of fencelock: serve processes.
type serveGroup struct {
	bin, dir string
	urls     []string
	args     [][]string
	hc       *http.Client
	logf     func(string, ...any)

	mu     sync.Mutex
	procs  []*exec.Cmd // nil while stopped
	exited []chan struct{}
	cl     *flclient.Client
	extra  []*os.Process // external holders still running
}

// startServeGroup starts n serve processes with bin, their dirs and logs
// (replica-N.log, appended by every start) under dir.
func startServeGroup(ctx context.Context, bin, dir string, n int, logf func(string, ...any)) (*serveGroup, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	g := &serveGroup{bin: bin, dir: dir, hc: &http.Client{Timeout: 2 * time.Second}, logf: logf,
		procs: make([]*exec.Cmd, n), exited: make([]chan struct{}, n)}
	var peers, httpPeers, httpAddrs []string
	for id := 1; id <= n; id++ {
		raft, err := loopbackPort()
		if err != nil {
			return nil, err
		}
		h, err := loopbackPort()
		if err != nil {
			return nil, err
		}
		httpAddrs = append(httpAddrs, h)
		g.urls = append(g.urls, "http://"+h)
		peers = append(peers, fmt.Sprintf("%d=%s", id, raft))
		httpPeers = append(httpPeers, fmt.Sprintf("%d=http://%s", id, h))
	}
	for i := range n {
		g.args = append(g.args, []string{"serve", "--id", fmt.Sprint(i + 1), "--peers", strings.Join(peers, ","),
			"--http-peers", strings.Join(httpPeers, ","), "--dir", filepath.Join(dir, fmt.Sprint(i+1)),
			"--http", httpAddrs[i], "--log-level", "info"})
		if err := g.start(i); err != nil {
			g.Close()
			return nil, err
		}
	}
	for i := range n {
		if err := g.waitReady(ctx, i); err != nil {
			g.Close()
			return nil, err
		}
	}
	cl, err := flclient.New(ctx, flclient.Config{Endpoints: g.urls})
	if err != nil {
		g.Close()
		return nil, err
	}
	g.cl = cl
	return g, nil
}

func (g *serveGroup) logPath(i int) string {
	return filepath.Join(g.dir, fmt.Sprintf("replica-%d.log", i+1))
}

func (g *serveGroup) start(i int) error {
	if err := os.MkdirAll(g.dir, 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(g.logPath(i), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "=== bench: start at %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(g.bin, g.args[i]...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	g.mu.Lock()
	g.procs[i], g.exited[i] = cmd, done
	g.mu.Unlock()
	return nil
}

func (g *serveGroup) waitReady(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		g.mu.Lock()
		done := g.exited[i]
		g.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("replica %d exited before it was ready (log: %s)", i+1, g.logPath(i))
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", g.urls[i]+"/readyz", nil)
		if resp, err := g.hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %d not ready: %w (log: %s)", i+1, ctx.Err(), g.logPath(i))
		case <-time.After(20 * time.Millisecond): // polling, as a load balancer does
		}
	}
}

func (g *serveGroup) Replicas() int { return len(g.urls) }

// Leader reads /v1/status on every running replica until they agree on
// the default group's leader and it runs.
func (g *serveGroup) Leader(ctx context.Context) (int, error) {
	for {
		var leader uint64
		agree, n := true, 0
		for i := range g.urls {
			g.mu.Lock()
			up := g.procs[i] != nil
			g.mu.Unlock()
			if !up {
				continue
			}
			var st struct {
				LeaderID uint64 `json:"leader_id"`
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", g.urls[i]+"/v1/status", nil)
			resp, err := g.hc.Do(req)
			if err != nil {
				agree = false
				break
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil || st.LeaderID == 0 || (leader != 0 && st.LeaderID != leader) {
				agree = false
				break
			}
			leader, n = st.LeaderID, n+1
		}
		if agree && n > 0 && leader >= 1 && int(leader) <= len(g.urls) {
			g.mu.Lock()
			up := g.procs[leader-1] != nil
			g.mu.Unlock()
			if up {
				return int(leader - 1), nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (g *serveGroup) signal(ctx context.Context, i int, sig syscall.Signal, within time.Duration) error {
	g.mu.Lock()
	cmd, done := g.procs[i], g.exited[i]
	g.procs[i] = nil
	g.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("replica %d is not running", i+1)
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		if sig == syscall.SIGTERM && cmd.ProcessState != nil && !cmd.ProcessState.Success() {
			g.logf("replica %d exited with %v after SIGTERM (log: %s)", i+1, cmd.ProcessState, g.logPath(i))
		}
		return nil
	case <-time.After(within):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("replica %d did not exit within %v of %v: killed (log: %s)", i+1, within, sig, g.logPath(i))
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		return ctx.Err()
	}
}

func (g *serveGroup) Terminate(ctx context.Context, i int) error {
	return g.signal(ctx, i, syscall.SIGTERM, time.Minute)
}

func (g *serveGroup) Kill(ctx context.Context, i int) error {
	return g.signal(ctx, i, syscall.SIGKILL, time.Minute)
}

func (g *serveGroup) Restart(ctx context.Context, i int) error {
	if err := g.start(i); err != nil {
		return err
	}
	return g.waitReady(ctx, i)
}

func (g *serveGroup) Close() error {
	if g.cl != nil {
		g.cl.Close()
	}
	g.mu.Lock()
	extra := g.extra
	g.extra = nil
	g.mu.Unlock()
	for _, p := range extra {
		_ = p.Kill()
	}
	for i := range g.procs {
		g.mu.Lock()
		up := g.procs[i] != nil
		g.mu.Unlock()
		if up {
			_ = g.signal(context.Background(), i, syscall.SIGTERM, 10*time.Second)
		}
	}
	return nil
}

func (g *serveGroup) Open(ctx context.Context, ttl time.Duration) (lockbench.ServiceSession, error) {
	s, err := g.cl.NewSession(ctx, fencelock.WithTTL(ttl), fencelock.WithSessionName("lockbench-W12"))
	if err != nil {
		return nil, err
	}
	return clientSession{s}, nil
}

type clientSession struct{ s *flclient.Session }

func (c clientSession) Acquire(ctx context.Context, name string) (lockbench.ServiceGrant, error) {
	l, err := c.s.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (c clientSession) TryAcquire(ctx context.Context, name string) (lockbench.ServiceGrant, error) {
	l, err := c.s.TryAcquire(ctx, name)
	if errors.Is(err, fencelock.ErrLocked) {
		return nil, fmt.Errorf("%w: %w", lockbench.ErrHeld, err)
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

func (c clientSession) Done() <-chan struct{}           { return c.s.Done() }
func (c clientSession) Err() error                      { return c.s.Err() }
func (c clientSession) Close(ctx context.Context) error { return c.s.Close(ctx) }

// The external holders.

func (g *serveGroup) Kinds() []string { return []string{"cli", "python"} }

// external is a holder process that prints its token, then holds its lock
// until the file stop exists, then releases and exits 0.
type external struct {
	kind, stop string
	cmd        *exec.Cmd
	token      uint64
	exited     chan struct{}
	out        *lockedBuf
	finished   bool
	ok         bool
	detail     string
	mu         sync.Mutex
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *lockedBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() < 64<<10 {
		b.b.Write(p)
	}
	return len(p), nil
}

func (b *lockedBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (g *serveGroup) Start(ctx context.Context, kind, name string, ttl time.Duration) (lockbench.External, error) {
	dir := filepath.Join(g.dir, "external-"+kind)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	e := &external{kind: kind, stop: filepath.Join(dir, "stop"), exited: make(chan struct{}), out: &lockedBuf{}}
	hb := filepath.Join(dir, "heartbeat")
	endpoints := strings.Join(g.urls, ",")
	switch kind {
	case "cli":
		// The long command: it writes its token and a heartbeat until told
		// to stop; "killed" is the CLI ending it (or it dying) before that.
		script := `while [ ! -e "$W12_STOP" ]; do echo "$FENCELOCK_TOKEN $(date +%s.%N)" > "$W12_HB.tmp" && mv "$W12_HB.tmp" "$W12_HB"; sleep 0.1; done`
		e.cmd = exec.Command(g.bin, "lock", "--http", endpoints, "--ttl", ttl.String(), "--name", "lockbench-W12-cli",
			name, "--", "sh", "-c", script)
		e.cmd.Env = append(os.Environ(), "W12_STOP="+e.stop, "W12_HB="+hb)
	case "python":
		py, err := exec.LookPath("python3")
		if err != nil {
			return nil, fmt.Errorf("W12 runs the Python client with python3, which is not on PATH: %w", err)
		}
		root, err := repoRoot()
		if err != nil {
			return nil, err
		}
		script := filepath.Join(dir, "w12holder.py")
		if err := os.WriteFile(script, w12HolderPy, 0o644); err != nil {
			return nil, err
		}
		lib, _ := filepath.Abs(filepath.Join(root, "examples", "python"))
		e.cmd = exec.Command(py, script, lib, endpoints, name, strconv.FormatFloat(ttl.Seconds(), 'f', -1, 64), e.stop, hb)
	default:
		return nil, fmt.Errorf("no external holder %q", kind)
	}
	e.cmd.Stdout, e.cmd.Stderr = e.out, e.out
	if err := e.cmd.Start(); err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.extra = append(g.extra, e.cmd.Process)
	g.mu.Unlock()
	go func() { _ = e.cmd.Wait(); close(e.exited) }()
	// The grant: the holder writes its token to its heartbeat file.
	deadline := time.Now().Add(time.Minute)
	for {
		if b, err := os.ReadFile(hb); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				if t, err := strconv.ParseUint(f[0], 10, 64); err == nil && t > 0 {
					e.token = t
					return e, nil
				}
			}
		}
		select {
		case <-e.exited:
			return nil, fmt.Errorf("the %s holder exited before its grant: %v\n%s", kind, e.cmd.ProcessState, e.out)
		case <-ctx.Done():
			_ = e.cmd.Process.Kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = e.cmd.Process.Kill()
			return nil, fmt.Errorf("the %s holder was not granted %s within a minute:\n%s", kind, name, e.out)
		}
	}
}

func (e *external) Token() uint64           { return e.token }
func (e *external) Exited() <-chan struct{} { return e.exited }

func (e *external) Finish(ctx context.Context) (bool, string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.finished {
		return e.ok, e.detail
	}
	e.finished = true
	select {
	case <-e.exited:
		e.ok, e.detail = false, fmt.Sprintf("ended before the end of the run: %v; output: %s", e.cmd.ProcessState, oneLine(e.out.String()))
		return e.ok, e.detail
	default:
	}
	_ = os.WriteFile(e.stop, nil, 0o644)
	select {
	case <-e.exited:
	case <-time.After(30 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.exited
		e.ok, e.detail = false, "did not exit within 30s of being told to stop: killed; output: "+oneLine(e.out.String())
		return e.ok, e.detail
	case <-ctx.Done():
		_ = e.cmd.Process.Kill()
		<-e.exited
		e.ok, e.detail = false, ctx.Err().Error()
		return e.ok, e.detail
	}
	e.ok = e.cmd.ProcessState.Success()
	e.detail = fmt.Sprintf("%v; output: %s", e.cmd.ProcessState, oneLine(e.out.String()))
	return e.ok, e.detail
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// w12 runs W12 on serve processes under dir, built from this source tree.
func w12(ctx context.Context, _ flags, dir string, o lockbench.W12Options) (lockbench.Result, error) {
	bin, err := buildServe(filepath.Dir(dir))
	if err != nil {
		return lockbench.Result{}, err
	}
	return w12With(ctx, bin, dir, o)
}

// w12With runs W12 on serve processes of bin under dir.
func w12With(ctx context.Context, bin, dir string, o lockbench.W12Options) (lockbench.Result, error) {
	if _, err := exec.LookPath("python3"); err != nil {
		return lockbench.Result{}, fmt.Errorf("W12 runs the Python client (examples/python) with python3, which is not on PATH: %w", err)
	}
	g, err := startServeGroup(ctx, bin, dir, 3, o.Log)
	if err != nil {
		return lockbench.Result{}, err
	}
	defer g.Close()
	if o.Fencer == nil {
		o.Fencer = fencelock.NewFencer()
	}
	res, err := lockbench.W12(ctx, g, "fencelock", o)
	if err != nil || w12Lost(res) {
		// Keep the replicas' logs past the removal of dir.
		keep, kerr := os.MkdirTemp("", "lockbench-W12-logs-")
		if kerr == nil {
			for i := range g.Replicas() {
				if b, rerr := os.ReadFile(g.logPath(i)); rerr == nil {
					_ = os.WriteFile(filepath.Join(keep, filepath.Base(g.logPath(i))), b, 0o644)
				}
			}
			fmt.Fprintf(os.Stderr, "bench: W12 lost something or failed: the replicas' logs are kept in %s\n", keep)
		}
	}
	return res, err
}

// w12Lost says whether a W12 result counts anything lost or doubled.
func w12Lost(r lockbench.Result) bool {
	for _, k := range []string{"sessions_lost", "held_lost", "double_holders", "externals_ended_early"} {
		if v, _ := r.Note(k); v > 0 {
			return true
		}
	}
	return false
}

// w12Options are W12's options from the flags; progress goes to stderr.
func w12Options(f flags) lockbench.W12Options {
	return lockbench.W12Options{Clients: f.w12Clients, Rounds: f.w12Rounds,
		Log: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }}
}
