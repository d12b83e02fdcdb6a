package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
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

// procs is three `fencelock serve` processes on loopback.
type procs struct {
	t     *testing.T
	bin   string
	args  map[uint64][]string
	cmds  map[uint64]*exec.Cmd
	urls  map[uint64]string
	logs  map[uint64]*bytes.Buffer
	mu    sync.Mutex
	extra []string
}

func startProcs(t *testing.T, extra ...string) *procs {
	t.Helper()
	p := &procs{t: t, bin: binary(t), cmds: map[uint64]*exec.Cmd{}, logs: map[uint64]*bytes.Buffer{}, extra: extra}
	p.args, p.urls = fencelocktest.ServeArgs(t, extra...)
	for id := uint64(1); id <= 3; id++ {
		p.start(id)
	}
	t.Cleanup(p.stopAll)
	for id := uint64(1); id <= 3; id++ {
		p.waitReady(id)
	}
	return p
}

func (p *procs) start(id uint64) {
	cmd := exec.Command(p.bin, p.args[id]...)
	p.logs[id] = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = p.logs[id], p.logs[id]
	require.NoError(p.t, cmd.Start())
	p.cmds[id] = cmd
}

func (p *procs) kill(id uint64) {
	if c := p.cmds[id]; c != nil {
		_ = c.Process.Signal(syscall.SIGCONT)
		_ = c.Process.Kill()
		_ = c.Wait()
		delete(p.cmds, id)
	}
}

func (p *procs) stopAll() {
	for id, c := range p.cmds {
		stopServe(c)
		if p.t.Failed() {
			p.t.Logf("replica %d log:\n%s", id, p.logs[id])
		}
	}
}

// waitReady polls /readyz, as a load balancer would, until it says ready.
func (p *procs) waitReady(id uint64) {
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.urls[id] + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("replica %d never ready: %v\n%s", id, err, p.logs[id])
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// leader returns the raft leader as replica id sees it.
func (p *procs) leader(id uint64) uint64 {
	r := do(p.t, "GET", p.urls[id]+"/v1/status", nil)
	return uint64(r.body["leader_id"].(float64))
}

type reply struct {
	status int
	body   map[string]any
	raw    string
}

func (r reply) str(k string) string { s, _ := r.body[k].(string); return s }

var hc = &http.Client{Timeout: 30 * time.Second}

// secrets holds each session's secret, as its creator keeps it.
var secrets sync.Map // session ID → secret

// secretOf is the secret of the session a call names, in its body's
// session_id or its /v1/sessions/{id} path; "" for none.
func secretOf(u string, body any) string {
	id := ""
	if m, ok := body.(map[string]any); ok {
		id, _ = m["session_id"].(string)
	}
	if _, rest, ok := strings.Cut(u, "/v1/sessions/"); ok {
		id, _, _ = strings.Cut(rest, "/")
	}
	s, _ := secrets.Load(id)
	str, _ := s.(string)
	return str
}

// do makes a call as the creator of the session it names would: with that
// session's secret.
func do(t *testing.T, method, u string, body any) reply {
	t.Helper()
	var rd io.Reader
	if s, ok := body.(string); ok {
		rd = strings.NewReader(s)
	} else if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, u, rd)
	require.NoError(t, err)
	if sec := secretOf(u, body); sec != "" {
		req.Header.Set("Fencelock-Session-Secret", sec)
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func session(t *testing.T, base string, ttlMS int) string {
	t.Helper()
	r := do(t, "POST", base+"/v1/sessions", map[string]any{"ttl_ms": ttlMS})
	require.Equal(t, 201, r.status, r.raw)
	require.NotEmpty(t, r.str("session_secret"), r.raw)
	secrets.Store(r.str("session_id"), r.str("session_secret"))
	return r.str("session_id")
}

func lockPath(base, name, action string) string {
	u := base + "/v1/locks/" + url.PathEscape(name)
	if action != "" {
		u += "/" + action
	}
	return u
}

type ev struct {
	kind string
	data map[string]any
	at   time.Time // when it arrived
}

func watch(t *testing.T, ctx context.Context, u string) <-chan ev {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", u, nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	ch := make(chan ev, 1000)
	go func() {
		defer resp.Body.Close()
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		var e ev
		for sc.Scan() {
			switch l := sc.Text(); {
			case strings.HasPrefix(l, "event: "):
				e.kind = l[7:]
			case strings.HasPrefix(l, "data: "):
				_ = json.Unmarshal([]byte(l[6:]), &e.data)
			case l == "" && e.kind != "":
				e.at = time.Now()
				ch <- e
				e = ev{}
			}
		}
	}()
	return ch
}

func waitEvent(t *testing.T, ch <-chan ev, what string, ok func(ev) bool) ev {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, open := <-ch:
			require.True(t, open, "stream ended waiting for %s", what)
			if ok(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event", what)
		}
	}
}

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
			req.Header.Set("Fencelock-Session-Secret", secretOf(req.URL.Path, nil))
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
	waitEvent(t, events, "state", func(e ev) bool { return e.kind == "state" })

	r := do(t, "POST", lockPath(A, name, "acquire"), map[string]any{"session_id": s1, "wait": false})
	require.Equal(t, true, r.body["granted"], r.raw)
	t1 := r.str("fencing_token")
	r = do(t, "POST", lockPath(B, name, "acquire"), map[string]any{"session_id": s2, "wait": false})
	require.Equal(t, map[string]any{"granted": false}, r.body, r.raw)
	r = do(t, "POST", lockPath(B, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
	r = do(t, "POST", lockPath(A, name, "acquire"), map[string]any{"session_id": s3, "wait": true}) // forwarded to L
	require.Equal(t, float64(2), r.body["queue_position"], r.raw)
	r = do(t, "POST", lockPath(B, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.body["queue_position"], "queued twice: %s", r.raw)
	r = do(t, "GET", lockPath(A, name, ""), nil)
	require.Equal(t, []any{s2, s3}, r.body["queue"], r.raw)

	r = do(t, "POST", lockPath(A, name, "release"), map[string]any{"session_id": s1, "fencing_token": "12"})
	require.Equal(t, 409, r.status, r.raw)
	require.Equal(t, "stale_token", r.str("code"))
	r = do(t, "POST", lockPath(A, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 200, r.status, r.raw)
	r = do(t, "POST", lockPath(A, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 409, r.status, "a second release of the same grant: %s", r.raw)

	// The watch saw, in order: s1 granted, released, s2 granted.
	waitEvent(t, events, "granted s1", func(e ev) bool { return e.kind == "granted" && e.data["holder_session"] == s1 })
	e := waitEvent(t, events, "released", func(e ev) bool { return e.kind == "released" || e.kind == "granted" })
	require.Equal(t, "released", e.kind)
	require.Equal(t, s1, e.data["previous_session"])
	e = waitEvent(t, events, "granted s2", func(e ev) bool { return e.kind == "granted" })
	require.Equal(t, s2, e.data["holder_session"])
	r = do(t, "POST", lockPath(B, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, true, r.body["granted"], r.raw)
	require.Equal(t, e.data["fencing_token"], r.str("fencing_token"))
	require.Greater(t, len(r.str("fencing_token")), 0)

	// s2 stops heartbeating: it expires, and then s3 is granted.
	hbStop := stop2()
	e = waitEvent(t, events, "s2's expiry", func(e ev) bool { return e.kind == "expired" })
	require.Equal(t, s2, e.data["previous_session"])
	e = waitEvent(t, events, "granted s3", func(e ev) bool { return e.kind == "granted" })
	require.Equal(t, s3, e.data["holder_session"])
	t.Logf("s2's lock passed on %v after its last heartbeat (TTL 10s)", time.Since(hbStop))
	r = do(t, "POST", B+"/v1/sessions/"+s2+"/heartbeat", nil)
	require.Equal(t, 404, r.status, r.raw)

	// Listings and probes.
	r = do(t, "GET", A+"/v1/locks?prefix=jobs/", nil)
	require.Len(t, r.body["locks"], 1, r.raw)
	r = do(t, "GET", A+"/v1/sessions?limit=1", nil)
	require.Equal(t, 200, r.status, r.raw)
	r = do(t, "GET", A+"/metrics", nil)
	require.Equal(t, 200, r.status)
	require.Contains(t, r.raw, "fencelock_applied_index")
	require.Equal(t, 200, do(t, "GET", A+"/healthz", nil).status)

	// Elections, on followers.
	el := A + "/v1/elections/orders%2Fprimary"
	obs := watch(t, ctx, el+"/observe")
	// The stream's first event is read after its headers: wait for it, so
	// that the campaign below is a change it reports, not its first state.
	waitEvent(t, obs, "state", func(e ev) bool { return e.kind == "state" })
	r = do(t, "POST", el+"/campaign", map[string]any{"session_id": s1, "value": "a", "wait": true})
	require.Equal(t, true, r.body["elected"], r.raw)
	waitEvent(t, obs, "leader", func(e ev) bool { return e.kind == "leader" })
	r = do(t, "POST", el+"/proclaim", map[string]any{"session_id": s1, "token": r.str("token"), "value": "b"})
	require.Equal(t, 200, r.status, r.raw)
	waitEvent(t, obs, "proclaimed", func(e ev) bool { return e.kind == "proclaimed" })
	r = do(t, "GET", el, nil)
	require.Equal(t, "b", r.body["leader"].(map[string]any)["value"], r.raw)

	// SIGKILL of the replica that serves a session whose client then stops
	// heartbeating: its lock passes on about a TTL after the last one.
	dead := session(t, L, 3000)
	r = do(t, "POST", lockPath(A, "k", "acquire"), map[string]any{"session_id": dead, "wait": false})
	require.Equal(t, true, r.body["granted"], r.raw)
	waiter := session(t, A, 10000)
	stopW := heartbeat(A, waiter, time.Second)
	defer stopW()
	r = do(t, "POST", lockPath(A, "k", "acquire"), map[string]any{"session_id": waiter, "wait": true})
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
	kev := watch(t, ctx, lockPath(B, "k", "watch"))
	stopDead := heartbeat(L, dead, 500*time.Millisecond)
	time.Sleep(4 * time.Second) // longer than its TTL: heartbeats keep it
	r = do(t, "GET", lockPath(A, "k", ""), nil)
	require.Equal(t, dead, r.str("holder_session"), r.raw)
	killed := time.Now()
	p.kill(leader)
	stopDead()
	// Another replica adopts the session at its next heartbeat, which
	// renews it; with no more heartbeats it expires a TTL later.
	r = do(t, "POST", A+"/v1/sessions/"+dead+"/heartbeat", nil)
	require.Equal(t, 200, r.status, r.raw)
	e = waitEvent(t, kev, "granted to the waiter", func(e ev) bool { return e.kind == "granted" && e.data["holder_session"] == waiter })
	t.Logf("lock of the killed replica's session passed on %v after the SIGKILL (TTL 3s)", time.Since(killed))
	r = do(t, "POST", lockPath(A, "k", "acquire"), map[string]any{"session_id": waiter, "wait": true})
	require.Equal(t, true, r.body["granted"], r.raw)
	r = do(t, "POST", A+"/v1/sessions/"+dead+"/heartbeat", nil)
	require.Equal(t, 404, r.status, r.raw)
}
