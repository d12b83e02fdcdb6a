package main

import (
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/stretchr/testify/require"
)

// fencelock status says which replicas answer and whether each group has a
// leader; with two of three replicas stopped it prints NO LEADER, marks the
// stopped ones unreachable and not answering, and exits non-zero.
func TestStatusNoLeader(t *testing.T) {
	p := startProcs(t, "--group", "billing=1,2,3")
	all := p.urls[1] + "," + p.urls[2] + "," + p.urls[3]
	// Every group elects its own leader: wait until replica 1 knows both.
	waitStatus(t, p.urls[1], func(r reply) bool {
		groups, _ := r.Body["groups"].([]any)
		for _, g := range groups {
			if g.(map[string]any)["leader_id"].(float64) == 0 {
				return false
			}
		}
		return len(groups) == 2
	})
	out, err := exec.Command(p.bin, "status", "--http", all).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NotContains(t, string(out), "NO LEADER")
	require.NotContains(t, string(out), "NOT ANSWERING")
	require.NotContains(t, string(out), "UNREACHABLE")
	for id := uint64(1); id <= 3; id++ {
		require.Contains(t, string(out), p.urls[id], "each replica answers at its URL: %s", out)
	}

	p.Kill(2)
	p.Kill(3)
	// Replica 1 notices: no leader, and neither peer heard from.
	waitStatus(t, p.urls[1], func(r reply) bool {
		un, _ := r.Body["unreachable"].([]any)
		return r.Body["leader_id"].(float64) == 0 && len(un) == 2
	})
	cmd := exec.Command(p.bin, "status", "--http", all)
	out, err = cmd.CombinedOutput()
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "status must exit non-zero without a leader: %v\n%s", err, out)
	require.NotZero(t, ee.ExitCode())
	s := string(out)
	require.Contains(t, s, "NO LEADER in (default), billing", s)
	require.Equal(t, 2, strings.Count(s, "NOT ANSWERING"), s)
	require.Equal(t, 2, strings.Count(s, "UNREACHABLE from 1"), s)
	for _, l := range strings.Split(s, "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "(default)" || f[0] == "billing") {
			require.Contains(t, l, "NO LEADER", s)
		}
	}

	// -o json exits non-zero too, for scripts.
	err = exec.Command(p.bin, "status", "--http", p.urls[1], "-o", "json").Run()
	require.True(t, errors.As(err, &ee), "%v", err)
}

// waitStatus polls base's GET /v1/status until ok says so (60 s at most).
func waitStatus(t *testing.T, base string, ok func(reply) bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := do(t, "GET", base+"/v1/status", nil)
		if ok(r) {
			return
		}
		require.True(t, time.Now().Before(deadline), "status never as expected: %s", r.Raw)
		time.Sleep(50 * time.Millisecond)
	}
}

// fencelock serve on a raft port in use fails with one "fencelock:" prefix
// and leaves --dir as it found it; the corrected retry on the same --dir
// serves.
func TestServeFailedStartThenRetry(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	dir := filepath.Join(t.TempDir(), "data")
	bin := binary(t)
	serve := func(raft, web string) *exec.Cmd {
		return exec.Command(bin, "serve", "--id", "1", "--peers", "1="+raft, "--dir", dir, "--http", web, "--log-level", "warn")
	}
	out, err := serve(busy.Addr().String(), fencelocktest.FreePort(t)).CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "in use by another process", "%s", out)
	require.NotContains(t, string(out), "fencelock: fencelock:", "%s", out)
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "the failed start left --dir behind")

	web := fencelocktest.FreePort(t)
	cmd := serve(fencelocktest.FreePort(t), web)
	log := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, err := isReady(http.DefaultClient, "http://"+web)
		if ok {
			break
		}
		require.True(t, time.Now().Before(deadline), "the retry never became ready: %v\n%s", err, log.String())
		time.Sleep(50 * time.Millisecond)
	}
}
