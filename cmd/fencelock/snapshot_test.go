package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/httpapi"
)

// TestSnapshotSaveAndRestore is docs/operations.md's disaster recovery with
// the shipped commands: `snapshot save` from a running deployment (an admin
// token; a reader's is refused), the deployment lost, `snapshot restore`
// into three new Dirs with new addresses, `serve` on each: the lock is held
// by its session with its token, and the next grant's token is above the
// backup's last one. A damaged file is refused and leaves the Dir absent.
func TestSnapshotSaveAndRestore(t *testing.T) {
	dir := t.TempDir()
	tokens, readerToken := tempFile(t, "tokens", "ops\nreader read:*\n"), tempFile(t, "reader", "reader\n")
	p := startProcs(t, "--tokens-file", tokens)
	all := strings.Join([]string{p.urls[1], p.urls[2], p.urls[3]}, ",")

	s := callAs(t, "ops", "POST", p.urls[1]+"/v1/sessions", map[string]any{"ttl_ms": 30000}, nil)
	require.Equal(t, 201, s.Status, s.Raw)
	sid, secret := s.Str("session_id"), s.Str("session_secret")
	r := callAs(t, "ops", "POST", lockPath(p.urls[1], "jobs/nightly", "acquire"), map[string]any{"session_id": sid, "wait": false},
		map[string]string{httpapi.SecretHeader: secret})
	require.Equal(t, 200, r.Status, r.Raw)
	token := r.Str("fencing_token")
	require.NotEmpty(t, token, r.Raw)

	file := filepath.Join(dir, "backup.flb")
	out, err := exec.Command(p.bin, "snapshot", "save", "--http", all, "--token-file", readerToken, file).CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "admin")
	_, err = os.Stat(file)
	require.True(t, os.IsNotExist(err))
	out, err = exec.Command(p.bin, "snapshot", "save", "--http", all, "--token-file", tokens, file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "(default)")
	out, err = exec.Command(p.bin, "snapshot", "info", file, "-o", "json").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"RestoreEpoch":1`, "a restore of the file starts epoch 1")
	// The old deployment grants on after the backup, up to the disaster
	// (more entries than the restored deployment writes before its first
	// grant, so that a log merely continuing from the backup falls short).
	var lastOld string
	for i := range 30 {
		r = callAs(t, "ops", "POST", lockPath(p.urls[1], fmt.Sprintf("jobs/after-%d", i), "acquire"), map[string]any{"session_id": sid, "wait": false},
			map[string]string{httpapi.SecretHeader: secret})
		require.Equal(t, 200, r.Status, r.Raw)
		lastOld = r.Str("fencing_token")
	}
	p.StopAll() // the disaster

	// A damaged file is refused, and the Dir is left absent.
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	bad := filepath.Join(dir, "bad.flb")
	require.NoError(t, os.WriteFile(bad, data[:len(data)-100], 0o600))
	out, err = exec.Command(p.bin, "snapshot", "restore", bad, "--dir", filepath.Join(dir, "x"), "--id", "1",
		"--peers", "1=127.0.0.1:1").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "invalid backup file")
	_, err = os.Stat(filepath.Join(dir, "x"))
	require.True(t, os.IsNotExist(err))

	// The new deployment: new addresses, new Dirs, each seeded first.
	args, urls := map[uint64][]string{}, map[uint64]string{}
	var peers, httpPeers []string
	httpAddrs := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		httpAddrs[id] = fencelocktest.FreePort(t)
		urls[id] = "http://" + httpAddrs[id]
		peers = append(peers, fmt.Sprintf("%d=%s", id, fencelocktest.FreePort(t)))
		httpPeers = append(httpPeers, fmt.Sprintf("%d=%s", id, urls[id]))
	}
	newDir := t.TempDir()
	for id := uint64(1); id <= 3; id++ {
		d := filepath.Join(newDir, fmt.Sprint(id))
		out, err := exec.Command(p.bin, "snapshot", "restore", file, "--dir", d, "--id", fmt.Sprint(id),
			"--peers", strings.Join(peers, ",")).CombinedOutput()
		require.NoError(t, err, "%s", out)
		args[id] = []string{"serve", "--id", fmt.Sprint(id), "--peers", strings.Join(peers, ","),
			"--http-peers", strings.Join(httpPeers, ","), "--dir", d, "--http", httpAddrs[id], "--log-level", "warn",
			"--tokens-file", tokens}
	}
	q := newProcs(t, fencelocktest.StartServeArgs(t, p.bin, args, urls))
	r = callAs(t, "ops", "GET", lockPath(q.urls[2], "jobs/nightly", ""), nil, nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, token, r.Str("fencing_token"), r.Raw)
	require.Equal(t, sid, r.Str("holder_session"), r.Raw)

	// The HTTP session goes on: a heartbeat with its secret renews it on
	// the new deployment.
	hb := callAs(t, "ops", "POST", q.urls[1]+"/v1/sessions/"+sid+"/heartbeat", nil, map[string]string{httpapi.SecretHeader: secret})
	require.Equal(t, 200, hb.Status, hb.Raw)
	s2 := callAs(t, "ops", "POST", q.urls[3]+"/v1/sessions", map[string]any{"ttl_ms": 30000}, nil)
	require.Equal(t, 201, s2.Status, s2.Raw)
	r = callAs(t, "ops", "POST", lockPath(q.urls[3], "jobs/other", "acquire"), map[string]any{"session_id": s2.Str("session_id"), "wait": false},
		map[string]string{httpapi.SecretHeader: s2.Str("session_secret")})
	require.Equal(t, 200, r.Status, r.Raw)
	require.NotEmpty(t, r.Str("fencing_token"), r.Raw)
	var oldTok, newTok uint64
	fmt.Sscan(lastOld, &oldTok)
	fmt.Sscan(r.Str("fencing_token"), &newTok)
	require.Greater(t, newTok, oldTok, "the restored deployment's first grant is above the old deployment's last, granted after the backup")
}
