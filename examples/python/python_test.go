// Package python holds the test of the stdlib-only Python client
// (fencelock_client.py) against three `fencelock serve` processes.
package python

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

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

func TestPythonClient(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 not found, and CI is set")
		}
		t.Skip("python3 not found")
	}
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

	// A holder in Go makes the Python client queue.
	const name = "reports/daily"
	held := post(t, urls[1]+"/v1/sessions", "", map[string]any{"ttl_ms": 30000})
	sid, secret := held["session_id"].(string), held["session_secret"].(string)
	g := post(t, urls[1]+"/v1/locks/reports%2Fdaily/acquire", secret, map[string]any{"session_id": sid})
	require.Equal(t, true, g["granted"])

	outFile := filepath.Join(dir, "out.txt")
	pyCmd := exec.Command(py, "fencelock_client.py", urls[2], name, outFile)
	var stdout, stderr bytes.Buffer
	pyCmd.Stdout, pyCmd.Stderr = &stdout, &stderr
	require.NoError(t, pyCmd.Start())
	done := make(chan error, 1)
	go func() { done <- pyCmd.Wait() }()
	waitFor(t, "the Python client to queue", func() bool {
		l, err := get(urls[3] + "/v1/locks/reports%2Fdaily")
		return err == nil && l["waiters"] == float64(1)
	})
	_, err = os.Stat(outFile)
	require.True(t, os.IsNotExist(err), "the Python client wrote while another session held the lock")
	post(t, urls[1]+"/v1/locks/reports%2Fdaily/release", secret, map[string]any{"session_id": sid, "fencing_token": g["fencing_token"]})

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
	require.Equal(t, float64(1), res["queue_position"])
	written, err := os.ReadFile(outFile)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(written), res["fencing_token"].(string)+" "), string(written))
	require.Greater(t, len(res["fencing_token"].(string)), 0)
	// The client released and closed: the lock is free.
	l, err := get(urls[3] + "/v1/locks/reports%2Fdaily")
	require.NoError(t, err)
	require.Equal(t, false, l["held"], l)
}
