package httpapi_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/httpapi"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// group is three replicas in this process, each serving the API
// (fencelocktest's kit).
type group struct {
	*fencelocktest.Cluster
	urls map[uint64]string // each replica's API, by ID
}

func newGroup(t *testing.T, forward bool, opts ...httpapi.Option) *group {
	t.Helper()
	return newGroupWith(t, nil, forward, opts...)
}

// newGroupWith is newGroup with tune applied to each replica's Config.
// Without forward a replica answers every call itself.
func newGroupWith(t *testing.T, tune func(*fencelock.Config), forward bool, opts ...httpapi.Option) *group {
	t.Helper()
	kit := []fencelocktest.Option{fencelocktest.WithConfig(tune), fencelocktest.WithHTTP(opts...),
		// Every response of every test's calls is checked against openapi.yaml.
		fencelocktest.WithHandler(func(h http.Handler) http.Handler { return httpapi.ValidateResponses(t, h) })}
	if !forward {
		kit = append(kit, fencelocktest.WithoutForwarding())
	}
	g := &group{Cluster: fencelocktest.NewCluster(t, 3, kit...), urls: map[uint64]string{}}
	for id := uint64(1); id <= 3; id++ {
		g.urls[id] = g.URL(id)
	}
	return g
}

// follower returns a replica of g that is not the raft leader, once there
// is one.
func (g *group) follower(t *testing.T) uint64 {
	t.Helper()
	var leader uint64
	fencelocktest.WaitFor(t, "a raft leader", func() bool {
		leader = g.Node(1).Status().LeaderID
		return leader != 0
	})
	return leader%3 + 1
}

// onFollower starts a forwarding group, tuned by tune, whose callers hold
// tokens (a tokens file's lines, as ParseTokens reads them), and returns it
// with a follower f: the admin calls' tests make their calls there, so that
// the library has to take each change to the leader.
func onFollower(t *testing.T, tokens string, tune func(*fencelock.Config)) (g *group, f uint64) {
	t.Helper()
	acl, err := httpapi.ParseTokens([]byte(tokens))
	require.NoError(t, err)
	g = newGroupWith(t, tune, true, httpapi.WithACL(acl))
	return g, g.follower(t)
}

// withGroupB is the tune of the tests that want a named group "b" besides
// the default one, voted by voters. Each replica's Config gets a slice of
// its own, as it did from the literal each test wrote.
func withGroupB(voters ...uint64) func(*fencelock.Config) {
	return func(c *fencelock.Config) {
		c.Groups = []fencelock.GroupConfig{{Name: "b", Voters: slices.Clone(voters)}}
	}
}

type reply = fencelocktest.Reply

// secrets holds each session's secret, as its creator keeps it.
var secrets fencelocktest.Secrets

// call makes a call as the creator of the session it names would: with
// that session's secret (callWith sends exactly the headers it is given).
func call(t *testing.T, method, u string, body any) reply {
	t.Helper()
	return callWith(t, method, u, body, secrets.Header(u, body))
}

func callWith(t *testing.T, method, u string, body any, hdr map[string]string) reply {
	t.Helper()
	return fencelocktest.Call(t, http.DefaultClient, method, u, body, hdr)
}

func newSession(t *testing.T, base string, ttlMS int) string {
	t.Helper()
	return secrets.Session(t, http.DefaultClient, base, ttlMS)
}

var lockURL = fencelocktest.LockURL

// event is one event of a stream (sse), waited for with nextEvent.
type event = fencelocktest.Event

var sse, nextEvent = fencelocktest.Events, fencelocktest.NextEvent

func TestLockFlow(t *testing.T) {
	g := newGroup(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b, c := g.urls[1], g.urls[2], g.urls[3]
	s1, s2, s3 := newSession(t, a, 10000), newSession(t, b, 10000), newSession(t, c, 10000)
	const name = "jobs/reindex"
	events := sse(t, ctx, lockURL(b, name, "watch"))
	nextEvent(t, events, "state", func(e event) bool { return e.Kind == "state" })

	r := call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s1, "wait": false})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["granted"])
	t1 := r.Str("fencing_token")
	require.NotEmpty(t, t1)
	nextEvent(t, events, "granted s1", func(e event) bool { return e.Kind == "granted" && e.Data["holder_session"] == s1 })

	// Same session, same lock: its current state, nothing queued.
	r = call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s1, "wait": true})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	require.Equal(t, t1, r.Str("fencing_token"))

	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": false})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, map[string]any{"granted": false}, r.Body)

	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], "re-acquire queued twice: %s", r.Raw)
	// s3's acquire goes to replica a, which forwards it to c, s3's owner.
	r = call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s3, "wait": true})
	require.Equal(t, float64(2), r.Body["queue_position"], r.Raw)

	r = call(t, "GET", lockURL(c, name, ""), nil)
	require.Equal(t, s1, r.Str("holder_session"), r.Raw)
	require.Equal(t, []any{s2, s3}, r.Body["queue"])
	require.Equal(t, float64(2), r.Body["waiters"])

	// A wrong token changes nothing.
	r = call(t, "POST", lockURL(a, name, "release"), map[string]any{"session_id": s1, "fencing_token": "1"})
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, "stale_token", r.Str("code"))
	r = call(t, "POST", lockURL(a, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 200, r.Status, r.Raw)
	ev := nextEvent(t, events, "granted s2", func(e event) bool { return e.Kind == "granted" })
	require.Equal(t, s2, ev.Data["holder_session"])
	// The old token is stale now.
	r = call(t, "POST", lockURL(a, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 409, r.Status, r.Raw)

	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	t2 := r.Str("fencing_token")
	require.Equal(t, ev.Data["fencing_token"], t2)
	require.Greater(t, len(t2), 0)

	// Deleting s2 passes the lock to s3.
	r = call(t, "DELETE", b+"/v1/sessions/"+s2, nil)
	require.Equal(t, 204, r.Status, r.Raw)
	ev = nextEvent(t, events, "granted s3", func(e event) bool { return e.Kind == "granted" })
	require.Equal(t, s3, ev.Data["holder_session"])
	r = call(t, "POST", b+"/v1/sessions/"+s2+"/heartbeat", nil)
	require.Equal(t, 404, r.Status, r.Raw)

	r = call(t, "GET", a+"/v1/locks?prefix=jobs/", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Len(t, r.Body["locks"], 1)
	r = call(t, "GET", a+"/v1/sessions?limit=1", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["more"], r.Raw)
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
	require.Equal(t, 200, r.Status, r.Raw)
	live := newSession(t, b, 10000)
	events := sse(t, ctx, lockURL(b, "x", "watch"))
	r = call(t, "POST", lockURL(a, "x", "acquire"), map[string]any{"session_id": dead, "wait": true})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	// Heartbeats keep it for 3 TTLs. The live client heartbeats too: its
	// replica would give it up 8s after its last renewal, about when the
	// dead one's lock passes on.
	start := time.Now()
	for time.Since(start) < 6*time.Second {
		r = call(t, "POST", a+"/v1/sessions/"+dead+"/heartbeat", nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, float64(2000), r.Body["timeout_ms"])
		r = call(t, "POST", b+"/v1/sessions/"+live+"/heartbeat", nil)
		require.Equal(t, 200, r.Status, r.Raw)
		time.Sleep(250 * time.Millisecond) // the client's heartbeat period, not synchronisation
	}
	last := time.Now()
	r = call(t, "POST", lockURL(b, "x", "acquire"), map[string]any{"session_id": live, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	nextEvent(t, events, "expired", func(e event) bool { return e.Kind == "expired" && e.Data["previous_session"] == dead })
	ev := nextEvent(t, events, "granted", func(e event) bool { return e.Kind == "granted" })
	require.Equal(t, live, ev.Data["holder_session"])
	// The expiry came before the grant, as the events show; how soon after
	// the last heartbeat is the benchmarks' business.
	t.Logf("lock passed on %v after the last heartbeat", time.Since(last))
	r = call(t, "POST", a+"/v1/sessions/"+dead+"/heartbeat", nil)
	require.Equal(t, 404, r.Status, r.Raw)
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
		require.Equal(t, tc.status, r.Status, "%s %s: %s", tc.method, tc.url, r.Raw)
		require.Equal(t, tc.code, r.Str("code"), "%s %s: %s", tc.method, tc.url, r.Raw)
		require.NotEmpty(t, r.Str("error"))
	}
	// Nothing changed.
	r := call(t, "GET", lockURL(a, "x", ""), nil)
	require.Equal(t, false, r.Body["held"], r.Raw)
	r = call(t, "GET", a+"/v1/locks", nil)
	require.Empty(t, r.Body["locks"], r.Raw)
	r = call(t, "GET", a+"/v1/sessions", nil)
	require.Len(t, r.Body["sessions"], 1, r.Raw)
}

func TestElections(t *testing.T) {
	g := newGroup(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := g.urls[1], g.urls[2]
	s1, s2 := newSession(t, a, 10000), newSession(t, b, 10000)
	ev := sse(t, ctx, b+"/v1/elections/orders%2Fprimary/observe")
	nextEvent(t, ev, "state", func(e event) bool { return e.Kind == "state" })
	el := a + "/v1/elections/orders%2Fprimary"
	r := call(t, "POST", el+"/campaign", map[string]any{"session_id": s1, "value": "10.0.0.1", "wait": true})
	require.Equal(t, true, r.Body["elected"], r.Raw)
	tok := r.Str("token")
	nextEvent(t, ev, "leader", func(e event) bool { return e.Kind == "leader" })
	r = call(t, "POST", el+"/campaign", map[string]any{"session_id": s2, "value": "10.0.0.2", "wait": false})
	require.Equal(t, false, r.Body["elected"], r.Raw)
	r = call(t, "POST", el+"/campaign", map[string]any{"session_id": s2, "value": "10.0.0.2", "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = call(t, "POST", el+"/proclaim", map[string]any{"session_id": s1, "token": tok, "value": "10.0.0.9"})
	require.Equal(t, 200, r.Status, r.Raw)
	e := nextEvent(t, ev, "proclaimed", func(e event) bool { return e.Kind == "proclaimed" })
	require.Equal(t, "10.0.0.9", e.Data["leader"].(map[string]any)["value"])
	r = call(t, "GET", el, nil)
	require.Equal(t, "10.0.0.9", r.Body["leader"].(map[string]any)["value"], r.Raw)
	require.Len(t, r.Body["candidates"], 1)
	r = call(t, "POST", el+"/proclaim", map[string]any{"session_id": s1, "token": "5", "value": "x"})
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, "not_leader", r.Str("code"))
	r = call(t, "POST", el+"/resign", map[string]any{"session_id": s1, "token": tok})
	require.Equal(t, 200, r.Status, r.Raw)
	e = nextEvent(t, ev, "leader s2", func(e event) bool { return e.Kind == "leader" })
	require.Equal(t, s2, e.Data["leader"].(map[string]any)["session_id"])
}

// waitReady polls base's /readyz, as a load balancer does, until it
// answers 200, failing the test after within.
func waitReady(t *testing.T, base string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for call(t, "GET", base+"/readyz", nil).Status != 200 {
		require.True(t, time.Now().Before(deadline), "never ready")
		time.Sleep(20 * time.Millisecond) // polling a probe, as a load balancer does
	}
}

func TestHealthAndMetrics(t *testing.T) {
	g := newGroup(t, false, httpapi.WithBearerTokens([]string{"sekret"}))
	a := g.urls[1]
	waitReady(t, a, 30*time.Second)
	require.Equal(t, 200, call(t, "GET", a+"/healthz", nil).Status)
	r := call(t, "GET", a+"/metrics", nil)
	require.Equal(t, 401, r.Status)
	require.Equal(t, "unauthorized", r.Str("code"))
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
