package httpapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// acquireBody is an acquire's body with the optional fields.
func acquireBody(session string, wait bool, extra map[string]any) map[string]any {
	b := map[string]any{"session_id": session, "wait": wait}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// Shared holders hold together, and a writer waits behind them; a
// semaphore admits its permits and refuses one more; a permit count or a
// mode that conflicts is 409 permit_conflict; max_hold_ms ends a grant.
func TestSharedSemaphoreMaxHold(t *testing.T) {
	g := newGroup(t, true)
	a, b := g.urls[1], g.urls[2]
	s1, s2, s3 := newSession(t, a, 10000), newSession(t, b, 10000), newSession(t, a, 10000)
	shared := map[string]any{"shared": true}

	// Shared: two holders at once, a writer queues until both release.
	const rw = "rw"
	r1 := call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s1, false, shared))
	require.Equal(t, 200, r1.Status, r1.Raw)
	require.Equal(t, true, r1.Body["granted"], r1.Raw)
	r2 := call(t, "POST", lockURL(b, rw, "acquire"), acquireBody(s2, true, shared))
	require.Equal(t, true, r2.Body["granted"], r2.Raw)
	require.NotEqual(t, r1.Str("fencing_token"), r2.Str("fencing_token"))
	r := call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, false, nil))
	require.Equal(t, map[string]any{"granted": false}, r.Body, r.Raw)
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, true, nil))
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = call(t, "GET", lockURL(a, rw, ""), nil)
	require.Equal(t, true, r.Body["shared"], r.Raw)
	require.Len(t, r.Body["holders"], 2, r.Raw)
	// A re-issued acquire in another mode than the session's request.
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s1, true, nil))
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, "permit_conflict", r.Str("code"))
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, true, shared))
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, "permit_conflict", r.Str("code"))
	// The same mode answers the same grant.
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s1, true, shared))
	require.Equal(t, r1.Str("fencing_token"), r.Str("fencing_token"), r.Raw)
	require.Equal(t, 200, call(t, "POST", lockURL(a, rw, "release"), map[string]any{"session_id": s1, "fencing_token": r1.Str("fencing_token")}).Status)
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, true, nil))
	require.Equal(t, float64(1), r.Body["queue_position"], "the writer waits for the second reader: %s", r.Raw)
	require.Equal(t, 200, call(t, "POST", lockURL(b, rw, "release"), map[string]any{"session_id": s2, "fencing_token": r2.Str("fencing_token")}).Status)
	require.Eventually(t, func() bool {
		r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, true, nil))
		return r.Body["granted"] == true
	}, 10*time.Second, 20*time.Millisecond, r.Raw)
	require.Equal(t, 200, call(t, "POST", lockURL(a, rw, "release"), map[string]any{"session_id": s3, "fencing_token": r.Str("fencing_token")}).Status)

	// A semaphore of 2.
	const sem = "pool"
	two := map[string]any{"permits": 2}
	r = call(t, "POST", lockURL(a, sem, "acquire"), acquireBody(s1, false, two))
	require.Equal(t, true, r.Body["granted"], r.Raw)
	r = call(t, "POST", lockURL(b, sem, "acquire"), acquireBody(s2, false, two))
	require.Equal(t, true, r.Body["granted"], r.Raw)
	r = call(t, "POST", lockURL(a, sem, "acquire"), acquireBody(s3, false, two))
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, map[string]any{"granted": false}, r.Body, "a third permit: %s", r.Raw)
	r = call(t, "GET", lockURL(a, sem, ""), nil)
	require.Equal(t, float64(2), r.Body["permits"], r.Raw)
	// Another count, and a lock's request for a semaphore's name.
	r = call(t, "POST", lockURL(a, sem, "acquire"), acquireBody(s3, false, map[string]any{"permits": 3}))
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, "permit_conflict", r.Str("code"))
	r = call(t, "POST", lockURL(a, sem, "acquire"), acquireBody(s3, true, nil))
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, "permit_conflict", r.Str("code"))

	// Out of range.
	for _, extra := range []map[string]any{{"permits": -1}, {"permits": 1 << 20}} {
		r = call(t, "POST", lockURL(a, "bad", "acquire"), acquireBody(s3, false, extra))
		require.Equal(t, 400, r.Status, r.Raw)
		require.Equal(t, "invalid_permits", r.Str("code"), r.Raw)
	}
	for _, extra := range []map[string]any{{"max_hold_ms": -1}, {"max_hold_ms": 1}, {"max_hold_ms": int64(1) << 50}, {"max_hold": 5}} {
		r = call(t, "POST", lockURL(a, "bad", "acquire"), acquireBody(s3, false, extra))
		require.Equal(t, 400, r.Status, r.Raw)
		require.Equal(t, "bad_request", r.Str("code"), r.Raw)
	}

	// max_hold_ms: the grant ends after it, the session lives on, and the
	// next in line is granted.
	const held = "bounded"
	start := time.Now()
	r = call(t, "POST", lockURL(a, held, "acquire"), acquireBody(s1, false, map[string]any{"max_hold_ms": 4000}))
	require.Equal(t, true, r.Body["granted"], r.Raw)
	tok := r.Str("fencing_token")
	r = call(t, "POST", lockURL(b, held, "acquire"), acquireBody(s2, true, nil))
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	require.Eventually(t, func() bool {
		call(t, "POST", a+"/v1/sessions/"+s1+"/heartbeat", nil)
		call(t, "POST", b+"/v1/sessions/"+s2+"/heartbeat", nil)
		r = call(t, "POST", lockURL(b, held, "acquire"), acquireBody(s2, true, nil))
		return r.Body["granted"] == true
	}, 20*time.Second, 50*time.Millisecond, r.Raw)
	require.GreaterOrEqual(t, time.Since(start), 3*time.Second)
	hb := call(t, "POST", a+"/v1/sessions/"+s1+"/heartbeat", nil)
	require.Equal(t, 200, hb.Status, "the session outlives its grant: %s", hb.Raw)
	r = call(t, "POST", lockURL(a, held, "release"), map[string]any{"session_id": s1, "fencing_token": tok})
	require.Equal(t, 409, r.Status, r.Raw)
	// A new acquire of the session starts afresh.
	r = call(t, "POST", lockURL(a, held, "acquire"), acquireBody(s1, true, nil))
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
}
