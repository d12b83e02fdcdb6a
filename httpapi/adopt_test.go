package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
	"github.com/fencelock/fencelock/internal/testhook"
)

// TestSessionOutlivesItsReplica stops the replica that made a session,
// gracefully and, separately, by a crash: the session's client goes on
// calling another replica, which adopts the session with its lock and its
// token; another session never gets the lock; a waiting acquire re-issued
// elsewhere is answered with the one grant; and a wrong secret adopts
// nothing.
func TestSessionOutlivesItsReplica(t *testing.T) {
	for _, crash := range []bool{false, true} {
		name := "graceful"
		if crash {
			name = "crash"
		}
		t.Run(name, func(t *testing.T) {
			g := newGroup(t, true)
			one, two, three := g.urls[1], g.urls[2], g.urls[3]
			s := newSession(t, one, 6000)
			o := newSession(t, three, 6000)
			// Through replica 2, forwarded to replica 1, which serves s.
			r := call(t, "POST", lockURL(two, "jobs/a", "acquire"), map[string]any{"session_id": s, "wait": false})
			require.Equal(t, true, r.body["granted"], r.raw)
			token := r.str("fencing_token")
			r = call(t, "POST", lockURL(three, "jobs/b", "acquire"), map[string]any{"session_id": o, "wait": false})
			require.Equal(t, true, r.body["granted"], r.raw)
			otherToken := r.str("fencing_token")
			// s waits for jobs/b on replica 1.
			r = call(t, "POST", lockURL(one, "jobs/b", "acquire"), map[string]any{"session_id": s, "wait": true})
			require.Equal(t, float64(1), r.body["queue_position"], r.raw)

			if crash {
				testhook.Crash(context.Background(), g.nodes[1])
				g.srvs[1].CloseClientConnections()
				g.srvs[1].Close()
				g.apis[1].Close()
			} else { // as fencelock serve stops on SIGTERM
				g.apis[1].Close()
				g.srvs[1].Close()
				require.NoError(t, g.nodes[1].Close())
			}

			r = call(t, "POST", two+"/v1/sessions/"+s+"/heartbeat", nil)
			require.Equal(t, 200, r.status, r.raw)
			require.Greater(t, r.body["lease_ms"].(float64), float64(0), r.raw)
			held := func(at string) {
				t.Helper()
				r := call(t, "GET", lockURL(at, "jobs/a", ""), nil)
				require.Equal(t, 200, r.status, r.raw)
				require.Equal(t, s, r.str("holder_session"), r.raw)
				require.Equal(t, token, r.str("fencing_token"), r.raw)
				r = call(t, "POST", lockURL(at, "jobs/a", "acquire"), map[string]any{"session_id": o, "wait": false})
				require.Equal(t, 200, r.status, r.raw)
				require.Equal(t, false, r.body["granted"], r.raw)
			}
			held(two)
			held(three)

			// The holder's acquire, re-issued anywhere, answers its grant.
			for _, at := range []string{three, two} {
				r = call(t, "POST", lockURL(at, "jobs/a", "acquire"), map[string]any{"session_id": s, "wait": true})
				require.Equal(t, true, r.body["granted"], r.raw)
				require.Equal(t, token, r.str("fencing_token"), r.raw)
			}

			// A wrong secret is refused, on a replica that serves the
			// session and on one that does not, and moves nothing.
			bad := map[string]string{httpapi.SecretHeader: "not-the-secret"}
			for _, at := range []string{two, three} {
				r = callWith(t, "POST", at+"/v1/sessions/"+s+"/heartbeat", nil, bad)
				require.Equal(t, 403, r.status, r.raw)
				require.Equal(t, "forbidden", r.str("code"), r.raw)
			}
			r = call(t, "GET", two+"/v1/status", nil)
			require.Equal(t, float64(1), r.body["http_sessions"], "replica 2 serves s alone: %s", r.raw)
			r = call(t, "GET", three+"/v1/status", nil)
			require.Equal(t, float64(1), r.body["http_sessions"], "replica 3 serves o alone: %s", r.raw)

			// The waiting acquire of jobs/b, re-issued on replica 3: the
			// adoption withdrew it, so it queues again, and is granted
			// once, when o releases.
			r = call(t, "POST", lockURL(three, "jobs/b", "acquire"), map[string]any{"session_id": s, "wait": true})
			require.Equal(t, float64(1), r.body["queue_position"], r.raw)
			r = call(t, "POST", lockURL(three, "jobs/b", "release"), map[string]any{"session_id": o, "fencing_token": otherToken})
			require.Equal(t, 200, r.status, r.raw)
			var grant string
			require.Eventually(t, func() bool {
				r = call(t, "POST", lockURL(two, "jobs/b", "acquire"), map[string]any{"session_id": s, "wait": true})
				grant = r.str("fencing_token")
				return r.body["granted"] == true
			}, 10*time.Second, 50*time.Millisecond, r.raw)
			r = call(t, "POST", lockURL(three, "jobs/b", "acquire"), map[string]any{"session_id": s, "wait": false})
			require.Equal(t, true, r.body["granted"], r.raw)
			require.Equal(t, grant, r.str("fencing_token"), r.raw)
			r = call(t, "GET", lockURL(two, "jobs/b", ""), nil)
			require.Equal(t, s, r.str("holder_session"), r.raw)
			require.Equal(t, float64(0), r.body["waiters"], r.raw)

			// DELETE through replica 3 ends it where it lives.
			r = call(t, "DELETE", three+"/v1/sessions/"+s, nil)
			require.Equal(t, 204, r.status, r.raw)
			r = call(t, "GET", lockURL(two, "jobs/a", ""), nil)
			require.Equal(t, false, r.body["held"], r.raw)
		})
	}
}
