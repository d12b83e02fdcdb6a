package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Two `fencelock elect` commands on different replicas: the second's CMD
// runs only once the first one's ended, with a larger token; a SIGTERM to
// elect reaches its CMD, and elect exits with CMD's status.
func TestElectCommand(t *testing.T) {
	p := startProcs(t)
	dir := t.TempDir()
	script := `echo "$FENCELOCK_TOKEN $FENCELOCK_FENCE" > "$0.tmp" && mv "$0.tmp" "$0"; trap 'exit 9' TERM; while :; do sleep 0.05; done`
	start := func(id uint64, value, out string) (*exec.Cmd, chan error) {
		cmd := exec.Command(p.bin, "elect", "--http", p.urls[id], "--ttl", "3s", "orders/primary", value, "--",
			"sh", "-c", script, filepath.Join(dir, out))
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() {
			// SIGTERM first: elect passes it to CMD's process group. A
			// SIGKILL alone ends elect and leaves CMD's loop running.
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-done:
				done <- err
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
			}
			<-done
		})
		return cmd, done
	}
	// read returns the token CMD was given, after checking that its fence
	// (FENCELOCK_FENCE) carries the same token.
	read := func(out string) string {
		var got []string
		fencelocktest.WaitFor(t, out, func() bool {
			b, err := os.ReadFile(filepath.Join(dir, out))
			got = strings.Fields(string(b))
			return err == nil
		})
		require.Len(t, got, 2, "FENCELOCK_TOKEN and FENCELOCK_FENCE: %q", got)
		f, err := fencelock.ParseFence(got[1])
		require.NoError(t, err)
		require.Equal(t, got[0], strconv.FormatUint(f.Token, 10))
		return got[0]
	}
	e1, done1 := start(1, "one", "a")
	t1 := read("a")
	_, _ = start(2, "two", "b")
	fencelocktest.WaitFor(t, "the second candidate to queue", func() bool {
		r := do(t, "GET", p.urls[3]+"/v1/elections/orders%2Fprimary", nil)
		return r.Body["total"] == float64(1)
	})
	_, err := os.Stat(filepath.Join(dir, "b"))
	require.True(t, os.IsNotExist(err), "the second CMD ran while the first led")

	require.NoError(t, e1.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-done1:
		done1 <- err
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		require.Equal(t, 9, ee.ExitCode())
	case <-time.After(30 * time.Second):
		t.Fatal("elect did not end after SIGTERM")
	}
	t2 := read("b")
	n1, _ := strconv.ParseUint(t1, 10, 64)
	n2, _ := strconv.ParseUint(t2, 10, 64)
	require.Greater(t, n2, n1)
	r := do(t, "GET", p.urls[3]+"/v1/elections/orders%2Fprimary", nil)
	require.Equal(t, "two", r.Body["leader"].(map[string]any)["value"], r.Raw)
}

// SIGTERM closes serve gracefully, with streams open and an acquire waiting
// in a queue: it exits 0 promptly.
func TestServeSIGTERM(t *testing.T) {
	p := startProcs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := session(t, p.urls[2], 10000), session(t, p.urls[1], 10000)
	r := do(t, "POST", lockPath(p.urls[2], "x", "acquire"), map[string]any{"session_id": a})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	r = do(t, "POST", lockPath(p.urls[1], "x", "acquire"), map[string]any{"session_id": b, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	events := watch(t, ctx, lockPath(p.urls[1], "x", "watch"))

	cmd := p.Cmd(1)
	exited, _ := p.Exited(1)
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.True(t, cmd.ProcessState.Success(), "serve exited badly on SIGTERM (%v):\n%s", cmd.ProcessState, p.Logs(1))
	case <-time.After(15 * time.Second):
		t.Fatalf("serve still running 15s after SIGTERM:\n%s", p.Logs(1))
	}
	t.Logf("serve exited %v after SIGTERM", time.Since(start))
	for range events { // the stream ended with the process
	}
}
