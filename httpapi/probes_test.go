package httpapi_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// /livez answers while the process serves, without a token and whatever
// the group's state; /readyz answers 200 once the replica has caught up
// with a leader, and 503 with code no_quorum and the unreached voters when
// two of three replicas are stopped.
func TestReadyzAndLivez(t *testing.T) {
	g := newGroup(t, false, httpapi.WithBearerTokens([]string{"sekret"}))
	a := g.urls[2]
	waitReady(t, a, 60*time.Second)
	r := call(t, "GET", a+"/livez", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "ok", r.Str("status"))

	g.Node(1).Close()
	g.Node(3).Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r = call(t, "GET", a+"/readyz", nil)
		if r.Str("code") == httpapi.CodeNoQuorum {
			break
		}
		require.NotEqual(t, 200, r.Status, "ready without a quorum: %s", r.Raw)
		require.True(t, time.Now().Before(deadline), "never no_quorum: %s", r.Raw)
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, 503, r.Status)
	require.Contains(t, r.Str("error"), "the default group")
	require.Contains(t, r.Str("error"), "this replica reaches 0 of the other 2 voters")
	require.Equal(t, 200, call(t, "GET", a+"/livez", nil).Status, "a replica without quorum is alive")
}
