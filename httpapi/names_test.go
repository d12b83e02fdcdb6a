package httpapi_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/stretchr/testify/require"
)

// newNamedSession opens a session named name ("" for none) with a long TTL,
// so that nothing expires while a test looks at it.
func newNamedSession(t *testing.T, base, name string) string {
	t.Helper()
	body := map[string]any{"ttl_ms": 60000}
	if name != "" {
		body["name"] = name
	}
	r := call(t, "POST", base+"/v1/sessions", body)
	require.Equal(t, 201, r.Status, r.Raw)
	secrets.Keep(r.Str("session_id"), r.Str("session_secret"))
	return r.Str("session_id")
}

// A lock held by a session named reindex@worker-3 shows that name and its
// hold time in GET /v1/locks/{name} and GET /v1/locks, from another
// replica; its waiter shows its name and place; GET /v1/sessions names
// every session, one created without a name by its client's address.
func TestNamesInHTTPViews(t *testing.T) {
	g := newGroup(t, true)
	holder := newNamedSession(t, g.urls[1], "reindex@worker-3")
	r := call(t, "POST", lockURL(g.urls[1], "jobs/reindex", "acquire"), map[string]any{"session_id": holder})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	waiter := newNamedSession(t, g.urls[2], "backfill@worker-7")
	r = call(t, "POST", lockURL(g.urls[2], "jobs/reindex", "acquire"), map[string]any{"session_id": waiter, "wait": true})
	require.Equal(t, false, r.Body["granted"], r.Raw)
	anon := newNamedSession(t, g.urls[3], "")

	check := func(l map[string]any) {
		t.Helper()
		require.Equal(t, "reindex@worker-3", l["holder_name"], l)
		hs := l["holders"].([]any)
		require.Len(t, hs, 1)
		h := hs[0].(map[string]any)
		require.Equal(t, "reindex@worker-3", h["name"])
		at, err := time.Parse(time.RFC3339Nano, h["granted_at"].(string))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Minute)
		require.Equal(t, l["granted_at"], h["granted_at"])
		ws := l["waiting"].([]any)
		require.Len(t, ws, 1)
		w := ws[0].(map[string]any)
		require.Equal(t, "backfill@worker-7", w["name"])
		require.Equal(t, float64(1), w["place"])
		require.Equal(t, waiter, w["session_id"])
		require.NotEmpty(t, w["queued_at"])
	}
	var one reply
	fencelocktest.WaitFor(t, "the held lock to be held for a while", func() bool {
		one = call(t, "GET", lockURL(g.urls[3], "jobs/reindex", ""), nil)
		v, _ := one.Body["held_for_ms"].(float64)
		return v > 0
	})
	check(one.Body)
	r = call(t, "GET", g.urls[3]+"/v1/locks?prefix=jobs/", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	check(r.Body["locks"].([]any)[0].(map[string]any))

	r = call(t, "GET", g.urls[1]+"/v1/sessions", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	names := map[string]string{}
	for _, s := range r.Body["sessions"].([]any) {
		m := s.(map[string]any)
		names[m["session_id"].(string)] = m["name"].(string)
	}
	require.Equal(t, "reindex@worker-3", names[holder])
	require.Equal(t, "backfill@worker-7", names[waiter])
	require.True(t, strings.HasPrefix(names[anon], "127.0.0.1:"), "named by the client's address: %q", names[anon])

	for _, bad := range []string{strings.Repeat("n", 257), "a\x00b"} {
		r = call(t, "POST", g.urls[1]+"/v1/sessions", map[string]any{"name": bad})
		require.Equal(t, 400, r.Status, r.Raw)
	}
}

// GET /v1/locks?sort=waiters ranks the locks by queue length, longest
// first, ties by name, leaving out the uncontended; it takes no prefix.
func TestContendedHTTP(t *testing.T) {
	g := newGroup(t, true)
	a := g.urls[1]
	holder := newNamedSession(t, a, "holder")
	for _, n := range []string{"a", "b", "quiet"} {
		r := call(t, "POST", lockURL(a, n, "acquire"), map[string]any{"session_id": holder})
		require.Equal(t, true, r.Body["granted"], r.Raw)
	}
	for i, n := range []string{"a", "b", "b"} {
		s := newNamedSession(t, g.urls[uint64(i%3+1)], fmt.Sprintf("w%d", i))
		r := call(t, "POST", lockURL(g.urls[uint64(i%3+1)], n, "acquire"), map[string]any{"session_id": s, "wait": true})
		require.Equal(t, false, r.Body["granted"], r.Raw)
	}
	var got []string
	fencelocktest.WaitFor(t, "both queues", func() bool {
		r := call(t, "GET", g.urls[2]+"/v1/locks?sort=waiters", nil)
		require.Equal(t, 200, r.Status, r.Raw)
		got = nil
		for _, l := range r.Body["locks"].([]any) {
			m := l.(map[string]any)
			require.Equal(t, "holder", m["holder_name"])
			got = append(got, fmt.Sprintf("%s:%v", m["name"], m["waiters"]))
		}
		return len(got) == 2 && got[0] == "b:2"
	})
	require.Equal(t, []string{"b:2", "a:1"}, got)
	r := call(t, "GET", a+"/v1/locks?sort=waiters&limit=1", nil)
	require.Len(t, r.Body["locks"], 1, r.Raw)
	for _, q := range []string{"sort=waiters&limit=101", "sort=waiters&prefix=a", "sort=size", "sort=waiters&group=nosuch"} {
		r := call(t, "GET", a+"/v1/locks?"+q, nil)
		require.Equal(t, 400, r.Status, "%s: %s", q, r.Raw)
	}
}

// GET /v1/elections pages like GET /v1/locks (prefix, after, limit), with
// each leader's name and term.
func TestElectionsHTTP(t *testing.T) {
	g := newGroup(t, true)
	a := g.urls[1]
	s := newNamedSession(t, a, "primary@db-1")
	for _, e := range []string{"orders/p", "orders/q", "orders/r", "payments/p"} {
		r := call(t, "POST", a+"/v1/elections/"+strings.ReplaceAll(e, "/", "%2F")+"/campaign", map[string]any{"session_id": s, "value": "v-" + e})
		require.Equal(t, true, r.Body["elected"], r.Raw)
	}
	var names []string
	after := ""
	for pages := 1; ; pages++ {
		u := g.urls[3] + "/v1/elections?prefix=orders/&limit=2"
		if after != "" {
			u += "&after=" + after
		}
		r := call(t, "GET", u, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		for _, e := range r.Body["elections"].([]any) {
			m := e.(map[string]any)
			names = append(names, m["name"].(string))
			l := m["leader"].(map[string]any)
			require.Equal(t, "primary@db-1", l["name"])
			require.Equal(t, "v-"+m["name"].(string), l["value"])
			require.NotEmpty(t, l["elected_at"])
			require.Equal(t, float64(0), m["candidates"])
		}
		if r.Body["more"] != true {
			require.Equal(t, 2, pages)
			break
		}
		after = r.Str("next")
	}
	require.Equal(t, []string{"orders/p", "orders/q", "orders/r"}, names)
	r := call(t, "GET", a+"/v1/elections?limit=0", nil)
	require.Equal(t, 400, r.Status, r.Raw)
}
