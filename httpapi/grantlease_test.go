package httpapi_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// leaseOf is an answer's lease_ms, which must be there.
func leaseOf(t *testing.T, r reply) time.Duration {
	t.Helper()
	v, ok := r.Body["lease_ms"].(float64)
	require.True(t, ok, "a granting answer without lease_ms: %s", r.Raw)
	return time.Duration(v) * time.Millisecond
}

// Every answer that grants (an acquire, a campaign; at once, or to a
// waiting call asked again) carries lease_ms, within (0, TTL − 2·margin]
// for a part renewed moments ago; one that does not grant carries none.
func TestGrantAnswersCarryALease(t *testing.T) {
	g := newGroupWith(t, withGroupB(1, 2, 3), true)
	a, b := g.urls[1], g.urls[2]
	const ttl = 5 * time.Second
	full := ttl - 2*ttl/5
	s1, s2 := newSession(t, a, int(ttl.Milliseconds())), newSession(t, b, int(ttl.Milliseconds()))
	inBounds := func(r reply, what string) {
		t.Helper()
		l := leaseOf(t, r)
		require.Positive(t, l, "%s: %s", what, r.Raw)
		require.LessOrEqual(t, l, full, "%s: %s", what, r.Raw)
	}
	for _, name := range []string{"jobs/x", "jobs/x@b"} {
		r := call(t, "POST", lockURL(a, name, "acquire"), map[string]any{"session_id": s1, "wait": false})
		require.Equal(t, true, r.Body["granted"], r.Raw)
		inBounds(r, name+": a try that grants")
		tok := r.Str("fencing_token")

		r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": false})
		require.Equal(t, map[string]any{"granted": false}, r.Body, "refused: no lease")
		r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
		require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
		require.NotContains(t, r.Body, "lease_ms", "queued: no lease")

		r = call(t, "POST", lockURL(a, name, "release"), map[string]any{"session_id": s1, "fencing_token": tok})
		require.Equal(t, 200, r.Status, r.Raw)
		require.Eventually(t, func() bool {
			r = call(t, "POST", lockURL(b, name, "acquire"), map[string]any{"session_id": s2, "wait": true})
			return r.Body["granted"] == true
		}, 30*time.Second, 20*time.Millisecond, "s2 granted %s after the release", name)
		inBounds(r, name+": a waiting call asked again")
	}
	for _, name := range []string{"orders/primary", "orders/primary@b"} {
		r := call(t, "POST", a+"/v1/elections/"+url.PathEscape(name)+"/campaign", map[string]any{"session_id": s1, "value": "v", "wait": true})
		require.Equal(t, true, r.Body["elected"], r.Raw)
		inBounds(r, name+": a campaign that elects")
		r = call(t, "POST", b+"/v1/elections/"+url.PathEscape(name)+"/campaign", map[string]any{"session_id": s2, "value": "w", "wait": false})
		require.Equal(t, false, r.Body["elected"], r.Raw)
		require.NotContains(t, r.Body, "lease_ms", "not elected: no lease")
	}
}

// The hole this closes. A session's part in group b holds nothing; replica
// 1, which serves the session, is cut from b's only voter, so heartbeats
// cannot renew the part, and are answered with the full lease_ms all the
// same (a part that holds nothing fails no heartbeat). One sent more than
// a margin after the part's last renewal promises past the part's
// deadline. Healed, x@b is granted in that very
// part before any heartbeat renews it: the acquire's lease_ms must end
// before the part's deadline, less a margin. Before the fix the answer
// carried no lease, and the client acted on the grant until its last
// heartbeat's send + lease_ms, after the replica had given the part up.
func TestGrantLeaseBoundByItsPart(t *testing.T) {
	g := newGroupWith(t, withGroupB(3), false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, g.Node(2).TransferLeadership(ctx, "", 2)) // the default group's leader is not cut off
	a := g.urls[1]
	const ttl = 12 * time.Second
	margin := ttl / 5
	full := ttl - 2*margin
	sid := newSession(t, a, int(ttl.Milliseconds()))
	heartbeat := func() reply {
		t.Helper()
		r := call(t, "POST", a+"/v1/sessions/"+sid+"/heartbeat", nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, float64(full.Milliseconds()), r.Body["lease_ms"], r.Raw)
		return r
	}
	bLease := func(r reply) any { return r.Body["leases"].(map[string]any)["b"] }

	// The part in b is opened by a grant, which is given back: it holds
	// nothing. A heartbeat renews it; its renewal was sent before renewed.
	r := call(t, "POST", lockURL(a, "x@b", "acquire"), map[string]any{"session_id": sid, "wait": false})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	part := r.Str("holder_session")
	r = call(t, "POST", lockURL(a, "x@b", "release"), map[string]any{"session_id": sid, "fencing_token": r.Str("fencing_token")})
	require.Equal(t, 200, r.Status, r.Raw)
	r = heartbeat()
	renewed := time.Now()
	require.Equal(t, float64(full.Milliseconds()), bLease(r), r.Raw)
	deadline := renewed.Add(ttl - margin) // the part's deadline is no later

	// Cut from b. The next heartbeat, one period (a third of the lease)
	// and a little later, is answered with the full lease and b's 0 (it
	// waits up to TTL/3 for b): sent more than a margin after renewed, it
	// promises past the part's deadline. (Sent much later, it would be
	// answered too close to that deadline for a grant to have a lease.)
	g.Network().Cut(g.Network().Addr(1), g.Network().Addr(3))
	g.Network().Cut(g.Network().Addr(3), g.Network().Addr(1))
	select {
	case <-time.After(time.Until(renewed.Add(full/3 + ttl/30))):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	last := time.Now()
	r = heartbeat()
	require.Equal(t, float64(0), bLease(r), "b was not renewed: %s", r.Raw)
	require.True(t, last.Add(full).After(deadline), "the heartbeat alone promises past the part's deadline")

	// Healed, and no heartbeat since: x@b granted in the same part.
	g.Network().Heal()
	var sent time.Time
	for {
		sent = time.Now()
		r = call(t, "POST", lockURL(a, "x@b", "acquire"), map[string]any{"session_id": sid, "wait": false})
		if r.Status == 200 && r.Body["granted"] == true {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("x@b never granted after the heal: %s", r.Raw)
		case <-time.After(50 * time.Millisecond):
		}
	}
	require.Equal(t, part, r.Str("holder_session"),
		"granted in the part that was not renewed (the test needs its deadline not to have passed): %s", r.Raw)
	lease := leaseOf(t, r)
	// From the acquire's send, the part's deadline less the margin for
	// clock rates leaves at most (0 if the grant came later than that):
	bound := max(0, deadline.Sub(sent)-margin)
	require.LessOrEqual(t, lease, bound, "the grant's lease reaches past its part's deadline: %s", r.Raw)
	require.Less(t, lease, full, r.Raw)
	t.Logf("the last heartbeat promised until %v past the part's deadline; the grant's lease_ms %v ends by %v before it",
		last.Add(full).Sub(deadline), lease, deadline.Sub(sent.Add(lease)))

	// The next heartbeat renews the part, which now holds x@b.
	r = heartbeat()
	require.Equal(t, float64(full.Milliseconds()), bLease(r), r.Raw)
}

// Issue 39 over HTTP. Three replicas; group b's one voter is 3, its leader;
// the default group is led by 2. The session lives on replica 1. While
// both groups are reachable a heartbeat answers a lease for each, and
// lease_ms is theirs. Replica 1 cut from 3 (b's leader): a heartbeat whose
// part in b holds nothing is answered, with b's lease 0 and lease_ms the
// default part's; one whose part in b holds x@b fails with 503, naming b,
// so no lease_ms outlasts what b allows.
func TestHeartbeatLeasesPerGroup(t *testing.T) {
	g := newGroupWith(t, withGroupB(3), false)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// Two groups on three hosts, one leader each on 2 and 3 (b's only
	// voter): balanced as the balancer wants them, so it leaves them there.
	require.NoError(t, g.Node(2).TransferLeadership(ctx, "", 2))
	a := g.urls[1]
	const ttl = 3 * time.Second
	sid := newSession(t, a, int(ttl.Milliseconds()))
	lock := func() reply {
		r := call(t, "POST", a+"/v1/locks/x%40b/acquire", map[string]any{"session_id": sid, "wait": false})
		require.Equal(t, 200, r.Status, r.Raw)
		require.Equal(t, true, r.Body["granted"], r.Raw)
		return r
	}
	leases := func(r reply) map[string]float64 {
		out := map[string]float64{}
		m, _ := r.Body["leases"].(map[string]any)
		for k, v := range m {
			out[k], _ = v.(float64)
		}
		return out
	}
	cut := func() {
		g.Network().Cut(g.Network().Addr(1), g.Network().Addr(3))
		g.Network().Cut(g.Network().Addr(3), g.Network().Addr(1))
	}

	// Both reachable: one lease per group, lease_ms the same.
	rb := lock()
	r := call(t, "POST", a+"/v1/sessions/"+sid+"/heartbeat", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	full, _ := r.Body["lease_ms"].(float64)
	require.Positive(t, full, r.Raw)
	require.Equal(t, map[string]float64{"": full, "b": full}, leases(r), r.Raw)

	// Released, the part in b holds nothing: cut from b, the heartbeat is
	// answered, b's lease is 0, and lease_ms is the default part's.
	r = call(t, "POST", a+"/v1/locks/x%40b/release", map[string]any{"session_id": sid, "fencing_token": rb.Str("fencing_token")})
	require.Equal(t, 200, r.Status, r.Raw)
	cut()
	r = call(t, "POST", a+"/v1/sessions/"+sid+"/heartbeat", nil)
	require.Equal(t, 200, r.Status, "a part that holds nothing fails no heartbeat: %s", r.Raw)
	require.Equal(t, map[string]float64{"": full, "b": 0}, leases(r), r.Raw)
	require.Equal(t, full, r.Body["lease_ms"], r.Raw)

	// Healed, x@b is held again (in a new part, if the old one was given
	// up meanwhile); cut again, the heartbeat fails and names b.
	g.Network().Heal()
	for {
		r = call(t, "POST", a+"/v1/locks/x%40b/acquire", map[string]any{"session_id": sid, "wait": false})
		if r.Status == 200 && r.Body["granted"] == true {
			break
		}
		select { // the part in b may be closing at b still
		case <-ctx.Done():
			t.Fatalf("x@b never granted again: %s", r.Raw)
		case <-time.After(50 * time.Millisecond):
		}
	}
	cut()
	defer g.Network().Heal()
	r = call(t, "POST", a+"/v1/sessions/"+sid+"/heartbeat", nil)
	require.Equal(t, 503, r.Status, "a heartbeat that could not renew the part holding x@b: %s", r.Raw)
	require.Contains(t, []string{httpapi.CodeUnavailable, httpapi.CodeNoQuorum}, r.Str("code"), r.Raw)
	require.Contains(t, r.Str("error"), `group "b"`, r.Raw)
}
