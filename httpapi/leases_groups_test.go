package httpapi_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
)

// Issue 39 over HTTP. Three replicas; group b's one voter is 3, its leader;
// the default group is led by 2. The session lives on replica 1. While
// both groups are reachable a heartbeat answers a lease for each, and
// lease_ms is theirs. Replica 1 cut from 3 (b's leader): a heartbeat whose
// part in b holds nothing is answered, with b's lease 0 and lease_ms the
// default part's; one whose part in b holds x@b fails with 503, naming b,
// so no lease_ms outlasts what b allows.
func TestHeartbeatLeasesPerGroup(t *testing.T) {
	g := newGroupWith(t, func(c *fencelock.Config) {
		c.Groups = []fencelock.GroupConfig{{Name: "b", Voters: []uint64{3}}}
	}, false)
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
