package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// A re-issued waiting acquire (a client polling its queued request) is held
// until the grant, within its bound, and answered with it: the client learns
// of the grant when the replica applies it, not at its next poll. Without a
// grant it still answers its place, once the bound ran out.
func TestReaskedAcquireAnswersTheGrantWhenMade(t *testing.T) {
	g := newGroup(t, true)
	a, b := g.urls[1], g.urls[2]
	// TTL 120s: the hold's bound is 2.5s (a quarter of the call's 10s),
	// far beyond a release's commit here.
	s1, s2, s3 := newSession(t, a, 120000), newSession(t, b, 120000), newSession(t, b, 120000)
	const name = "jobs/longpoll"

	r := call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s1, "wait": false})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	t1 := r.Str("fencing_token")
	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s3, "wait": true})
	require.Equal(t, float64(2), r.Body["queue_position"], r.Raw)

	// s2's owner, replica 2, behind a handler that says when the re-ask
	// came in: the release is sent only after it did.
	entered := make(chan struct{}, 1)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			entered <- struct{}{}
		}
		g.API(2).ServeHTTP(w, r)
	}))
	defer front.Close()
	answer := make(chan reply, 1)
	go func() {
		answer <- call(t, "POST", lockURL(front.URL, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	}()
	<-entered
	r = call(t, "POST", lockURL(a, name, "release"), map[string]any{"session_id": s1, "fencing_token": t1})
	require.Equal(t, 200, r.Status, r.Raw)
	r = <-answer
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["granted"], "the re-ask sent before the release answered without the grant: %s", r.Raw)
	require.NotEqual(t, t1, r.Str("fencing_token"), r.Raw)

	// s3 waits on: its re-ask answers its place once the bound ran out.
	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s3, "wait": true})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
}

// A re-ask forwarded to the session's owner by another replica is answered
// at once, not held: the forwarding replica waits only a twentieth of the
// TTL for the owner before it adopts the session, and a hold of up to a
// fortieth plus the grant's backing reads could outlast that.
func TestForwardedReaskIsNotHeld(t *testing.T) {
	// A call's timeout of 2 minutes and a TTL of 40: a hold would last
	// 30s (a quarter of the timeout, below a fortieth of the TTL), the
	// forward's wait 120s.
	g := newGroup(t, true, httpapi.WithRequestTimeout(2*time.Minute))
	a, b := g.urls[1], g.urls[2]
	s1, s2 := newSession(t, a, 2400000), newSession(t, b, 2400000)
	const name = "jobs/forwarded"
	r := call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s1, "wait": false})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)

	// Through replica 1, which forwards it to 2, s2's owner.
	start := time.Now()
	r = call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
	took := time.Since(start)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	require.Less(t, took, 20*time.Second, "the forwarded re-ask was held")
}
