package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// shortGrants proxies base, but gives an acquire's answer that grants the
// lease_ms lease, as a replica does when the session's part in the lock's
// group is near its deadline; with failBeats, every heartbeat from that
// answer on is answered 503.
func shortGrants(t *testing.T, base string, lease int64, failBeats bool) string {
	u, err := url.Parse(base)
	require.NoError(t, err)
	var granted atomic.Bool
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if !strings.HasSuffix(resp.Request.URL.Path, "/acquire") || resp.StatusCode != 200 {
			return nil
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var m map[string]any
		if json.Unmarshal(body, &m) == nil && m["granted"] == true {
			m["lease_ms"] = lease
			body, _ = json.Marshal(m)
			granted.Store(true)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resp.ContentLength = int64(len(body))
		resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failBeats && granted.Load() && strings.HasSuffix(r.URL.Path, "/heartbeat") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(503)
			io.WriteString(w, `{"error":"unreachable","code":"unavailable"}`)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// `fencelock lock` granted a lock whose lease_ms is within --grace (or 0:
// it promises nothing) heartbeats at once and runs the command on the
// renewed deadline; it refuses, saying why, only when that heartbeat does
// not bring the deadline past the grace.
func TestLockShortGrantLease(t *testing.T) {
	base, _, _ := startOne(t)
	run := func(t *testing.T, lease int64, failBeats bool) (ran bool, stderr string, err error) {
		dir := t.TempDir()
		cmd := exec.Command(binary(t), "lock", "--http", shortGrants(t, base, lease, failBeats), "--ttl", "10s", "--grace", "2s",
			"jobs/short", "--", "sh", "-c", "echo ran > out")
		cmd.Dir = dir
		var buf bytes.Buffer
		cmd.Stderr = &buf
		cmd.WaitDelay = 2 * time.Second
		err = cmd.Run()
		_, statErr := os.Stat(filepath.Join(dir, "out"))
		return statErr == nil, buf.String(), err
	}
	for _, lease := range []int64{0, 1500} {
		t.Run("lease_ms="+strconv.FormatInt(lease, 10), func(t *testing.T) {
			ran, stderr, err := run(t, lease, false)
			require.NoError(t, err, "stderr: %s", stderr)
			require.True(t, ran, "the command did not run; stderr: %s", stderr)
		})
	}
	t.Run("heartbeats fail", func(t *testing.T) {
		ran, stderr, err := run(t, 1500, true)
		require.Error(t, err)
		require.False(t, ran, "the command ran with the lease within the grace")
		require.Contains(t, stderr, "not running the command")
		require.Contains(t, stderr, "within --grace 2s, and a heartbeat to renew it failed")
	})
}
