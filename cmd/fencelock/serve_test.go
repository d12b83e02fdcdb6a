package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/fencelocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// binary builds this command once per test run.
// tempFile writes content to a file called name in a new temporary
// directory, readable by its owner only (as a tokens file must be), and
// returns its path.
func tempFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func binary(t *testing.T) string { return fencelocktest.Binary(t) }

// procs is three serve processes (fencelocktest.StartServe) as this
// command's tests use them: bin is the binary they run, urls and args
// their HTTP base URLs and arguments, by ID.
type procs struct {
	*fencelocktest.Processes
	t    *testing.T
	bin  string
	urls map[uint64]string
	args map[uint64][]string
}

func startProcs(t *testing.T, extra ...string) *procs {
	t.Helper()
	return newProcs(t, fencelocktest.StartServeBinary(t, binary(t), extra...))
}

func newProcs(t *testing.T, ps *fencelocktest.Processes) *procs {
	p := &procs{Processes: ps, t: t, bin: ps.Bin(), urls: ps.URLs, args: map[uint64][]string{}}
	for id := range ps.URLs {
		p.args[id] = ps.Args(id)
	}
	return p
}

// leader returns the raft leader as replica id sees it.
func (p *procs) leader(id uint64) uint64 {
	r := do(p.t, "GET", p.urls[id]+"/v1/status", nil)
	return uint64(r.Body["leader_id"].(float64))
}

// followers returns the two replicas that do not lead the group, as
// replica 1 sees it: stopping one leaves the group its leader.
func (p *procs) followers() (x, y uint64) {
	leader := p.leader(1)
	return leader%3 + 1, (leader+1)%3 + 1
}

type reply = fencelocktest.Reply

var hc = &http.Client{Timeout: 30 * time.Second}

// isReady asks base's /readyz through c, as a load balancer would: true for
// 200; the error is the call's, nil for a replica that answered otherwise.
func isReady(c *http.Client, base string) (bool, error) {
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == 200, nil
}

// secrets holds each session's secret, as its creator keeps it.
var secrets fencelocktest.Secrets

// do makes a call as the creator of the session it names would: with that
// session's secret.
func do(t *testing.T, method, u string, body any) reply {
	t.Helper()
	return fencelocktest.Call(t, hc, method, u, body, secrets.Header(u, body))
}

func session(t *testing.T, base string, ttlMS int) string {
	t.Helper()
	return secrets.Session(t, hc, base, ttlMS)
}

// liveSession opens a session at base (a 10s TTL) and heartbeats it every
// second until the test ends.
func liveSession(t *testing.T, base string) string {
	t.Helper()
	s := session(t, base, 10000)
	stop := heartbeat(base, s, time.Second)
	t.Cleanup(func() { stop() })
	return s
}

// holdLock opens a liveSession at base that acquires name, which must be
// free, and returns it with its grant's fencing token.
func holdLock(t *testing.T, base, name string) (session, token string) {
	t.Helper()
	s := liveSession(t, base)
	r := do(t, "POST", lockPath(base, name, "acquire"), map[string]any{"session_id": s})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	return s, r.Str("fencing_token")
}

var lockPath = fencelocktest.LockURL

// ev is one event of a stream (watch), waited for with waitEvent.
type ev = fencelocktest.Event

var watch, waitEvent = fencelocktest.Events, fencelocktest.NextEvent

// heartbeat heartbeats session id at base every period until stop is
// called; stop returns when the last heartbeat was answered, and when.
func heartbeat(base, id string, period time.Duration) (stop func() time.Time) {
	quit, done := make(chan struct{}), make(chan time.Time, 1)
	go func() {
		var last time.Time
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			sent := time.Now()
			req, _ := http.NewRequest("POST", base+"/v1/sessions/"+id+"/heartbeat", nil)
			req.Header.Set("Fencelock-Session-Secret", secrets.For(req.URL.Path, nil))
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					last = sent
				}
			}
			select {
			case <-quit:
				done <- last
				return
			case <-t.C:
			}
		}
	}()
	return func() time.Time { close(quit); return <-done }
}

// TestServe drives every endpoint of three serve processes.
func TestServe(t *testing.T) {
	p := startProcs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	leader := p.leader(1)
	require.NotZero(t, leader)
	// Followers: every call below goes to a replica that is not the raft
	// leader, except where a session must live on the leader.
	f1, f2 := leader%3+1, (leader+1)%3+1
	A, B, L := p.urls[f1], p.urls[f2], p.urls[leader]
	t.Logf("raft leader %d; followers %d, %d", leader, f1, f2)

	s1, s2, s3 := session(t, A, 10000), session(t, B, 10000), session(t, L, 10000)
	stop1, stop2, stop3 := heartbeat(A, s1, time.Second), heartbeat(B, s2, time.Second), heartbeat(A, s3, time.Second)
	defer stop1()
	defer stop3()
	const name = "jobs/nightly"
	events := watch(t, ctx, lockPath(B, name, "watch"))
	waitEvent(t, events, "state", func(e ev) bool { return e.Kind == "state" })

	r := do(t, "POST", lockPath(A, name, "acquire"), map[string]any{"session_id": s1, "wait": false})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	t1 := r.Str("fencing_token")
	r = do(t, "POST", lockPath(B, name, "acquire"), map[string]any{"session_id": s2, "wait": false})
	require.Equal(t, map[string]any{"granted": false}, r.Body, r.Raw)
	r = do(t, "POST", lockPath(B, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = do(t, "POST", lockPath(A, name, "acquire"), map[string]any{"session_id": s3, "wait": true}) // forwarded to L
	require.Equal(t, float64(2), r.Body["queue_position"], r.Raw)
	r = do(t, "POST", lockPath(B, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], "queued twice: %s", r.Raw)
	r = do(t, "GET", lockPath(A, name, ""), nil)
	require.Equal(t, []any{s2, s3}, r.Body["queue"], r.Raw)

	r = do(t, "POST", lockPath(A, name, "release"), map[string]any{"session_id": s1, "fencing_token": "12"})
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, "stale_token", r.Str("code"))
	r = do(t, "POST", lockPath(A, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 200, r.Status, r.Raw)
	r = do(t, "POST", lockPath(A, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 409, r.Status, "a second release of the same grant: %s", r.Raw)

	// The watch saw, in order: s1 granted, released, s2 granted.
	waitEvent(t, events, "granted s1", func(e ev) bool { return e.Kind == "granted" && e.Data["holder_session"] == s1 })
	e := waitEvent(t, events, "released", func(e ev) bool { return e.Kind == "released" || e.Kind == "granted" })
	require.Equal(t, "released", e.Kind)
	require.Equal(t, s1, e.Data["previous_session"])
	e = waitEvent(t, events, "granted s2", func(e ev) bool { return e.Kind == "granted" })
	require.Equal(t, s2, e.Data["holder_session"])
	r = do(t, "POST", lockPath(B, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	require.Equal(t, e.Data["fencing_token"], r.Str("fencing_token"))
	require.Greater(t, len(r.Str("fencing_token")), 0)

	// s2 stops heartbeating: it expires, and then s3 is granted.
	hbStop := stop2()
	e = waitEvent(t, events, "s2's expiry", func(e ev) bool { return e.Kind == "expired" })
	require.Equal(t, s2, e.Data["previous_session"])
	e = waitEvent(t, events, "granted s3", func(e ev) bool { return e.Kind == "granted" })
	require.Equal(t, s3, e.Data["holder_session"])
	t.Logf("s2's lock passed on %v after its last heartbeat (TTL 10s)", time.Since(hbStop))
	r = do(t, "POST", B+"/v1/sessions/"+s2+"/heartbeat", nil)
	require.Equal(t, 404, r.Status, r.Raw)

	// Listings and probes.
	r = do(t, "GET", A+"/v1/locks?prefix=jobs/", nil)
	require.Len(t, r.Body["locks"], 1, r.Raw)
	r = do(t, "GET", A+"/v1/sessions?limit=1", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	r = do(t, "GET", A+"/metrics", nil)
	require.Equal(t, 200, r.Status)
	require.Contains(t, r.Raw, "fencelock_applied_index")
	require.Equal(t, 200, do(t, "GET", A+"/healthz", nil).Status)

	// Elections, on followers.
	el := A + "/v1/elections/orders%2Fprimary"
	obs := watch(t, ctx, el+"/observe")
	// The stream's first event is read after its headers: wait for it, so
	// that the campaign below is a change it reports, not its first state.
	waitEvent(t, obs, "state", func(e ev) bool { return e.Kind == "state" })
	r = do(t, "POST", el+"/campaign", map[string]any{"session_id": s1, "value": "a", "wait": true})
	require.Equal(t, true, r.Body["elected"], r.Raw)
	waitEvent(t, obs, "leader", func(e ev) bool { return e.Kind == "leader" })
	r = do(t, "POST", el+"/proclaim", map[string]any{"session_id": s1, "token": r.Str("token"), "value": "b"})
	require.Equal(t, 200, r.Status, r.Raw)
	waitEvent(t, obs, "proclaimed", func(e ev) bool { return e.Kind == "proclaimed" })
	r = do(t, "GET", el, nil)
	require.Equal(t, "b", r.Body["leader"].(map[string]any)["value"], r.Raw)

	// SIGKILL of the replica that serves a session whose client then stops
	// heartbeating: its lock passes on about a TTL after the last one.
	dead := session(t, L, 3000)
	r = do(t, "POST", lockPath(A, "k", "acquire"), map[string]any{"session_id": dead, "wait": false})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	waiter := liveSession(t, A)
	r = do(t, "POST", lockPath(A, "k", "acquire"), map[string]any{"session_id": waiter, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	kev := watch(t, ctx, lockPath(B, "k", "watch"))
	stopDead := heartbeat(L, dead, 500*time.Millisecond)
	time.Sleep(4 * time.Second) // longer than its TTL: heartbeats keep it
	r = do(t, "GET", lockPath(A, "k", ""), nil)
	require.Equal(t, dead, r.Str("holder_session"), r.Raw)
	killed := time.Now()
	p.Kill(leader)
	stopDead()
	// Another replica adopts the session at its next heartbeat, which
	// renews it; with no more heartbeats it expires a TTL later.
	r = do(t, "POST", A+"/v1/sessions/"+dead+"/heartbeat", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	e = waitEvent(t, kev, "granted to the waiter", func(e ev) bool { return e.Kind == "granted" && e.Data["holder_session"] == waiter })
	t.Logf("lock of the killed replica's session passed on %v after the SIGKILL (TTL 3s)", time.Since(killed))
	r = do(t, "POST", lockPath(A, "k", "acquire"), map[string]any{"session_id": waiter, "wait": true})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	r = do(t, "POST", A+"/v1/sessions/"+dead+"/heartbeat", nil)
	require.Equal(t, 404, r.Status, r.Raw)
}

// SIGTERM closes serve gracefully, with streams open and an acquire waiting
// in a queue: it exits 0 promptly.
func TestServeSIGTERM(t *testing.T) {
	p := startProcs(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := session(t, p.urls[2], 10000), session(t, p.urls[1], 10000)
	r := do(t, "POST", lockPath(p.urls[2], "x", "acquire"), map[string]any{"session_id": a})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	r = do(t, "POST", lockPath(p.urls[1], "x", "acquire"), map[string]any{"session_id": b, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	events := watch(t, ctx, lockPath(p.urls[1], "x", "watch"))

	cmd := p.Cmd(1)
	exited, _ := p.Exited(1)
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-exited:
		require.True(t, cmd.ProcessState.Success(), "serve exited badly on SIGTERM (%v):\n%s", cmd.ProcessState, p.Logs(1))
	case <-time.After(15 * time.Second):
		t.Fatalf("serve still running 15s after SIGTERM:\n%s", p.Logs(1))
	}
	t.Logf("serve exited %v after SIGTERM", time.Since(start))
	for range events { // the stream ended with the process
	}
}
