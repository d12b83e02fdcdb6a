package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/httpapi"
)

// heartbeatWithin sends one heartbeat for session id to base and returns
// its status, or the error of a call not answered within budget.
func heartbeatWithin(base, id string, budget time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/v1/sessions/"+id+"/heartbeat", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set(httpapi.SecretHeader, secrets.For(req.URL.Path, nil))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Three serve processes with --http-peers, as the README's walkthrough
// starts them; a session made on replica 1 holds a lock, and replica 1 is
// frozen (SIGSTOP). A client heartbeating only a healthy replica has every
// heartbeat answered within a heartbeat's budget (half the lease) for more
// than a TTL: that replica waits for the frozen owner a short bound only,
// then adopts the session. The lock keeps its token. Before, the replica
// forwarded to the frozen owner with no deadline, and no heartbeat was
// ever answered.
func TestRawHeartbeatsOutliveAFrozenOwner(t *testing.T) {
	p := fencelocktest.StartServe(t)
	const ttl = 10 * time.Second
	const name = "jobs/frozen-raw"
	id := session(t, p.URLs[1], int(ttl.Milliseconds()))
	r := do(t, "POST", lockPath(p.URLs[1], name, "acquire"), map[string]any{"session_id": id})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	token := r.Str("fencing_token")
	lease := time.Duration(r.Body["lease_ms"].(float64)) * time.Millisecond

	p.Freeze(1)
	defer p.Thaw(1)
	frozen := time.Now()
	var slowest time.Duration
	for time.Since(frozen) < ttl+ttl/5 {
		sent := time.Now()
		status, err := heartbeatWithin(p.URLs[2], id, lease/2)
		require.NoError(t, err, "a heartbeat to a healthy replica %v after the owner froze", sent.Sub(frozen).Round(100*time.Millisecond))
		require.Equal(t, 200, status)
		slowest = max(slowest, time.Since(sent))
		time.Sleep(time.Until(sent.Add(lease / 3))) // the Go client's period
	}
	t.Logf("the slowest heartbeat while the owner was frozen took %v (the forward waits %v)", slowest, ttl/20)
	r = do(t, "GET", lockPath(p.URLs[3], name, ""), nil)
	require.Equal(t, true, r.Body["held"], r.Raw)
	require.Equal(t, token, r.Str("fencing_token"), r.Raw)
	require.Equal(t, float64(2), r.Body["owner"], "replica 2 adopted the session: %s", r.Raw)

	p.Thaw(1)
	r = do(t, "POST", lockPath(p.URLs[2], name, "release"), map[string]any{"session_id": id, "fencing_token": token})
	require.Equal(t, 200, r.Status, r.Raw)
}

// `fencelock lock NAME -- CMD` with every replica in --http: the replica
// its session lives on is frozen (SIGSTOP), and CMD runs on, the lock held
// with the same token, for more than a TTL, through the two others. Before,
// the lock command lost the lock 6s into its 10s TTL and killed CMD (exit
// 143).
func TestLockCommandOutlivesAFrozenOwner(t *testing.T) {
	p := fencelocktest.StartServe(t)
	const name = "jobs/frozen-cli"
	const ttl = 10 * time.Second
	list := p.URLs[1] + "," + p.URLs[2] + "," + p.URLs[3]
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	cmd := exec.Command(p.Bin(), "lock", "--http", list, "--ttl", ttl.String(), name, "--",
		"sh", "-c", `echo "$FENCELOCK_TOKEN" > out.tmp && mv out.tmp out; while :; do sleep 0.05; done`)
	cmd.Dir = dir
	cmd.WaitDelay = 10 * time.Second // CMD, which holds stderr too, outlives a killed lock command
	lock := fencelocktest.StartCmd(t, cmd)
	// SIGTERM: the lock command stops CMD (its process group) and
	// releases the lock; SIGKILL only if it does not exit.
	defer lock.Stop(30 * time.Second)
	var token string
	fencelocktest.WaitFor(t, "CMD to start", func() bool {
		b, err := os.ReadFile(out)
		token = strings.TrimSpace(string(b))
		return err == nil
	})
	r := do(t, "GET", lockPath(p.URLs[2], name, ""), nil)
	require.Equal(t, token, r.Str("fencing_token"), r.Raw)
	owner := uint64(r.Body["owner"].(float64))

	p.Freeze(owner)
	defer p.Thaw(owner)
	frozen := time.Now()
	select {
	case <-lock.Exited():
		err := lock.Err()
		t.Fatalf("the lock command ended %v after its session's replica froze, two healthy replicas left: %v; stderr: %s",
			time.Since(frozen).Round(100*time.Millisecond), err, lock.Stderr.String())
	case <-time.After(ttl + ttl/5):
	}
	other := p.URLs[owner%3+1]
	r = do(t, "GET", lockPath(other, name, ""), nil)
	require.Equal(t, true, r.Body["held"], r.Raw)
	require.Equal(t, token, r.Str("fencing_token"), r.Raw)
	require.NotEqual(t, strconv.FormatUint(owner, 10), strconv.FormatFloat(r.Body["owner"].(float64), 'f', -1, 64),
		"the session still lives on the frozen replica: %s", r.Raw)
	p.Thaw(owner)
}
