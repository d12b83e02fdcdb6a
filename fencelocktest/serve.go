package fencelocktest

// This file starts `fencelock serve` processes on free loopback ports for
// the tests that need real processes (the command's, the clients', the
// examples', a user's), so that each does not carry its own copy of the
// port picking, the build and the readiness wait.

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ListenBelowEphemeral listens on a free loopback port below Linux's
// ephemeral range (32768-60999), so that once it is closed and handed to a
// replica, no kernel-chosen port (an outgoing connection's source port, a
// ":0" listener of another process) can take it in the meantime. It never
// takes a port FreePort handed out in this process: that port is free only
// until the replica it was picked for binds it.
func ListenBelowEphemeral(t testing.TB) net.Listener {
	t.Helper()
	for range 1000 {
		port := 10000 + rand.IntN(22000)
		if _, out := handedOut.Load(port); out {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			return l
		}
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return nil
}

// FreePort returns "127.0.0.1:PORT" of a port free now
// (ListenBelowEphemeral), never one it returned before in this process: a
// port is picked by listening and closing, so without that memory two
// picks before the first one's replica binds it could name the same port,
// and the second replica fail to start ("address already in use").
func FreePort(t testing.TB) string {
	t.Helper()
	for range 1000 {
		l := ListenBelowEphemeral(t)
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if _, out := handedOut.LoadOrStore(port, true); !out {
			return fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	t.Fatal("no loopback port below the ephemeral range that FreePort has not handed out")
	return ""
}

// handedOut are the ports FreePort returned in this process (keys: int).
var handedOut sync.Map

// WaitFor polls cond every 20ms until it holds, failing the test after 30s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds cmd/fencelock once per test process and returns its path;
// a failed build fails the test (and every later call). It runs `go build`,
// so the test must run where the module's source is (its own tests, or a
// module that requires it). The file lives in a temporary directory left to
// the OS's cleanup: every test of the process shares it.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fencelock-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fencelock")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/fencelock/fencelock/cmd/fencelock").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Processes is three `fencelock serve` processes on loopback, IDs 1 to 3,
// each with the others' HTTP URLs (--http-peers) and its own --dir. Its
// methods are safe for concurrent use; those that fail the test must be
// called from the test's goroutine, as t.Fatal must.
type Processes struct {
	t    testing.TB
	bin  string
	args map[uint64][]string
	// URLs are the replicas' HTTP base URLs, by ID.
	URLs map[uint64]string

	mu    sync.Mutex
	cmds  map[uint64]*exec.Cmd
	done  map[uint64]chan struct{} // closed when the process exits
	logs  map[uint64]*LockedBuffer
	bins  map[uint64]string // a binary of replica's own (SetBinary), else bin
	kills map[uint64]bool   // the process was stopped by Stop or StopAll
}

// LockedBuffer is a process's output, read while the process writes it.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// StartServe starts three `fencelock serve` processes (Binary) with extra
// flags after the common ones (ServeArgs) and waits until each is ready
// (/readyz); the test's cleanup stops them (SIGTERM, then SIGKILL after
// 10s) and, if it failed, logs their output. A replica that does not start
// or is not ready in 60s fails the test.
func StartServe(t testing.TB, extra ...string) *Processes {
	t.Helper()
	return StartServeBinary(t, Binary(t), extra...)
}

// StartServeBinary is StartServe with the fencelock binary at bin: another
// build (see SetBinary to run one replica on yet another).
func StartServeBinary(t testing.TB, bin string, extra ...string) *Processes {
	t.Helper()
	args, urls := ServeArgs(t, extra...)
	return StartServeArgs(t, bin, args, urls)
}

// StartServeArgs is StartServeBinary with each replica's arguments and
// HTTP base URL given, IDs 1 to 3: ServeArgs's, changed, or a deployment of
// the test's own (one restored from a backup, say).
func StartServeArgs(t testing.TB, bin string, args map[uint64][]string, urls map[uint64]string) *Processes {
	t.Helper()
	c := &Processes{t: t, bin: bin, args: args, URLs: urls, cmds: map[uint64]*exec.Cmd{}, done: map[uint64]chan struct{}{},
		logs: map[uint64]*LockedBuffer{}, bins: map[uint64]string{}, kills: map[uint64]bool{}}
	for id := uint64(1); id <= 3; id++ {
		c.Run(id)
	}
	t.Cleanup(c.StopAll)
	for id := uint64(1); id <= 3; id++ {
		c.WaitReady(id)
	}
	return c
}

// ServeArgs picks free loopback ports for three replicas, IDs 1 to 3, and
// returns each one's `fencelock serve` arguments (the common flags, each
// with the others' HTTP URLs in --http-peers and its own --dir in a
// temporary directory, then extra) and its HTTP base URL.
func ServeArgs(t testing.TB, extra ...string) (args map[uint64][]string, urls map[uint64]string) {
	t.Helper()
	args, urls = map[uint64][]string{}, map[uint64]string{}
	raft, httpAddrs := map[uint64]string{}, map[uint64]string{}
	var peers, httpPeers []string
	for id := uint64(1); id <= 3; id++ {
		raft[id], httpAddrs[id] = FreePort(t), FreePort(t)
		urls[id] = "http://" + httpAddrs[id]
		peers = append(peers, fmt.Sprintf("%d=%s", id, raft[id]))
		httpPeers = append(httpPeers, fmt.Sprintf("%d=%s", id, urls[id]))
	}
	dir := t.TempDir()
	for id := uint64(1); id <= 3; id++ {
		args[id] = append([]string{"serve", "--id", fmt.Sprint(id), "--peers", strings.Join(peers, ","),
			"--http-peers", strings.Join(httpPeers, ","), "--dir", filepath.Join(dir, fmt.Sprint(id)),
			"--http", httpAddrs[id], "--log-level", "warn"}, extra...)
	}
	return args, urls
}

// Bin returns the path of the fencelock binary the replicas run.
func (c *Processes) Bin() string { return c.bin }

// SetBinary makes replica id's next Run start the fencelock binary at bin
// (an upgrade, or a downgrade) with the same arguments.
func (c *Processes) SetBinary(id uint64, bin string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bins[id] = bin
}

// Args returns replica id's `fencelock serve` arguments.
func (c *Processes) Args(id uint64) []string { return append([]string(nil), c.args[id]...) }

// Run starts replica id's process (again, after Stop or Kill: on the same
// --dir) without waiting for it to be ready.
func (c *Processes) Run(id uint64) {
	c.t.Helper()
	c.mu.Lock()
	bin := c.bins[id]
	c.mu.Unlock()
	if bin == "" {
		bin = c.bin
	}
	cmd := exec.Command(bin, c.args[id]...)
	logs := &LockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c.mu.Lock()
	c.cmds[id], c.logs[id], c.done[id], c.kills[id] = cmd, logs, done, false
	c.mu.Unlock()
}

// Exited returns a channel closed when replica id's latest process exits,
// and whether it was Stop (or StopAll) that ended it; nil if it never ran.
func (c *Processes) Exited(id uint64) (<-chan struct{}, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	done := c.done[id]
	if done == nil {
		return nil, nil
	}
	return done, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.kills[id]
	}
}

// Restart runs replica id again and waits until it is ready.
func (c *Processes) Restart(id uint64) {
	c.t.Helper()
	c.Run(id)
	c.WaitReady(id)
}

// Cmd returns replica id's running process, nil if it is not running.
func (c *Processes) Cmd(id uint64) *exec.Cmd {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cmds[id]
}

// Stop sends sig to replica id (SIGTERM: a graceful stop, SIGKILL: a
// crash) and waits for its process to exit, returning its exit code (-1
// for a process a signal ended, 0 if none ran).
func (c *Processes) Stop(id uint64, sig syscall.Signal) int {
	c.mu.Lock()
	cmd, done := c.cmds[id], c.done[id]
	delete(c.cmds, id)
	c.kills[id] = true
	c.mu.Unlock()
	if cmd == nil {
		return 0
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process must run to exit
	_ = cmd.Process.Signal(sig)
	<-done
	return cmd.ProcessState.ExitCode()
}

// Kill is Stop with SIGKILL.
func (c *Processes) Kill(id uint64) { c.Stop(id, syscall.SIGKILL) }

// Freeze stops replica id's process where it stands (SIGSTOP), as a host
// that hangs: its sockets stay open, connections are accepted by the
// kernel, and nothing is answered until Thaw. It returns once every thread
// of the process is stopped, as /proc shows: the kernel stops a process
// only as it schedules its threads, and on a loaded machine one of them
// can go on answering calls for milliseconds after the signal is sent
// (where there is no /proc, it returns once the signal is sent). Stop,
// Kill and StopAll thaw a frozen process first. It fails the test if the
// replica is not running, or is not stopped within 10s.
func (c *Processes) Freeze(id uint64) {
	c.t.Helper()
	cmd := c.Cmd(id)
	if cmd == nil || cmd.Process.Signal(syscall.SIGSTOP) != nil {
		c.t.Fatalf("replica %d is not running: nothing to freeze", id)
	}
	if err := waitStopped(cmd.Process.Pid, 10*time.Second); err != nil {
		c.t.Fatalf("replica %d: %v", id, err)
	}
}

// WaitStopped returns once every thread of process pid is stopped, as
// after a SIGSTOP the test sent: the kernel stops a process only as it
// schedules its threads, so a loaded machine can leave one running for
// milliseconds after the signal. Where there is no /proc it returns at
// once. It fails the test if the process is not stopped within 10s.
func WaitStopped(t testing.TB, pid int) {
	t.Helper()
	if err := waitStopped(pid, 10*time.Second); err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
}

// waitStopped waits until every thread of process pid is stopped (state T
// in /proc/<pid>/task/*/stat), or within has passed.
func waitStopped(pid int, within time.Duration) error {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	deadline := time.Now().Add(within)
	for {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			if _, statErr := os.Stat("/proc/self"); statErr != nil {
				return nil // no /proc here: the signal is all there is
			}
			return fmt.Errorf("its threads cannot be read: %w", err)
		}
		stopped := true
		for _, task := range tasks {
			b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
			if err != nil {
				continue // a thread that ended meanwhile
			}
			// The state follows the command name, which is in parentheses
			// and may hold anything.
			st := string(b)
			if i := strings.LastIndexByte(st, ')'); i < 0 || i+2 >= len(st) || st[i+2] != 'T' && st[i+2] != 't' {
				stopped = false
				break
			}
		}
		if stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not stopped %v after SIGSTOP", within)
		}
		time.Sleep(time.Millisecond) // nothing signals a stop: /proc is read again
	}
}

// Thaw resumes replica id's process after Freeze (SIGCONT); a replica not
// running is left alone, so that a test may defer it.
func (c *Processes) Thaw(id uint64) {
	if cmd := c.Cmd(id); cmd != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Logs returns what replica id's latest process wrote so far.
func (c *Processes) Logs(id uint64) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b := c.logs[id]; b != nil {
		return b.String()
	}
	return ""
}

// StopAll stops every running replica (SIGTERM, SIGKILL after 10s); if
// the test failed it logs their output.
func (c *Processes) StopAll() {
	c.mu.Lock()
	cmds := c.cmds
	c.cmds = map[uint64]*exec.Cmd{}
	for id := range cmds {
		c.kills[id] = true
	}
	c.mu.Unlock()
	for id, cmd := range cmds {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		c.mu.Lock()
		done := c.done[id]
		c.mu.Unlock()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if c.t.Failed() {
			c.t.Logf("replica %d log:\n%s", id, c.Logs(id))
		}
	}
}

// WaitReady polls replica id's /readyz, as a load balancer would, until it
// says ready; it fails the test after 60s, or at once if the process
// exited (another process answering on its URL would otherwise pass for
// it).
func (c *Processes) WaitReady(id uint64) {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	c.mu.Lock()
	done := c.done[id]
	c.mu.Unlock()
	for {
		select {
		case <-done:
			c.t.Fatalf("replica %d exited before it was ready:\n%s", id, c.Logs(id))
		default:
		}
		resp, err := http.Get(c.URLs[id] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("replica %d never ready: %v\n%s", id, err, c.Logs(id))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
