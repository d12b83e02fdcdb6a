package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitFor polls cond (a file appearing, a lock's state) until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// `fencelock lock NAME -- CMD` runs CMD only while the lock is held, and
// stops it when the lock is lost: here the replica its session lives on is
// stopped (SIGSTOP) past the TTL, and CMD is sent SIGTERM before the group
// grants the lock to the next in line.
func TestLockCommand(t *testing.T) {
	p := startProcs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	leader := p.leader(1)
	x, y := leader%3+1, (leader+1)%3+1 // x is stopped: a follower, so the group keeps its leader
	X, Y := p.urls[x], p.urls[y]
	const name = "cron/report"

	blocker := session(t, Y, 10000)
	stopB := heartbeat(Y, blocker, time.Second)
	defer stopB()
	r := do(t, "POST", lockPath(Y, name, "acquire"), map[string]any{"session_id": blocker})
	require.Equal(t, true, r.body["granted"], r.raw)
	blockerToken := r.str("fencing_token")

	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script := `echo "$FENCELOCK_TOKEN" > out.tmp && mv out.tmp out; trap 'echo term >> log; exit 7' TERM; while :; do sleep 0.05; done`
	cmd := exec.Command(p.bin, "lock", "--http", X, "--ttl", "2s", "--grace", "5s", name, "--", "sh", "-c", script)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		<-exited
	}()

	// Queued behind the blocker: CMD has not run.
	waitFor(t, "the lock command to queue", func() bool {
		return do(t, "GET", lockPath(Y, name, ""), nil).body["waiters"] == float64(1)
	})
	_, err := os.Stat(out)
	require.True(t, os.IsNotExist(err), "CMD ran while another session held the lock")

	r = do(t, "POST", lockPath(Y, name, "release"), map[string]any{"session_id": blocker, "fencing_token": blockerToken})
	require.Equal(t, 200, r.status, r.raw)
	var token string
	waitFor(t, "CMD to start", func() bool {
		b, err := os.ReadFile(out)
		token = strings.TrimSpace(string(b))
		return err == nil
	})
	r = do(t, "GET", lockPath(Y, name, ""), nil)
	require.Equal(t, token, r.str("fencing_token"), "FENCELOCK_TOKEN is not the current grant's: %s", r.raw)
	require.NotEqual(t, blockerToken, token)

	// The next in line, on another replica, is granted only after CMD was
	// told to stop.
	next := session(t, Y, 10000)
	stopN := heartbeat(Y, next, time.Second)
	defer stopN()
	r = do(t, "POST", lockPath(Y, name, "acquire"), map[string]any{"session_id": next, "wait": true})
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
	events := watch(t, ctx, lockPath(Y, name, "watch"))

	stopped := time.Now()
	t.Logf("stopping replica %d at %s", x, stopped.Format("15:04:05.000"))
	require.NoError(t, p.cmds[x].Process.Signal(syscall.SIGSTOP))
	defer p.cmds[x].Process.Signal(syscall.SIGCONT)

	var cmdEnd time.Time
	select {
	case err := <-exited:
		cmdEnd = time.Now()
		exited <- err // for the deferred cleanup
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "stderr: %s", stderr.String())
		require.Equal(t, 7, ee.ExitCode(), "the lock command exits with CMD's status; stderr: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("CMD still runs 30s after its replica stopped; stderr: %s", stderr.String())
	}
	log, _ := os.ReadFile(filepath.Join(dir, "log"))
	require.Equal(t, "term\n", string(log), "CMD got no SIGTERM")
	t.Logf("CMD stopped %v after its replica was stopped; stderr:\n%s", cmdEnd.Sub(stopped), stderr.String())

	e := waitEvent(t, events, "granted to the next", func(e ev) bool { return e.kind == "granted" && e.data["holder_session"] == next })
	granted := e.at
	t.Logf("next holder granted %v after the replica stopped", granted.Sub(stopped))
	require.True(t, cmdEnd.Before(granted), "the group granted the lock before CMD stopped")
	require.NotEqual(t, token, e.data["fencing_token"])
}
