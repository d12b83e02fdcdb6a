// Package python holds the test of the stdlib-only Python client
// (fencelock_client.py) against three `fencelock serve` processes.
package python

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
)

func freePort(t *testing.T) string { return fencelocktest.FreePort(t) }

func post(t *testing.T, u, secret string, body any) map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequest("POST", u, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		req.Header.Set("Fencelock-Session-Secret", secret)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	require.Less(t, resp.StatusCode, 300, string(raw))
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return out
}

func get(u string) (map[string]any, error) {
	resp, err := http.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	err = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return out, err
}

// waitFor polls cond until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out waiting for %s", what)
		time.Sleep(50 * time.Millisecond)
	}
}

// python3 returns the interpreter, or skips the test where there is none
// (CI installs it and sets CI, which makes a missing one a failure).
func python3(t *testing.T) string {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 not found, and CI is set")
		}
		t.Skip("python3 not found")
	}
	return py
}

// Wrong addresses and missing arguments end the client with a one-line
// message and a non-zero status, never a traceback.
func TestPythonClientErrors(t *testing.T) {
	py := python3(t)
	dead := "http://" + freePort(t)
	for _, c := range []struct {
		args   []string
		status int
		says   string
	}{
		{[]string{"--http", dead, "jobs/x", "out"}, 1, dead},
		{[]string{"--http", dead + "," + "http://" + freePort(t), "jobs/x", "out"}, 1, "no replica answered"},
		{[]string{"--http", "127.0.0.1:7081", "jobs/x", "out"}, 2, "not an http:// or https:// URL"},
		{[]string{"jobs/x"}, 2, "usage:"},
		{nil, 2, "usage:"},
	} {
		cmd := exec.Command(py, append([]string{"fencelock_client.py"}, c.args...)...)
		cmd.Dir = t.TempDir()
		cmd.Args[1], _ = filepath.Abs("fencelock_client.py")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v", c.args)
		require.Equal(t, c.status, ee.ExitCode(), "%v: %s", c.args, stderr.String())
		require.Contains(t, stderr.String(), c.says, "%v", c.args)
		require.NotContains(t, stderr.String(), "Traceback", "%v", c.args)
	}
}

// startThree starts three `fencelock serve` processes and returns their
// API base URLs once each is ready.
func startThree(t *testing.T) map[int]string {
	dir := t.TempDir()
	bin := filepath.Join(dir, "fencelock")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/fencelock").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var peers []string
	urls := map[int]string{}
	httpAddr := map[int]string{}
	for id := 1; id <= 3; id++ {
		peers = append(peers, fmt.Sprintf("%d=%s", id, freePort(t)))
		httpAddr[id] = freePort(t)
		urls[id] = "http://" + httpAddr[id]
	}
	for id := 1; id <= 3; id++ {
		cmd := exec.Command(bin, "serve", "--id", fmt.Sprint(id), "--peers", strings.Join(peers, ","),
			"--dir", filepath.Join(dir, fmt.Sprint(id)), "--http", httpAddr[id], "--log-level", "warn")
		var logs bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logs, &logs
		require.NoError(t, cmd.Start())
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("replica %d:\n%s", id, logs.String())
			}
		})
	}
	for id := 1; id <= 3; id++ {
		waitFor(t, "readyz", func() bool { _, err := get(urls[id] + "/readyz"); return err == nil })
	}
	return urls
}

// holdLock opens a session at base (a 30s TTL) whose acquire of the lock
// at path ("/v1/locks/NAME") is granted at once, so that the Python client
// queues behind it; release releases it.
func holdLock(t *testing.T, base, path string) (release func()) {
	t.Helper()
	held := post(t, base+"/v1/sessions", "", map[string]any{"ttl_ms": 30000})
	sid, secret := held["session_id"].(string), held["session_secret"].(string)
	g := post(t, base+path+"/acquire", secret, map[string]any{"session_id": sid})
	require.Equal(t, true, g["granted"])
	return func() {
		post(t, base+path+"/release", secret, map[string]any{"session_id": sid, "fencing_token": g["fencing_token"]})
	}
}

// startQueued starts the Python client pyCmd and waits until the lock at
// lockURL counts it as its one waiter. finish waits (60s at the most) for
// the client to end well and returns the JSON result it printed.
func startQueued(t *testing.T, pyCmd *exec.Cmd, lockURL string) (finish func() map[string]any) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	pyCmd.Stdout, pyCmd.Stderr = &stdout, &stderr
	require.NoError(t, pyCmd.Start())
	done := make(chan error, 1)
	go func() { done <- pyCmd.Wait() }()
	waitFor(t, "the Python client to queue", func() bool {
		l, err := get(lockURL)
		return err == nil && l["waiters"] == float64(1)
	})
	return func() map[string]any {
		t.Helper()
		select {
		case err := <-done:
			require.NoError(t, err, "stderr: %s", stderr.String())
		case <-time.After(60 * time.Second):
			_ = pyCmd.Process.Kill()
			<-done
			t.Fatalf("the Python client did not finish; stderr: %s", stderr.String())
		}
		var res map[string]any
		require.NoError(t, json.Unmarshal(stdout.Bytes(), &res), stdout.String())
		return res
	}
}

func TestPythonClient(t *testing.T) {
	py := python3(t)
	urls := startThree(t)

	// A holder in Go makes the Python client queue.
	const name, lock = "reports/daily", "/v1/locks/reports%2Fdaily"
	release := holdLock(t, urls[1], lock)

	outFile := filepath.Join(t.TempDir(), "out.txt")
	var err error
	// The list's first replica is down: the client opens its session on
	// the next one.
	pyCmd := exec.Command(py, "fencelock_client.py", "--http", "http://"+freePort(t)+","+urls[2], name, outFile)
	finish := startQueued(t, pyCmd, urls[3]+lock)
	_, err = os.Stat(outFile)
	require.True(t, os.IsNotExist(err), "the Python client wrote while another session held the lock")
	release()

	res := finish()
	require.Equal(t, float64(1), res["queue_position"])
	written, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(written), res["fencing_token"].(string)+" "+res["fence"].(string)+" "), string(written))
	require.Greater(t, len(res["fencing_token"].(string)), 0)
	// The client released and closed: the lock is free.
	l, err := get(urls[3] + lock)
	require.NoError(t, err)
	require.Equal(t, false, l["held"], l)
}

// The endpoint the Python client waits through stops: its watch stream
// ends, and it asks again through the next endpoint of its list, where its
// request is found queued once (never twice), and is granted there.
func TestPythonClientFailsOver(t *testing.T) {
	py := python3(t)
	urls := startThree(t)
	const name, lock = "reports/failover", "/v1/locks/reports%2Ffailover"
	release := holdLock(t, urls[1], lock)

	// A front of replica 2 (a load balancer, say) is the first endpoint;
	// replica 2 itself the second. Sessions live on a replica, so the
	// client's session (created through the front, on replica 2) outlives
	// the front.
	target, err := url.Parse(urls[2])
	require.NoError(t, err)
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		FlushInterval: -1,
	})
	defer front.Close()

	outFile := filepath.Join(t.TempDir(), "out.txt")
	pyCmd := exec.Command(py, "fencelock_client.py", "--ttl", "3", "--http", front.URL+","+urls[2], name, outFile)
	finish := startQueued(t, pyCmd, urls[3]+lock)
	front.CloseClientConnections()
	front.Close()
	time.Sleep(3 * time.Second) // a TTL: heartbeats and the wait go on through replica 2
	l, err := get(urls[3] + lock)
	require.NoError(t, err)
	require.Equal(t, float64(1), l["waiters"], "queued once, still: %v", l)
	release()

	res := finish()
	require.Equal(t, float64(1), res["queue_position"])
	l, err = get(urls[3] + lock)
	require.NoError(t, err)
	require.Equal(t, false, l["held"], l)
}

// The client's deadline with a grant's lease_ms (test_fencelock_client.py,
// against a fake API): a grant's lease ends holding() early, a heartbeat
// sent after the grant lifts it, an answer without the field changes
// nothing, and a heartbeat sent before the grant's answer stays within it.
func TestPythonClientGrantLease(t *testing.T) {
	py := python3(t)
	cmd := exec.Command(py, "-m", "unittest", "-v", "test_fencelock_client")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // no __pycache__ in the tree
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Ran 4 tests", "%s", out)
}
