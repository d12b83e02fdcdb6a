package main

import (
	"context"
	"errors"
	"io"
	"net/http"
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

// startToStopFollower starts three replicas for a test that stops one of
// them, x: a follower, so that the group keeps its leader. X is x's URL, Y
// the other follower's.
func startToStopFollower(t *testing.T) (p *procs, x uint64, X, Y string) {
	t.Helper()
	p = startProcs(t)
	x, y := p.followers()
	return p, x, p.urls[x], p.urls[y]
}

// `fencelock lock NAME -- CMD` runs CMD only while the lock is held, and
// stops it when the lock is lost: here the replica its session lives on is
// stopped (SIGSTOP) past the TTL, and CMD is sent SIGTERM before the group
// grants the lock to the next in line.
func TestLockCommand(t *testing.T) {
	p, x, X, Y := startToStopFollower(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "cron/report"

	blocker, blockerToken := holdLock(t, Y, name)

	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	script := `echo "$FENCELOCK_TOKEN" > out.tmp && mv out.tmp out; trap 'echo term >> log; exit 7' TERM; while :; do sleep 0.05; done`
	cmd := exec.Command(p.bin, "lock", "--http", X, "--ttl", "2s", "--grace", "5s", name, "--", "sh", "-c", script)
	cmd.Dir = dir
	lock := fencelocktest.StartCmd(t, cmd)
	defer lock.Kill()

	// Queued behind the blocker: CMD has not run.
	fencelocktest.WaitFor(t, "the lock command to queue", func() bool {
		return do(t, "GET", lockPath(Y, name, ""), nil).Body["waiters"] == float64(1)
	})
	_, err := os.Stat(out)
	require.True(t, os.IsNotExist(err), "CMD ran while another session held the lock")

	r := do(t, "POST", lockPath(Y, name, "release"), map[string]any{"session_id": blocker, "fencing_token": blockerToken})
	require.Equal(t, 200, r.Status, r.Raw)
	var token string
	fencelocktest.WaitFor(t, "CMD to start", func() bool {
		b, err := os.ReadFile(out)
		token = strings.TrimSpace(string(b))
		return err == nil
	})
	r = do(t, "GET", lockPath(Y, name, ""), nil)
	require.Equal(t, token, r.Str("fencing_token"), "FENCELOCK_TOKEN is not the current grant's: %s", r.Raw)
	require.NotEqual(t, blockerToken, token)

	// The next in line, on another replica, is granted only after CMD was
	// told to stop.
	next := liveSession(t, Y)
	r = do(t, "POST", lockPath(Y, name, "acquire"), map[string]any{"session_id": next, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	events := watch(t, ctx, lockPath(Y, name, "watch"))

	stopped := time.Now()
	t.Logf("stopping replica %d at %s", x, stopped.Format("15:04:05.000"))
	p.Freeze(x)
	defer p.Thaw(x)

	var cmdEnd time.Time
	select {
	case <-lock.Exited():
		cmdEnd = time.Now()
		err := lock.Err()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "stderr: %s", lock.Stderr.String())
		require.Equal(t, 7, ee.ExitCode(), "the lock command exits with CMD's status; stderr: %s", lock.Stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("CMD still runs 30s after its replica stopped; stderr: %s", lock.Stderr.String())
	}
	log, _ := os.ReadFile(filepath.Join(dir, "log"))
	require.Equal(t, "term\n", string(log), "CMD got no SIGTERM")
	t.Logf("CMD stopped %v after its replica was stopped; stderr:\n%s", cmdEnd.Sub(stopped), lock.Stderr.String())

	e := waitEvent(t, events, "granted to the next", func(e ev) bool { return e.Kind == "granted" && e.Data["holder_session"] == next })
	granted := e.At
	t.Logf("next holder granted %v after the replica stopped", granted.Sub(stopped))
	require.True(t, cmdEnd.Before(granted), "the group granted the lock before CMD stopped")
	require.NotEqual(t, token, e.Data["fencing_token"])
}

// deadURL is a loopback URL nothing listens on: a replica that is down.
func deadURL(t *testing.T) string { return "http://" + fencelocktest.FreePort(t) }

// `fencelock lock` whose command ignores SIGTERM: the command's process
// group is SIGKILLed when the lease ends by the lock command's clock, before
// the group grants the lock to the next in line. Both moments are recorded:
// the kill (the command's end, seen as EOF on a FIFO that only it holds
// open), and the grant (the next holder's watch event); and right after the
// kill was seen, a linearizable read of the lock still shows the killed
// command's session as holder, so the kill came first causally, not just by
// the test's clocks.
func TestLockKillsBeforeNextGrant(t *testing.T) {
	p, x, X, Y := startToStopFollower(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const name = "cron/stubborn"

	dir := t.TempDir()
	fifo := filepath.Join(dir, "alive")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	// The command ignores SIGTERM (so does its sleep, which inherits the
	// disposition) and holds the FIFO open until it is killed.
	script := `trap '' TERM; exec 3>alive; echo "$FENCELOCK_TOKEN $FENCELOCK_FENCE" > out.tmp && mv out.tmp out; exec sleep 600`
	// The command knows X alone: once X hangs, no heartbeat of its session
	// is answered (with the others listed, one of them would adopt the
	// session: a hung replica is a dead one, TestLockCommandOutlivesAFrozenOwner).
	cmd := exec.Command(p.bin, "lock", "--http", X, "--ttl", "3s", name, "--", "sh", "-c", script)
	cmd.Dir = dir
	lock := fencelocktest.StartCmd(t, cmd)
	defer lock.Kill()
	alive, err := os.Open(fifo) // blocks until the command opens it
	require.NoError(t, err)
	defer alive.Close()
	dead := make(chan time.Time, 1)
	go func() {
		_, _ = io.Copy(io.Discard, alive) // EOF: every writer is gone
		dead <- time.Now()
	}()

	var got []string
	fencelocktest.WaitFor(t, "the command to start", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "out"))
		got = strings.Fields(string(b))
		return err == nil
	})
	require.Len(t, got, 2, "want FENCELOCK_TOKEN and FENCELOCK_FENCE: %q", got)
	r := do(t, "GET", lockPath(Y, name, ""), nil)
	holder := r.Str("holder_session")
	require.Equal(t, r.Str("fencing_token"), got[0], r.Raw)
	f, err := fencelock.ParseFence(got[1])
	require.NoError(t, err)
	require.Equal(t, got[0], strconv.FormatUint(f.Token, 10), "FENCELOCK_FENCE's token is FENCELOCK_TOKEN")
	st := do(t, "GET", Y+"/v1/status", nil)
	require.Equal(t, st.Str("group_id"), strconv.FormatUint(f.Group, 16), "FENCELOCK_FENCE's group is the group's")

	next := liveSession(t, Y)
	events := watch(t, ctx, lockPath(Y, name, "watch"))
	waitEvent(t, events, "state", func(e ev) bool { return e.Kind == "state" })
	r = do(t, "POST", lockPath(Y, name, "acquire"), map[string]any{"session_id": next, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)

	p.Freeze(x)
	defer p.Thaw(x)

	var killed time.Time
	select {
	case killed = <-dead:
	case <-time.After(60 * time.Second):
		t.Fatalf("the command still runs 60s after its session's replica stopped; stderr: %s", lock.Stderr.String())
	}
	// Still held by the killed command's session after the kill: the group
	// had not granted the lock to anyone else when the command died.
	r = do(t, "GET", lockPath(Y, name, ""), nil)
	require.Equal(t, holder, r.Str("holder_session"), "the lock passed on before the kill was seen: %s", r.Raw)

	e := waitEvent(t, events, "granted to the next", func(e ev) bool { return e.Kind == "granted" && e.Data["holder_session"] == next })
	t.Logf("command killed %v before the next holder's grant was seen", e.At.Sub(killed))
	require.True(t, killed.Before(e.At), "the next holder was granted before the command was killed")

	select {
	case <-lock.Exited():
		err := lock.Err()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "stderr: %s", lock.Stderr.String())
		require.Equal(t, 128+9, ee.ExitCode(), "the lock command exits with the command's status (SIGKILL); stderr: %s", lock.Stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the lock command did not exit after its command was killed; stderr: %s", lock.Stderr.String())
	}
	require.Contains(t, lock.Stderr.String(), "SIGTERM")
	require.Contains(t, lock.Stderr.String(), "SIGKILL")
	// Its one heartbeat in flight to the hung X has not failed yet when the
	// lease reaches its grace: the loss says that none was answered.
	require.Contains(t, lock.Stderr.String(), "no heartbeat was answered to extend it", "the loss says why")
}

// With a replica in --http that does not answer, every command fails over
// to the next one; and a `lock` waiting in a queue whose session's replica
// dies waits on through another replica, which adopts its session, and
// runs its command once granted.
func TestCommandsFailOver(t *testing.T) {
	p := startProcs(t)
	x, y := p.followers()
	X, Y := p.urls[x], p.urls[y]
	list := deadURL(t) + "," + X + "," + Y
	const name = "jobs/failover"

	blocker, blockerToken := holdLock(t, Y, name)

	for _, args := range [][]string{{"status"}, {"locks"}, {"sessions"}} {
		out, err := exec.Command(p.bin, append(args, "--http", list)...).CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
		if args[0] == "locks" {
			require.Contains(t, string(out), name)
		}
		if args[0] == "sessions" {
			require.Contains(t, string(out), blocker)
		}
	}
	// FENCELOCK_HTTP sets the list too.
	st := exec.Command(p.bin, "status")
	st.Env = append(os.Environ(), "FENCELOCK_HTTP="+list)
	out, err := st.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "leader")

	// A lock command queues through the list; its session lives on X.
	dir := t.TempDir()
	cmd := exec.Command(p.bin, "lock", "--http", list, "--ttl", "3s", name, "--", "sh", "-c", "touch ran")
	cmd.Dir = dir
	lock := fencelocktest.StartCmd(t, cmd)
	defer lock.Kill()
	fencelocktest.WaitFor(t, "the lock command to queue", func() bool {
		return do(t, "GET", lockPath(Y, name, ""), nil).Body["waiters"] == float64(1)
	})
	// Its session outlives X: the command's heartbeats fail over to Y,
	// which adopts the session, and its next poll queues the acquire again
	// there (the adoption withdrew the request X had queued).
	p.Kill(x)
	fencelocktest.WaitFor(t, "the lock command to queue again through another replica", func() bool {
		r := do(t, "GET", lockPath(Y, name, ""), nil)
		w, _ := r.Body["waiting"].([]any)
		if len(w) != 1 {
			return false
		}
		owner, _ := w[0].(map[string]any)["owner"].(float64)
		return owner == float64(y)
	})
	_, err = os.Stat(filepath.Join(dir, "ran"))
	require.True(t, os.IsNotExist(err), "the command ran although another session held the lock")
	select {
	case <-lock.Exited():
		err := lock.Err()
		t.Fatalf("the lock command ended when its session's replica died: %v; stderr: %s", err, lock.Stderr.String())
	default:
	}
	r := do(t, "POST", lockPath(Y, name, "release"), map[string]any{"session_id": blocker, "fencing_token": blockerToken})
	require.Equal(t, 200, r.Status, r.Raw)
	select {
	case <-lock.Exited():
		err := lock.Err()
		require.NoError(t, err, "stderr: %s", lock.Stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("the lock command was not granted the lock its session waited for; stderr: %s", lock.Stderr.String())
	}
	_, err = os.Stat(filepath.Join(dir, "ran"))
	require.NoError(t, err, "the command did not run; stderr: %s", lock.Stderr.String())
}

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

// A lock revoked at the group while its session lives on: the watch shows
// the grant ended, and `fencelock lock` sends CMD SIGTERM at once, not at
// the lease's end (the heartbeats go on being answered, so that would be
// never); lock exits with CMD's status.
func TestLockRevokedStopsCommand(t *testing.T) {
	dir := t.TempDir()
	tokens := tempFile(t, "tokens", "sekret\n")
	base, _, _ := startOne(t, "--tokens-file", tokens)
	const name = "jobs/revoked"
	script := `echo "$FENCELOCK_TOKEN" > out.tmp && mv out.tmp out; trap 'echo term >> log; exit 7' TERM; while :; do sleep 0.05; done`
	cmd := exec.Command(binary(t), "lock", "--http", base, "--token-file", tokens, "--ttl", "10s", name, "--", "sh", "-c", script)
	cmd.Dir = dir
	cmd.WaitDelay = 2 * time.Second // CMD may outlive a failed test: do not wait for it to close stderr
	lock := fencelocktest.StartCmd(t, cmd)
	// SIGTERM first: lock passes it to CMD's process group, which a
	// kill of lock alone would leave running.
	defer lock.Stop(5 * time.Second)
	fencelocktest.WaitFor(t, "CMD to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "out"))
		return err == nil
	})
	revoked := time.Now()
	req, _ := http.NewRequest("POST", lockPath(base, name, "revoke"), strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer sekret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	select {
	case <-lock.Exited():
		err := lock.Err()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v; stderr: %s", err, lock.Stderr.String())
		require.Equal(t, 7, ee.ExitCode(), "stderr: %s", lock.Stderr.String())
	case <-time.After(5 * time.Second):
		t.Fatalf("CMD still runs 5s after its lock was revoked (its lease is 6s and renewed); stderr: %s", lock.Stderr.String())
	}
	t.Logf("CMD stopped %v after the revoke; stderr:\n%s", time.Since(revoked), lock.Stderr.String())
	log, _ := os.ReadFile(filepath.Join(dir, "log"))
	require.Equal(t, "term\n", string(log), "CMD got no SIGTERM")
	require.Contains(t, lock.Stderr.String(), "the grant ended at the group")
}
