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
	require.Equal(t, 200, r1.status, r1.raw)
	require.Equal(t, true, r1.body["granted"], r1.raw)
	r2 := call(t, "POST", lockURL(b, rw, "acquire"), acquireBody(s2, true, shared))
	require.Equal(t, true, r2.body["granted"], r2.raw)
	require.NotEqual(t, r1.str("fencing_token"), r2.str("fencing_token"))
	r := call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, false, nil))
	require.Equal(t, map[string]any{"granted": false}, r.body, r.raw)
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, true, nil))
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
	r = call(t, "GET", lockURL(a, rw, ""), nil)
	require.Equal(t, true, r.body["shared"], r.raw)
	require.Len(t, r.body["holders"], 2, r.raw)
	// A re-issued acquire in another mode than the session's request.
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s1, true, nil))
	require.Equal(t, 409, r.status, r.raw)
	require.Equal(t, "permit_conflict", r.str("code"))
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, true, shared))
	require.Equal(t, 409, r.status, r.raw)
	require.Equal(t, "permit_conflict", r.str("code"))
	// The same mode answers the same grant.
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s1, true, shared))
	require.Equal(t, r1.str("fencing_token"), r.str("fencing_token"), r.raw)
	require.Equal(t, 200, call(t, "POST", lockURL(a, rw, "release"), map[string]any{"session_id": s1, "fencing_token": r1.str("fencing_token")}).status)
	r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, true, nil))
	require.Equal(t, float64(1), r.body["queue_position"], "the writer waits for the second reader: %s", r.raw)
	require.Equal(t, 200, call(t, "POST", lockURL(b, rw, "release"), map[string]any{"session_id": s2, "fencing_token": r2.str("fencing_token")}).status)
	require.Eventually(t, func() bool {
		r = call(t, "POST", lockURL(a, rw, "acquire"), acquireBody(s3, true, nil))
		return r.body["granted"] == true
	}, 10*time.Second, 20*time.Millisecond, r.raw)
	require.Equal(t, 200, call(t, "POST", lockURL(a, rw, "release"), map[string]any{"session_id": s3, "fencing_token": r.str("fencing_token")}).status)

	// A semaphore of 2.
	const sem = "pool"
	two := map[string]any{"permits": 2}
	r = call(t, "POST", lockURL(a, sem, "acquire"), acquireBody(s1, false, two))
	require.Equal(t, true, r.body["granted"], r.raw)
	r = call(t, "POST", lockURL(b, sem, "acquire"), acquireBody(s2, false, two))
	require.Equal(t, true, r.body["granted"], r.raw)
	r = call(t, "POST", lockURL(a, sem, "acquire"), acquireBody(s3, false, two))
	require.Equal(t, 200, r.status, r.raw)
	require.Equal(t, map[string]any{"granted": false}, r.body, "a third permit: %s", r.raw)
	r = call(t, "GET", lockURL(a, sem, ""), nil)
	require.Equal(t, float64(2), r.body["permits"], r.raw)
	// Another count, and a lock's request for a semaphore's name.
	r = call(t, "POST", lockURL(a, sem, "acquire"), acquireBody(s3, false, map[string]any{"permits": 3}))
	require.Equal(t, 409, r.status, r.raw)
	require.Equal(t, "permit_conflict", r.str("code"))
	r = call(t, "POST", lockURL(a, sem, "acquire"), acquireBody(s3, true, nil))
	require.Equal(t, 409, r.status, r.raw)
	require.Equal(t, "permit_conflict", r.str("code"))

	// Out of range.
	for _, extra := range []map[string]any{{"permits": -1}, {"permits": 1 << 20}} {
		r = call(t, "POST", lockURL(a, "bad", "acquire"), acquireBody(s3, false, extra))
		require.Equal(t, 400, r.status, r.raw)
		require.Equal(t, "invalid_permits", r.str("code"), r.raw)
	}
	for _, extra := range []map[string]any{{"max_hold_ms": -1}, {"max_hold_ms": 1}, {"max_hold_ms": int64(1) << 50}, {"max_hold": 5}} {
		r = call(t, "POST", lockURL(a, "bad", "acquire"), acquireBody(s3, false, extra))
		require.Equal(t, 400, r.status, r.raw)
		require.Equal(t, "bad_request", r.str("code"), r.raw)
	}

	// max_hold_ms: the grant ends after it, the session lives on, and the
	// next in line is granted.
	const held = "bounded"
	start := time.Now()
	r = call(t, "POST", lockURL(a, held, "acquire"), acquireBody(s1, false, map[string]any{"max_hold_ms": 4000}))
	require.Equal(t, true, r.body["granted"], r.raw)
	tok := r.str("fencing_token")
	r = call(t, "POST", lockURL(b, held, "acquire"), acquireBody(s2, true, nil))
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
	require.Eventually(t, func() bool {
		call(t, "POST", a+"/v1/sessions/"+s1+"/heartbeat", nil)
		call(t, "POST", b+"/v1/sessions/"+s2+"/heartbeat", nil)
		r = call(t, "POST", lockURL(b, held, "acquire"), acquireBody(s2, true, nil))
		return r.body["granted"] == true
	}, 20*time.Second, 50*time.Millisecond, r.raw)
	require.GreaterOrEqual(t, time.Since(start), 3*time.Second)
	hb := call(t, "POST", a+"/v1/sessions/"+s1+"/heartbeat", nil)
	require.Equal(t, 200, hb.status, "the session outlives its grant: %s", hb.raw)
	r = call(t, "POST", lockURL(a, held, "release"), map[string]any{"session_id": s1, "fencing_token": tok})
	require.Equal(t, 409, r.status, r.raw)
	// A new acquire of the session starts afresh.
	r = call(t, "POST", lockURL(a, held, "acquire"), acquireBody(s1, true, nil))
	require.Equal(t, float64(1), r.body["queue_position"], r.raw)
}
