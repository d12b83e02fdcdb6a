package httpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// hungPeer is a replica's HTTP endpoint that accepts connections and
// never answers, as a SIGSTOPped process's does: every call blocks until
// the test ends.
func hungPeer(t *testing.T) string {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(func() {
		close(release)
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// The replica a session lives on hangs (its HTTP endpoint takes the call
// and never answers): a call for the session on another replica waits for
// the forward a short bound only, derived from the session's TTL, then
// adopts the session and answers, well within the lease; the lock it
// holds keeps its token. Without the bound the heartbeat hung with the
// owner, nobody adopted, and the session was lost with two healthy
// replicas in quorum.
func TestForwardToHungOwnerAdopts(t *testing.T) {
	hung := hungPeer(t)
	g := newGroup(t, false, httpapi.WithPeers(map[uint64]string{1: hung}))
	const ttlMS = 10000 // margin 2s, lease 6s: the forward waits 500ms
	s := newSession(t, g.urls[1], ttlMS)
	r := call(t, "POST", lockURL(g.urls[1], "jobs/hung", "acquire"), acquireBody(s, false, nil))
	require.Equal(t, true, r.Body["granted"], r.Raw)
	token := r.Str("fencing_token")

	// The Go client's budget for a heartbeat: half the lease.
	budget := ttlMS * 3 / 5 / 2 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", g.urls[2]+"/v1/sessions/"+s+"/heartbeat", nil)
	require.NoError(t, err)
	req.Header.Set(httpapi.SecretHeader, secrets.For(req.URL.Path, nil))
	sent := time.Now()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err, "no answer from a healthy replica within a heartbeat's budget (%v): it waits for the hung owner", budget)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	t.Logf("heartbeat answered by replica 2 in %v (budget %v, a third of it an endpoint's share)", time.Since(sent), budget)

	r = call(t, "GET", lockURL(g.urls[3], "jobs/hung", ""), nil)
	require.Equal(t, token, r.Str("fencing_token"), r.Raw)
	require.Equal(t, float64(2), r.Body["owner"], "replica 2 adopted the session: %s", r.Raw)
	// The session lives on replica 2 now: served there without a forward.
	r = call(t, "POST", lockURL(g.urls[2], "jobs/hung", "acquire"), acquireBody(s, false, nil))
	require.Equal(t, token, r.Str("fencing_token"), r.Raw)
}
