package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/httpapi"
)

// lockedBuffer is a log a process writes while the test reads it.
type lockedBuffer = fencelocktest.LockedBuffer

// startOne runs a one-replica group, `fencelock serve` with extra flags,
// and waits until it is ready.
func startOne(t *testing.T, extra ...string) (base string, cmd *exec.Cmd, logs *lockedBuffer) {
	t.Helper()
	addr := fencelocktest.FreePort(t)
	args := append([]string{"serve", "--id", "1", "--peers", "1=" + fencelocktest.FreePort(t), "--dir", filepath.Join(t.TempDir(), "data"),
		"--http", addr, "--log-level", "info"}, extra...)
	cmd = exec.Command(binary(t), args...)
	logs = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("serve log:\n%s", logs)
		}
	})
	base = "http://" + addr
	fencelocktest.WaitFor(t, "the replica to be ready", func() bool {
		ok, _ := isReady(http.DefaultClient, base)
		return ok
	})
	return base, cmd, logs
}

// The limits' defaults, as serve's flags give them.
func TestServeLimitDefaults(t *testing.T) {
	fs := newFlags("serve", "")
	var l limits
	l.register(fs)
	require.NoError(t, fs.Parse(nil))
	require.NoError(t, l.check())
	srv := l.server(http.NotFoundHandler(), nil, quietLog())
	require.Equal(t, 60*time.Second, srv.IdleTimeout)
	require.Equal(t, 64<<10, srv.MaxHeaderBytes)
	require.Equal(t, 10*time.Second, srv.ReadHeaderTimeout)
	require.Equal(t, 30*time.Second, l.body)
	require.Equal(t, 1024, l.maxStreams)
	for _, bad := range [][]string{{"--max-streams", "0"}, {"--idle-timeout", "0s"}, {"--body-timeout", "-1s"}, {"--max-header-bytes", "10"}} {
		fs := newFlags("serve", "")
		var l limits
		l.register(fs)
		require.NoError(t, fs.Parse(bad))
		require.Error(t, l.check(), "%v", bad)
	}
}

// Against a real serve process: calls on a session without its secret are
// refused; and slow and idle clients, with small limits so
// that the test is quick: an idle keep-alive connection is closed, a
// trickled body is refused (and creates nothing), headers over the default
// bound are refused, and the fifth stream with --max-streams 4 gets 429.
func TestServeSecurity(t *testing.T) {
	base, _, _ := startOne(t, "--idle-timeout", "2s", "--body-timeout", "2s", "--max-streams", "4")
	addr := strings.TrimPrefix(base, "http://")

	t.Run("hijack", func(t *testing.T) {
		// A real process refuses calls on a session without its secret,
		// and nothing changes.
		victim, other := session(t, base, 10000), session(t, base, 10000)
		r := do(t, "POST", lockPath(base, "h/x", "acquire"), map[string]any{"session_id": victim})
		require.Equal(t, true, r.Body["granted"], r.Raw)
		token := r.Str("fencing_token")
		before := withoutAges(do(t, "GET", lockPath(base, "h/x", ""), nil).Raw)
		otherSecret := secrets.Of(other)
		require.NotEmpty(t, otherSecret)
		for _, sec := range []string{"", "wrong", otherSecret} {
			for _, c := range []struct {
				method, path, body string
			}{
				{"POST", "/v1/sessions/" + victim + "/heartbeat", ""},
				{"DELETE", "/v1/sessions/" + victim, ""},
				{"POST", "/v1/locks/h%2Fx/release", `{"session_id":"` + victim + `","fencing_token":"` + token + `"}`},
				{"POST", "/v1/locks/h%2Fy/acquire", `{"session_id":"` + victim + `"}`},
			} {
				req, _ := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
				if sec != "" {
					req.Header.Set("Fencelock-Session-Secret", sec)
				}
				resp, err := hc.Do(req)
				require.NoError(t, err)
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, 403, resp.StatusCode, "%s %s with %q: %s", c.method, c.path, sec, b)
				require.Contains(t, string(b), `"forbidden"`)
				require.Equal(t, before, withoutAges(do(t, "GET", lockPath(base, "h/x", ""), nil).Raw))
				require.Equal(t, false, do(t, "GET", lockPath(base, "h/y", ""), nil).Body["held"])
			}
		}
		r = do(t, "POST", lockPath(base, "h/x", "release"), map[string]any{"session_id": victim, "fencing_token": token})
		require.Equal(t, 200, r.Status, r.Raw)
		for _, id := range []string{victim, other} {
			require.Equal(t, 204, do(t, "DELETE", base+"/v1/sessions/"+id, nil).Status)
		}
	})

	t.Run("idle", func(t *testing.T) {
		conn := sendRaw(t, addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(60*time.Second)))
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		require.False(t, resp.Close, "the server meant to close the connection anyway")
		idleFrom := time.Now()
		_, err = br.ReadByte() // blocks while the connection stays open
		idle := time.Since(idleFrom)
		require.ErrorIs(t, err, io.EOF, "after %v", idle)
		t.Logf("idle keep-alive connection closed after %v (--idle-timeout 2s)", idle)
		require.Greater(t, idle, 1500*time.Millisecond, "closed before the idle timeout")
		require.Less(t, idle, 20*time.Second)
	})

	t.Run("trickled body", func(t *testing.T) {
		conn := sendRaw(t, addr, "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{")
		sent := time.Now()
		stop := make(chan struct{})
		trickled := make(chan struct{})
		go func() {
			defer close(trickled)
			tick := time.NewTicker(100 * time.Millisecond) // the hostile client's pace
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := io.WriteString(conn, " "); err != nil {
						return
					}
				}
			}
		}()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(60*time.Second)))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		close(stop)
		<-trickled
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(sent)
		t.Logf("trickled body refused after %v (--body-timeout 2s): %d %s", took, resp.StatusCode, b)
		require.Equal(t, 408, resp.StatusCode, "%s", b)
		require.Contains(t, string(b), `"request_timeout"`)
		require.Greater(t, took, 1500*time.Millisecond)
		require.Less(t, took, 20*time.Second)
		r := do(t, "GET", base+"/v1/sessions", nil)
		require.Equal(t, []any{}, r.Body["sessions"], "the trickled request made a session: %s", r.Raw)
	})

	t.Run("header bytes", func(t *testing.T) {
		// Over the default 64 KiB (and the slack Go's server reads past it).
		for size, want := range map[int]int{32 << 10: 200, 80 << 10: 431} {
			req, _ := http.NewRequest("GET", base+"/healthz", nil)
			req.Header.Set("X-Big", strings.Repeat("b", size))
			resp, err := hc.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, want, resp.StatusCode, "a %d-byte header", size)
		}
	})

	t.Run("max streams", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for i := range 4 {
			events := watch(t, ctx, lockPath(base, fmt.Sprint("s/", i), "watch"))
			waitEvent(t, events, "state", func(e ev) bool { return e.Kind == "state" })
		}
		r := do(t, "GET", lockPath(base, "s/5", "watch"), nil)
		require.Equal(t, 429, r.Status, r.Raw)
		require.Equal(t, "too_many_streams", r.Str("code"), r.Raw)
		r = do(t, "GET", base+"/v1/elections/e/observe", nil)
		require.Equal(t, 429, r.Status, r.Raw)
		// Not a stream: still served.
		require.Equal(t, 200, do(t, "GET", lockPath(base, "s/5", ""), nil).Status)
	})
}

// SIGHUP rereads the tokens file; a bad file keeps the old tokens and says
// why.
func TestServeTokensReload(t *testing.T) {
	file := tempFile(t, "tokens", "old\n")
	base, cmd, logs := startOne(t, "--tokens-file", file)
	status := func(token string) int {
		req, _ := http.NewRequest("GET", base+"/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := hc.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, status("old"))
	require.Equal(t, 401, status("new"))

	require.NoError(t, os.WriteFile(file, []byte("# rotated\nnew read:* lock:jobs/\n"), 0o600))
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	fencelocktest.WaitFor(t, "the new token", func() bool { return status("new") == 200 })
	require.Equal(t, 401, status("old"))
	req, _ := http.NewRequest("POST", base+"/v1/locks/other%2Fx/revoke", nil)
	req.Header.Set("Authorization", "Bearer new")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 403, resp.StatusCode, "the reloaded rights are not in force")

	require.NoError(t, os.WriteFile(file, []byte("new\nbroken write:x\n"), 0o600))
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	fencelocktest.WaitFor(t, "the reload's refusal in the log", func() bool { return strings.Contains(logs.String(), "not reloaded") })
	require.Contains(t, logs.String(), "line 2")
	require.Equal(t, 200, status("new"), "a bad file replaced the tokens")
	require.Equal(t, 401, status("broken"))
	require.True(t, cmd.ProcessState == nil, "SIGHUP ended serve")
	require.NoError(t, cmd.Process.Signal(syscall.Signal(0)))
}

// readTokens names the file and the line of a mistake.
func TestReadTokens(t *testing.T) {
	f := tempFile(t, "t", "a lock:jobs/\nb lock\n")
	_, err := readTokens(f)
	require.ErrorIs(t, err, httpapi.ErrInvalidTokensFile)
	require.Contains(t, err.Error(), "line 2")
	require.Contains(t, err.Error(), f)
	_, err = readTokens(filepath.Join(filepath.Dir(f), "missing"))
	require.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// ages are the "how long ago" figures of a view: the reading replica's
// clock, not the group's state.
// An age is never a JSON object's first field, so its leading comma goes
// with it, whether a field follows or the object ends.
var ages = regexp.MustCompile(`,"(held_for|waited|leading_for)_ms":[0-9]+`)

func withoutAges(raw string) string { return ages.ReplaceAllString(raw, "") }

// sendRaw dials addr and writes req, bytes as a client would send them,
// whole or in part; the test's end closes the connection.
func sendRaw(t *testing.T, addr, req string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = io.WriteString(conn, req)
	require.NoError(t, err)
	return conn
}
