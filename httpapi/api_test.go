package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
	"github.com/fencelock/fencelock/transport"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// group is three replicas in this process, each serving the API.
type group struct {
	net   *transport.Network // the replicas' network: a joining replica takes net.Addr(id)
	nodes map[uint64]*fencelock.Node
	apis  map[uint64]*httpapi.Server
	urls  map[uint64]string
	srvs  map[uint64]*httptest.Server
}

func newGroup(t *testing.T, forward bool, opts ...httpapi.Option) *group {
	t.Helper()
	return newGroupWith(t, nil, forward, opts...)
}

// newGroupWith is newGroup with tune applied to each replica's Config.
func newGroupWith(t *testing.T, tune func(*fencelock.Config), forward bool, opts ...httpapi.Option) *group {
	t.Helper()
	net := transport.NewNetwork(3)
	members := map[uint64]string{1: net.Addr(1), 2: net.Addr(2), 3: net.Addr(3)}
	g := &group{net: net, nodes: map[uint64]*fencelock.Node{}, apis: map[uint64]*httpapi.Server{}, urls: map[uint64]string{}}
	servers := map[uint64]*httptest.Server{}
	for id := uint64(1); id <= 3; id++ {
		servers[id] = httptest.NewUnstartedServer(nil)
		g.urls[id] = "http://" + servers[id].Listener.Addr().String()
	}
	dir := t.TempDir()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for id := uint64(1); id <= 3; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := fencelock.Config{ReplicaID: id, Members: members,
				Dir: filepath.Join(dir, fmt.Sprint(id)), Transport: net, Logger: quiet}
			if tune != nil {
				tune(&cfg)
			}
			n, err := fencelock.Start(context.Background(), cfg)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			g.nodes[id] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for id := uint64(1); id <= 3; id++ {
		o := append([]httpapi.Option{httpapi.WithLogger(quiet)}, opts...)
		if forward {
			o = append(o, httpapi.WithPeers(g.urls))
		}
		g.apis[id] = httpapi.New(g.nodes[id], o...)
		// Every response of every test's calls is checked against openapi.yaml.
		servers[id].Config.Handler = httpapi.ValidateResponses(t, g.apis[id])
		servers[id].Start()
	}
	g.srvs = servers
	t.Cleanup(func() {
		for id := uint64(1); id <= 3; id++ {
			g.apis[id].Close()
			servers[id].Close()
			g.nodes[id].Close()
		}
	})
	return g
}

type reply struct {
	status int
	body   map[string]any
	raw    string
}

func (r reply) str(k string) string { s, _ := r.body[k].(string); return s }

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

// call makes a call as the creator of the session it names would: with
// that session's secret (callWith sends exactly the headers it is given).
func call(t *testing.T, method, u string, body any) reply {
	t.Helper()
	var hdr map[string]string
	if sec := secretOf(u, body); sec != "" {
		hdr = map[string]string{httpapi.SecretHeader: sec}
	}
	return callWith(t, method, u, body, hdr)
}

func callWith(t *testing.T, method, u string, body any, hdr map[string]string) reply {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, u, rd)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

func newSession(t *testing.T, base string, ttlMS int) string {
	t.Helper()
	r := call(t, "POST", base+"/v1/sessions", map[string]any{"ttl_ms": ttlMS})
	require.Equal(t, 201, r.status, r.raw)
	require.NotEmpty(t, r.str("session_id"))
	require.NotEmpty(t, r.str("session_secret"), r.raw)
	secrets.Store(r.str("session_id"), r.str("session_secret"))
	return r.str("session_id")
}

func lockURL(base, name, action string) string {
	u := base + "/v1/locks/" + url.PathEscape(name)
	if action != "" {
		u += "/" + action
	}
	return u
}

// event is one SSE event.
type event struct {
	kind string
	data map[string]any
}

// sse reads the events of a stream into a channel until ctx ends.
func sse(t *testing.T, ctx context.Context, u string) <-chan event {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	ch := make(chan event, 100)
	go func() {
		defer resp.Body.Close()
		defer close(ch)
		sc := bufio.NewScanner(resp.Body)
		var ev event
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev.kind = line[7:]
			case strings.HasPrefix(line, "data: "):
				_ = json.Unmarshal([]byte(line[6:]), &ev.data)
			case line == "" && ev.kind != "":
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
				ev = event{}
			}
		}
	}()
	return ch
}

// nextEvent waits for an event satisfying ok, skipping others.
func nextEvent(t *testing.T, ch <-chan event, what string, ok func(event) bool) event {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatalf("stream ended waiting for %s", what)
			}
			if ok(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event", what)
		}
	}
}

func TestLockFlow(t *testing.T) {
	g := newGroup(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b, c := g.urls[1], g.urls[2], g.urls[3]
	s1, s2, s3 := newSession(t, a, 10000), newSession(t, b, 10000), newSession(t, c, 10000)
	const name = "jobs/reindex"
	events := sse(t, ctx, lockURL(b, name, "watch"))
	nextEvent(t, events, "state", func(e event) bool { return e.kind == "state" })

	r := call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s1, "wait": false})
	require.Equal(t, 200, r.status, r.raw)
	require.Equal(t, true, r.body["granted"])
	t1 := r.str("fencing_token")
	require.NotEmpty(t, t1)
	nextEvent(t, events, "granted s1", func(e event) bool { return e.kind == "granted" && e.data["holder_session"] == s1 })

	// Same session, same lock: its current state, nothing queued.
	r = call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s1, "wait": true})
	require.Equal(t, true, r.body["granted"], r.raw)
	require.Equal(t, t1, r.str("fencing_token"))

	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": false})
	require.Equal(t, 200, r.status, r.raw)
	require.Equal(t, map[string]any{"granted": false}, r.body)

	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.body["queue_position"], "re-acquire queued twice: %s", r.raw)
	// s3's acquire goes to replica a, which forwards it to c, s3's owner.
	r = call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s3, "wait": true})
	require.Equal(t, float64(2), r.body["queue_position"], r.raw)

	r = call(t, "GET", lockURL(c, name, ""), nil)
	require.Equal(t, s1, r.str("holder_session"), r.raw)
	require.Equal(t, []any{s2, s3}, r.body["queue"])
	require.Equal(t, float64(2), r.body["waiters"])

	// A wrong token changes nothing.
	r = call(t, "POST", lockURL(a, name, "release"), map[string]any{"session_id": s1, "fencing_token": "1"})
	require.Equal(t, 409, r.status, r.raw)
	require.Equal(t, "stale_token", r.str("code"))
	r = call(t, "POST", lockURL(a, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 200, r.status, r.raw)
	ev := nextEvent(t, events, "granted s2", func(e event) bool { return e.kind == "granted" })
	require.Equal(t, s2, ev.data["holder_session"])
	// The old token is stale now.
	r = call(t, "POST", lockURL(a, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 409, r.status, r.raw)

	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, true, r.body["granted"], r.raw)
	t2 := r.str("fencing_token")
	require.Equal(t, ev.data["fencing_token"], t2)
	require.Greater(t, len(t2), 0)

	// Deleting s2 passes the lock to s3.
	r = call(t, "DELETE", b+"/v1/sessions/"+s2, nil)
	require.Equal(t, 204, r.status, r.raw)
	ev = nextEvent(t, events, "granted s3", func(e event) bool { return e.kind == "granted" })
	require.Equal(t, s3, ev.data["holder_session"])
	r = call(t, "POST", b+"/v1/sessions/"+s2+"/heartbeat", nil)
	require.Equal(t, 404, r.status, r.raw)

	r = call(t, "GET", a+"/v1/locks?prefix=jobs/", nil)
	require.Equal(t, 200, r.status, r.raw)
	require.Len(t, r.body["locks"], 1)
	r = call(t, "GET", a+"/v1/sessions?limit=1", nil)
	require.Equal(t, 200, r.status, r.raw)
	require.Equal(t, true, r.body["more"], r.raw)
}

// A session whose client stops heartbeating expires and loses its lock, and
// the queue's head is granted after the expiry.
func TestHeartbeatExpiry(t *testing.T) {
	g := newGroup(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := g.urls[1], g.urls[2]
	dead := newSession(t, a, 2000)
	r := call(t, "POST", a+"/v1/sessions/"+dead+"/heartbeat", nil)
	require.Equal(t, 200, r.status, r.raw)
	live := newSession(t, b, 10000)
	events := sse(t, ctx, lockURL(b, "x", "watch"))
	r = call(t, "POST", lockURL(a, "x", "acquire"), map[string]any{"session_id": dead, "wait": true})
	require.Equal(t, true, r.body["granted"], r.raw)
	// Heartbeats keep it for 3 TTLs. The live client heartbeats too: its
	// replica would give it up 8s after its last renewal, about when the
	// dead one's lock passes on.
	start := time.Now()
	for time.Since(start) < 6*time.Second {
		r = call(t, "POST", a+"/v1/sessions/"+dead+"/heartbeat", nil)
		require.Equal(t, 200, r.status, r.raw)
		require.Equal(t, float64(2000), r.body["timeout_ms"])
		r = call(t, "POST", b+"/v1/sessions/"+live+"/heartbeat", nil)
		require.Equal(t, 200, r.status, r.raw)
		time.Sleep(250 * time.Millisecond) // the client's heartbeat period, not synchronisation
	}
	last := time.Now()
	r = call(t, "POST", lockURL(b, "x", "acquire"), map[string]any{"session_id": live, "wait": true})
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
	nextEvent(t, events, "expired", func(e event) bool { return e.kind == "expired" && e.data["previous_session"] == dead })
	ev := nextEvent(t, events, "granted", func(e event) bool { return e.kind == "granted" })
	require.Equal(t, live, ev.data["holder_session"])
	// The expiry came before the grant, as the events show; how soon after
	// the last heartbeat is the benchmarks' business.
	t.Logf("lock passed on %v after the last heartbeat", time.Since(last))
	r = call(t, "POST", a+"/v1/sessions/"+dead+"/heartbeat", nil)
	require.Equal(t, 404, r.status, r.raw)
}

func TestBadInput(t *testing.T) {
	g := newGroup(t, false, httpapi.WithMaxBody(8192))
	a, b := g.urls[1], g.urls[2]
	s := newSession(t, a, 10000)
	long := strings.Repeat("n", fencelock.MaxNameLen+1)
	cases := []struct {
		method, url string
		body        any
		status      int
		code        string
	}{
		{"POST", lockURL(a, "x", "acquire"), `{"session_id": "` + s + `", `, 400, "bad_request"},
		{"POST", lockURL(a, "x", "acquire"), `{"session_id": "` + s + `", "wiat": true}`, 400, "bad_request"},
		{"POST", lockURL(a, "x", "acquire"), `{"session_id": "` + s + `"} {}`, 400, "bad_request"},
		{"POST", lockURL(a, "x", "acquire"), `{"session_id": "-1"}`, 400, "bad_request"},
		{"POST", lockURL(a, "x", "acquire"), `{"wait": true}`, 400, "bad_request"},
		{"POST", lockURL(a, "x", "acquire"), `{"session_id": "` + s + `", "wait": "` + strings.Repeat("x", 9000) + `"}`, 413, "too_large"},
		{"POST", lockURL(a, long, "acquire"), map[string]any{"session_id": s}, 400, "invalid_name"},
		{"POST", a + "/v1/locks/a%00b/acquire", map[string]any{"session_id": s}, 400, "invalid_name"},
		{"GET", a + "/v1/locks/a%00b", nil, 400, "invalid_name"},
		{"POST", lockURL(a, "x", "acquire"), map[string]any{"session_id": "12345"}, 404, "not_found"},
		{"POST", a + "/v1/sessions/12345/heartbeat", nil, 404, "not_found"},
		{"POST", a + "/v1/sessions/abc/heartbeat", nil, 400, "bad_request"},
		{"POST", a + "/v1/sessions", `{"ttl_ms": 1}`, 400, "invalid_ttl"},
		{"POST", a + "/v1/sessions", `{"ttl_ms": "ten"}`, 400, "bad_request"},
		{"GET", lockURL(a, "x", "acquire"), nil, 405, "method_not_allowed"},
		{"DELETE", a + "/v1/sessions", nil, 405, "method_not_allowed"},
		{"GET", a + "/v1/nothing", nil, 404, "not_found"},
		{"POST", a + "/v1/elections/e/campaign", map[string]any{"session_id": s, "value": strings.Repeat("v", 4097)}, 400, "value_too_large"},
		{"GET", a + "/v1/locks?limit=0", nil, 400, "bad_request"},
		// A session of replica 1 called on replica 2 without its secret.
		{"POST", lockURL(b, "x", "release"), `{"session_id": "` + s + `", "fencing_token": "1"}`, 403, "forbidden"},
	}
	for _, tc := range cases {
		r := call(t, tc.method, tc.url, tc.body)
		require.Equal(t, tc.status, r.status, "%s %s: %s", tc.method, tc.url, r.raw)
		require.Equal(t, tc.code, r.str("code"), "%s %s: %s", tc.method, tc.url, r.raw)
		require.NotEmpty(t, r.str("error"))
	}
	// Nothing changed.
	r := call(t, "GET", lockURL(a, "x", ""), nil)
	require.Equal(t, false, r.body["held"], r.raw)
	r = call(t, "GET", a+"/v1/locks", nil)
	require.Empty(t, r.body["locks"], r.raw)
	r = call(t, "GET", a+"/v1/sessions", nil)
	require.Len(t, r.body["sessions"], 1, r.raw)
}

func TestElections(t *testing.T) {
	g := newGroup(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := g.urls[1], g.urls[2]
	s1, s2 := newSession(t, a, 10000), newSession(t, b, 10000)
	ev := sse(t, ctx, b+"/v1/elections/orders%2Fprimary/observe")
	nextEvent(t, ev, "state", func(e event) bool { return e.kind == "state" })
	el := a + "/v1/elections/orders%2Fprimary"
	r := call(t, "POST", el+"/campaign", map[string]any{"session_id": s1, "value": "10.0.0.1", "wait": true})
	require.Equal(t, true, r.body["elected"], r.raw)
	tok := r.str("token")
	nextEvent(t, ev, "leader", func(e event) bool { return e.kind == "leader" })
	r = call(t, "POST", el+"/campaign", map[string]any{"session_id": s2, "value": "10.0.0.2", "wait": false})
	require.Equal(t, false, r.body["elected"], r.raw)
	r = call(t, "POST", el+"/campaign", map[string]any{"session_id": s2, "value": "10.0.0.2", "wait": true})
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
	r = call(t, "POST", el+"/proclaim", map[string]any{"session_id": s1, "token": tok, "value": "10.0.0.9"})
	require.Equal(t, 200, r.status, r.raw)
	e := nextEvent(t, ev, "proclaimed", func(e event) bool { return e.kind == "proclaimed" })
	require.Equal(t, "10.0.0.9", e.data["leader"].(map[string]any)["value"])
	r = call(t, "GET", el, nil)
	require.Equal(t, "10.0.0.9", r.body["leader"].(map[string]any)["value"], r.raw)
	require.Len(t, r.body["candidates"], 1)
	r = call(t, "POST", el+"/proclaim", map[string]any{"session_id": s1, "token": "5", "value": "x"})
	require.Equal(t, 409, r.status, r.raw)
	require.Equal(t, "not_leader", r.str("code"))
	r = call(t, "POST", el+"/resign", map[string]any{"session_id": s1, "token": tok})
	require.Equal(t, 200, r.status, r.raw)
	e = nextEvent(t, ev, "leader s2", func(e event) bool { return e.kind == "leader" })
	require.Equal(t, s2, e.data["leader"].(map[string]any)["session_id"])
}

func TestHealthAndMetrics(t *testing.T) {
	g := newGroup(t, false, httpapi.WithBearerTokens([]string{"sekret"}))
	a := g.urls[1]
	deadline := time.Now().Add(30 * time.Second)
	for call(t, "GET", a+"/readyz", nil).status != 200 {
		require.True(t, time.Now().Before(deadline), "never ready")
		time.Sleep(20 * time.Millisecond) // polling a probe, as a load balancer does
	}
	require.Equal(t, 200, call(t, "GET", a+"/healthz", nil).status)
	r := call(t, "GET", a+"/metrics", nil)
	require.Equal(t, 401, r.status)
	require.Equal(t, "unauthorized", r.str("code"))
	req, _ := http.NewRequest("GET", a+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer sekret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, string(m), "fencelock_applied_index")
	req, _ = http.NewRequest("GET", a+"/", nil)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Contains(t, string(page), "<title>fencelock</title>")
	_ = errors.New
}
