package main

import (
	"net/http"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// adminCLI runs the binary's client commands against the endpoints urls
// (comma-separated) with the token file tokens.
type adminCLI struct {
	t                 *testing.T
	bin, urls, tokens string
}

// run runs the command and returns its combined output.
func (a adminCLI) run(args ...string) (string, error) {
	a.t.Helper()
	out, err := exec.Command(a.bin, append(args, "--http", a.urls, "--token-file", a.tokens)...).CombinedOutput()
	return string(out), err
}

// must runs the command and fails the test if it fails.
func (a adminCLI) must(args ...string) string {
	a.t.Helper()
	out, err := a.run(args...)
	require.NoError(a.t, err, "%v: %s", args, out)
	return out
}

// startReplacement starts `serve` with args as the replica that takes a
// lost one's place, stopped (SIGTERM, then SIGKILL after 10s) when the test
// ends, and waits until its HTTP address web answers /readyz with 200. It
// returns the replica's log.
func startReplacement(t *testing.T, bin string, args []string, web string) *lockedBuffer {
	t.Helper()
	cmd := exec.Command(bin, args...)
	logs := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stopServe(cmd)
		if t.Failed() {
			t.Logf("replacement replica's log:\n%s", logs)
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, err := isReady(http.DefaultClient, "http://"+web)
		if ok {
			return logs
		}
		require.True(t, time.Now().Before(deadline), "the replacement replica never ready: %v\n%s", err, logs)
		time.Sleep(100 * time.Millisecond)
	}
}

// stopServe stops a serve process as an orchestrator does: SIGTERM (after
// SIGCONT, should a test have stopped it), and SIGKILL if it has not
// exited 10s later; it returns once the process exited.
func stopServe(c *exec.Cmd) {
	_ = c.Process.Signal(syscall.SIGCONT)
	_ = c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.Process.Kill()
		<-done
	}
}
