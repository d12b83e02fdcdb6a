package httpapi_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/httpapi"
)

// TestSessionOutlivesItsReplica stops the replica that made a session,
// gracefully and, separately, by a crash: the session's client goes on
// calling another replica, which adopts the session with its lock and its
// token; another session never gets the lock; a waiting acquire re-issued
// elsewhere is answered with the one grant; and a wrong secret adopts
// nothing.
func TestSessionOutlivesItsReplica(t *testing.T) {
	eachStop(t, func(t *testing.T, g *group, graceful bool) {
		one, two, three := g.urls[1], g.urls[2], g.urls[3]
		s := newSession(t, one, 6000)
		o := newSession(t, three, 6000)
		// Through replica 2, forwarded to replica 1, which serves s.
		token := grant(t, two, "jobs/a", s)
		otherToken := grant(t, three, "jobs/b", o)
		// s waits for jobs/b on replica 1.
		r := call(t, "POST", lockURL(one, "jobs/b", "acquire"), map[string]any{"session_id": s, "wait": true})
		require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)

		stopOne(t, g, graceful)

		r = call(t, "POST", two+"/v1/sessions/"+s+"/heartbeat", nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Greater(t, r.Body["lease_ms"].(float64), float64(0), r.Raw)
		held := func(at string) {
			t.Helper()
			r := call(t, "GET", lockURL(at, "jobs/a", ""), nil)
			require.Equal(t, 200, r.Status, r.Raw)
			require.Equal(t, s, r.Str("holder_session"), r.Raw)
			require.Equal(t, token, r.Str("fencing_token"), r.Raw)
			r = call(t, "POST", lockURL(at, "jobs/a", "acquire"), map[string]any{"session_id": o, "wait": false})
			require.Equal(t, 200, r.Status, r.Raw)
			require.Equal(t, false, r.Body["granted"], r.Raw)
		}
		held(two)
		held(three)

		// The holder's acquire, re-issued anywhere, answers its grant.
		for _, at := range []string{three, two} {
			r = call(t, "POST", lockURL(at, "jobs/a", "acquire"), map[string]any{"session_id": s, "wait": true})
			require.Equal(t, true, r.Body["granted"], r.Raw)
			require.Equal(t, token, r.Str("fencing_token"), r.Raw)
		}

		// A wrong secret is refused, on a replica that serves the
		// session and on one that does not, and moves nothing.
		bad := map[string]string{httpapi.SecretHeader: "not-the-secret"}
		for _, at := range []string{two, three} {
			r = callWith(t, "POST", at+"/v1/sessions/"+s+"/heartbeat", nil, bad)
			require.Equal(t, 403, r.Status, r.Raw)
			require.Equal(t, "forbidden", r.Str("code"), r.Raw)
		}
		r = call(t, "GET", two+"/v1/status", nil)
		require.Equal(t, float64(1), r.Body["http_sessions"], "replica 2 serves s alone: %s", r.Raw)
		r = call(t, "GET", three+"/v1/status", nil)
		require.Equal(t, float64(1), r.Body["http_sessions"], "replica 3 serves o alone: %s", r.Raw)

		// The waiting acquire of jobs/b, re-issued on replica 3: the
		// adoption kept it in its place, and it is granted once, when
		// o releases.
		r = call(t, "POST", lockURL(three, "jobs/b", "acquire"), map[string]any{"session_id": s, "wait": true})
		require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
		r = call(t, "POST", lockURL(three, "jobs/b", "release"), map[string]any{"session_id": o, "fencing_token": otherToken})
		require.Equal(t, 200, r.Status, r.Raw)
		grant := waitGranted(t, two, "jobs/b", s)
		r = call(t, "POST", lockURL(three, "jobs/b", "acquire"), map[string]any{"session_id": s, "wait": false})
		require.Equal(t, true, r.Body["granted"], r.Raw)
		require.Equal(t, grant, r.Str("fencing_token"), r.Raw)
		r = call(t, "GET", lockURL(two, "jobs/b", ""), nil)
		require.Equal(t, s, r.Str("holder_session"), r.Raw)
		require.Equal(t, float64(0), r.Body["waiters"], r.Raw)

		// DELETE through replica 3 ends it where it lives.
		r = call(t, "DELETE", three+"/v1/sessions/"+s, nil)
		require.Equal(t, 204, r.Status, r.Raw)
		r = call(t, "GET", lockURL(two, "jobs/a", ""), nil)
		require.Equal(t, false, r.Body["held"], r.Raw)
	})
}

// TestAdoptionKeepsEveryGroup: a session holding a lock in the default
// group and one in a named group keeps both, with their tokens, when the
// replica that made it stops; the adopting replica's heartbeats renew both
// parts.
func TestAdoptionKeepsEveryGroup(t *testing.T) {
	g := newGroupWith(t, withGroupB(1, 2, 3), true)
	one, two, three := g.urls[1], g.urls[2], g.urls[3]
	s := newSession(t, one, 6000)
	o := newSession(t, three, 6000)
	var tokens [2]string
	for i, name := range []string{"x@b", "y"} {
		var r reply
		require.Eventually(t, func() bool { // group b may still be electing its leader
			r = call(t, "POST", lockURL(one, name, "acquire"), map[string]any{"session_id": s, "wait": false})
			return r.Status == 200
		}, 20*time.Second, 50*time.Millisecond)
		require.Equal(t, true, r.Body["granted"], r.Raw)
		tokens[i] = r.Str("fencing_token")
	}
	partB := call(t, "GET", lockURL(two, "x@b", ""), nil).Str("holder_session")

	g.API(1).Close()
	require.NoError(t, g.Node(1).Close())
	g.Stop(1) // and its endpoint drops calls, as a stopped process's port

	// Replicas 2 and 3 both called at once: they race to adopt it, and
	// whichever loses finds where it went. No call says it is gone.
	var wg sync.WaitGroup
	statuses := make(chan string, 40)
	for round := 0; round < 10; round++ {
		for _, at := range []string{two, three} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", at+"/v1/sessions/"+s+"/heartbeat", nil)
				req.Header.Set(httpapi.SecretHeader, secrets.For(req.URL.Path, nil))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					statuses <- err.Error()
					return
				}
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				statuses <- fmt.Sprint(resp.StatusCode, " ", string(raw))
			}()
		}
		wg.Wait()
	}
	close(statuses)
	for st := range statuses {
		require.NotContains(t, st, "404", "a racing adoption said the session is gone")
	}
	r := call(t, "POST", three+"/v1/sessions/"+s+"/heartbeat", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	leases := r.Body["leases"].(map[string]any)
	require.Greater(t, leases["b"].(float64), float64(0), r.Raw)
	require.Greater(t, leases[""].(float64), float64(0), r.Raw)
	for i, name := range []string{"x@b", "y"} {
		r = call(t, "GET", lockURL(two, name, ""), nil)
		require.Equal(t, tokens[i], r.Str("fencing_token"), r.Raw)
		r = call(t, "POST", lockURL(two, name, "acquire"), map[string]any{"session_id": s, "wait": false})
		require.Equal(t, true, r.Body["granted"], r.Raw)
		require.Equal(t, tokens[i], r.Str("fencing_token"), r.Raw)
		r = call(t, "POST", lockURL(two, name, "acquire"), map[string]any{"session_id": o, "wait": false})
		require.Equal(t, false, r.Body["granted"], r.Raw)
	}
	require.Equal(t, partB, call(t, "GET", lockURL(two, "x@b", ""), nil).Str("holder_session"))
	// Released through the replica that adopted it, by the kept token.
	r = call(t, "POST", lockURL(three, "x@b", "release"), map[string]any{"session_id": s, "fencing_token": tokens[0]})
	require.Equal(t, 200, r.Status, r.Raw)
}

// TestAdoptionKeepsQueuedAcquires: session a holds L; b waits for L on
// replica 1 (its wait runs there), c behind it on replica 2. Replica 1
// stops, gracefully and, separately, by a crash. b's client re-issues its
// acquire on replica 2, which adopts b: b keeps its place ahead of c, is
// granted L when a releases it, once, and c is not.
func TestAdoptionKeepsQueuedAcquires(t *testing.T) {
	eachStop(t, func(t *testing.T, g *group, graceful bool) {
		one, two, three := g.urls[1], g.urls[2], g.urls[3]
		a := newSession(t, three, 6000)
		b := newSession(t, one, 6000)
		c := newSession(t, two, 6000)
		aToken := grant(t, three, "L", a)
		r := call(t, "POST", lockURL(one, "L", "acquire"), map[string]any{"session_id": b, "wait": true})
		require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
		r = call(t, "POST", lockURL(two, "L", "acquire"), map[string]any{"session_id": c, "wait": true})
		require.Equal(t, float64(2), r.Body["queue_position"], r.Raw)
		queue := func(at string, want ...string) {
			t.Helper()
			r := call(t, "GET", lockURL(at, "L", ""), nil)
			require.Equal(t, 200, r.Status, r.Raw)
			require.Equal(t, fmt.Sprint(want), fmt.Sprint(r.Body["queue"]), r.Raw)
		}
		queue(three, b, c)

		stopOne(t, g, graceful)

		// b's client re-issues its waiting acquire on replica 2, which
		// adopts b: its request keeps its place, and no second one
		// queues.
		r = call(t, "POST", lockURL(two, "L", "acquire"), map[string]any{"session_id": b, "wait": true})
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
		queue(two, b, c)
		queue(three, b, c)
		r = call(t, "POST", lockURL(two, "L", "acquire"), map[string]any{"session_id": b, "wait": true})
		require.Equal(t, float64(1), r.Body["queue_position"], "asked again: %s", r.Raw)
		queue(three, b, c)

		// a releases L: b is granted, not c.
		r = call(t, "POST", lockURL(three, "L", "release"), map[string]any{"session_id": a, "fencing_token": aToken})
		require.Equal(t, 200, r.Status, r.Raw)
		bToken := waitGranted(t, two, "L", b)
		r = call(t, "GET", lockURL(three, "L", ""), nil)
		require.Equal(t, b, r.Str("holder_session"), r.Raw)
		require.Equal(t, bToken, r.Str("fencing_token"), r.Raw)
		require.Len(t, r.Body["holders"], 1, r.Raw)
		queue(three, c)
		// Exactly one grant: asked anywhere, b's acquire answers it.
		for _, at := range []string{two, three} {
			r = call(t, "POST", lockURL(at, "L", "acquire"), map[string]any{"session_id": b, "wait": true})
			require.Equal(t, true, r.Body["granted"], r.Raw)
			require.Equal(t, bToken, r.Str("fencing_token"), r.Raw)
		}
		r = call(t, "POST", lockURL(two, "L", "acquire"), map[string]any{"session_id": c, "wait": true})
		require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
		queue(three, c)

		// b releases by its token: c is granted.
		r = call(t, "POST", lockURL(two, "L", "release"), map[string]any{"session_id": b, "fencing_token": bToken})
		require.Equal(t, 200, r.Status, r.Raw)
		require.Eventually(t, func() bool {
			r = call(t, "GET", lockURL(three, "L", ""), nil)
			return r.Str("holder_session") == c
		}, 10*time.Second, 50*time.Millisecond, r.Raw)
	})
}

// TestAdoptionWithdrawsAKeptRequest: a waiting acquire re-issued on the
// adopting replica, then withdrawn by its client, leaves the queue: the
// lock is not granted to it when its holder releases.
func TestAdoptionWithdrawsAKeptRequest(t *testing.T) {
	g := newGroup(t, true)
	one, two, three := g.urls[1], g.urls[2], g.urls[3]
	a := newSession(t, three, 6000)
	b := newSession(t, one, 6000)
	aToken := grant(t, three, "L", a)
	r := call(t, "POST", lockURL(one, "L", "acquire"), map[string]any{"session_id": b, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	stopOne(t, g, false)

	r = call(t, "POST", lockURL(two, "L", "acquire"), map[string]any{"session_id": b, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = call(t, "POST", lockURL(two, "L", "release"), map[string]any{"session_id": b})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["withdrawn"], r.Raw)
	r = call(t, "GET", lockURL(three, "L", ""), nil)
	require.Equal(t, float64(0), r.Body["waiters"], r.Raw)
	r = call(t, "POST", lockURL(three, "L", "release"), map[string]any{"session_id": a, "fencing_token": aToken})
	require.Equal(t, 200, r.Status, r.Raw)
	r = call(t, "GET", lockURL(two, "L", ""), nil)
	require.Equal(t, false, r.Body["held"], r.Raw)
}

// grant acquires name for session through base, without waiting, requires
// it granted, and returns its fencing token.
func grant(t *testing.T, base, name, session string) string {
	t.Helper()
	r := call(t, "POST", lockURL(base, name, "acquire"), map[string]any{"session_id": session, "wait": false})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	return r.Str("fencing_token")
}

// waitGranted re-issues session's waiting acquire of name through base
// until it is answered granted (10s at most), and returns its fencing
// token.
func waitGranted(t *testing.T, base, name, session string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := call(t, "POST", lockURL(base, name, "acquire"), map[string]any{"session_id": session, "wait": true})
		if r.Body["granted"] == true {
			return r.Str("fencing_token")
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's acquire of %s not granted in 10s: %s", session, name, r.Raw)
		}
		time.Sleep(50 * time.Millisecond) // polling: the re-issued acquire is the state
	}
}

// eachStop runs test twice, as subtests, each on a new forwarding group g:
// with replica 1 stopped gracefully, then crashed (stopOne's graceful).
func eachStop(t *testing.T, test func(t *testing.T, g *group, graceful bool)) {
	for _, graceful := range []bool{true, false} {
		name := "crash"
		if graceful {
			name = "graceful"
		}
		t.Run(name, func(t *testing.T) { test(t, newGroup(t, true), graceful) })
	}
}

// stopOne crashes replica 1 of g, or with graceful stops it as fencelock
// serve does on SIGTERM.
func stopOne(t *testing.T, g *group, graceful bool) {
	t.Helper()
	if graceful {
		g.API(1).Close()
		require.NoError(t, g.Node(1).Close())
		g.Stop(1) // and its endpoint drops calls, as a stopped process's port
		return
	}
	g.Crash(1)
}

// TestAdoptionWithdrawsAKeptRequestWithoutReissue: b waits for lock L and
// is a candidate in election E on replica 1, which stops; b's client then
// withdraws both on replica 2 without re-issuing its calls first. The
// adoption kept them queued, and the withdrawals take them out by their
// own numbers: when a releases L and resigns E, nobody is granted either.
func TestAdoptionWithdrawsAKeptRequestWithoutReissue(t *testing.T) {
	eachStop(t, func(t *testing.T, g *group, graceful bool) {
		one, two, three := g.urls[1], g.urls[2], g.urls[3]
		a := newSession(t, three, 6000)
		b := newSession(t, one, 6000)
		el := "/v1/elections/E"
		aToken := grant(t, three, "L", a)
		r := call(t, "POST", three+el+"/campaign", map[string]any{"session_id": a, "value": "a", "wait": false})
		require.Equal(t, true, r.Body["elected"], r.Raw)
		aTerm := r.Str("token")
		r = call(t, "POST", lockURL(one, "L", "acquire"), map[string]any{"session_id": b, "wait": true})
		require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
		r = call(t, "POST", one+el+"/campaign", map[string]any{"session_id": b, "value": "b", "wait": true})
		require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
		stopOne(t, g, graceful)

		r = call(t, "POST", lockURL(two, "L", "release"), map[string]any{"session_id": b})
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, true, r.Body["withdrawn"], r.Raw)
		r = call(t, "GET", lockURL(three, "L", ""), nil)
		require.Equal(t, float64(0), r.Body["waiters"], r.Raw)
		r = call(t, "POST", two+el+"/resign", map[string]any{"session_id": b})
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, true, r.Body["withdrawn"], r.Raw)
		r = call(t, "GET", three+el, nil)
		require.Len(t, r.Body["candidates"], 0, r.Raw)
		// Withdrawn already: a second withdraw finds nothing.
		r = call(t, "POST", lockURL(two, "L", "release"), map[string]any{"session_id": b})
		require.Equal(t, 409, r.Status, r.Raw)

		r = call(t, "POST", lockURL(three, "L", "release"), map[string]any{"session_id": a, "fencing_token": aToken})
		require.Equal(t, 200, r.Status, r.Raw)
		r = call(t, "POST", three+el+"/resign", map[string]any{"session_id": a, "token": aTerm})
		require.Equal(t, 200, r.Status, r.Raw)
		time.Sleep(200 * time.Millisecond) // a grant to b, if one were made, would be applied by now
		for _, at := range []string{two, three} {
			r = call(t, "GET", lockURL(at, "L", ""), nil)
			require.Equal(t, false, r.Body["held"], r.Raw)
			r = call(t, "GET", at+el, nil)
			require.Nil(t, r.Body["leader"], r.Raw)
		}
		// b asks afresh, and is granted at once.
		r = call(t, "POST", lockURL(two, "L", "acquire"), map[string]any{"session_id": b, "wait": true})
		require.Equal(t, true, r.Body["granted"], r.Raw)
	})
}

// TestAdoptionReissuedCampaignKeepsItsValue: a campaign re-issued on the
// adopting replica with another value is answered by the candidacy the
// adoption kept, as a campaign re-issued on the same replica is by the
// session's candidacy: elected, it leads with the value it was queued
// with, and proclaim changes it.
func TestAdoptionReissuedCampaignKeepsItsValue(t *testing.T) {
	g := newGroup(t, true)
	one, two, three := g.urls[1], g.urls[2], g.urls[3]
	a := newSession(t, three, 6000)
	b := newSession(t, one, 6000)
	el := "/v1/elections/E"
	r := call(t, "POST", three+el+"/campaign", map[string]any{"session_id": a, "value": "a", "wait": false})
	require.Equal(t, true, r.Body["elected"], r.Raw)
	aTerm := r.Str("token")
	r = call(t, "POST", one+el+"/campaign", map[string]any{"session_id": b, "value": "queued", "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	stopOne(t, g, false)

	r = call(t, "POST", two+el+"/campaign", map[string]any{"session_id": b, "value": "reissued", "wait": true})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = call(t, "GET", three+el, nil)
	require.Len(t, r.Body["candidates"], 1, r.Raw)
	require.Equal(t, "queued", r.Body["candidates"].([]any)[0].(map[string]any)["value"], r.Raw)

	r = call(t, "POST", three+el+"/resign", map[string]any{"session_id": a, "token": aTerm})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Eventually(t, func() bool {
		r = call(t, "POST", two+el+"/campaign", map[string]any{"session_id": b, "value": "reissued", "wait": true})
		return r.Body["elected"] == true
	}, 10*time.Second, 50*time.Millisecond, r.Raw)
	require.Equal(t, "queued", r.Str("value"), r.Raw)
	bTerm := r.Str("token")
	r = call(t, "GET", three+el, nil)
	require.Equal(t, "queued", r.Body["leader"].(map[string]any)["value"], r.Raw)
	r = call(t, "POST", two+el+"/proclaim", map[string]any{"session_id": b, "token": bTerm, "value": "reissued"})
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "reissued", r.Str("value"), r.Raw)
	r = call(t, "GET", three+el, nil)
	require.Equal(t, "reissued", r.Body["leader"].(map[string]any)["value"], r.Raw)
}

// TestIsolatedCopyNeverAnswersNotLeader: a replica cut off from the group
// must not answer a resign from its copy of the session. Session s lives
// on replica 1; replica 1 is cut off from its peers (its HTTP still
// answers); replica 2 adopts s at a heartbeat, and s is elected leader of
// e there. s's resign of that term, sent to replica 1, whose copy knows no
// term, must fail as unavailable (nothing it could answer is backed by the
// group), neither 409 not_leader, after which the client would think the
// term over while the group still names it, nor 200. Once the link heals,
// the group still shows s leading that term.
func TestIsolatedCopyNeverAnswersNotLeader(t *testing.T) {
	g := newGroup(t, false, httpapi.WithRequestTimeout(2*time.Second))
	one, two := g.urls[1], g.urls[2]
	s := newSession(t, one, 15000)

	g.Isolate(1)
	fencelocktest.WaitFor(t, "s's heartbeat on replica 2", func() bool {
		return call(t, "POST", two+"/v1/sessions/"+s+"/heartbeat", nil).Status == 200
	})
	r := call(t, "POST", two+"/v1/elections/e/campaign", map[string]any{"session_id": s, "value": "s", "wait": false})
	require.Equal(t, true, r.Body["elected"], r.Raw)
	token := r.Str("token")

	r = call(t, "POST", one+"/v1/elections/e/resign", map[string]any{"session_id": s, "token": token})
	require.Equal(t, 503, r.Status, "s's resign of e (token %s) on the cut-off replica 1 was answered %d %s", token, r.Status, r.Raw)
	require.Equal(t, "unavailable", r.Str("code"), r.Raw)

	g.Heal()
	r = call(t, "GET", two+"/v1/elections/e", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	leader, _ := r.Body["leader"].(map[string]any)
	require.True(t, leader != nil && leader["session_id"] == s && leader["token"] == token,
		"s's resign failed, yet the group no longer shows s leading term %s: %s", token, r.Raw)
}
