package httpapi_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// Two of three replicas stopped: an acquire with "wait": true, and a
// campaign (which waits), answer 503 no_quorum naming the unreached voters
// about when an acquire with "wait": false does, made at the same moment,
// not 'unavailable: context deadline exceeded' after the call's 10 s.
func TestWaitingAcquireSaysNoQuorum(t *testing.T) {
	g := newGroup(t, false)
	a := g.urls[2]
	s := newSession(t, a, 60000)
	g.Node(1).Close()
	g.Node(3).Close()

	calls := []struct {
		what, url string
		body      map[string]any
	}{
		{"wait false", lockURL(a, "x", "acquire"), map[string]any{"session_id": s, "wait": false}},
		{"wait true", lockURL(a, "y", "acquire"), map[string]any{"session_id": s, "wait": true}},
		{"campaign", a + "/v1/elections/e/campaign", map[string]any{"session_id": s, "value": "v"}},
	}
	took := make([]time.Duration, len(calls))
	replies := make([]reply, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			replies[i] = call(t, "POST", c.url, c.body)
			took[i] = time.Since(start)
		}()
	}
	wg.Wait()
	for i, c := range calls {
		r := replies[i]
		require.Equal(t, 503, r.Status, "%s: %s", c.what, r.Raw)
		require.Equal(t, httpapi.CodeNoQuorum, r.Str("code"), "%s: %s", c.what, r.Raw)
		require.Contains(t, r.Str("error"), "this replica reaches 0 of the other 2 voters", c.what)
		require.Less(t, took[i], took[0]+2*time.Second, "%s took %v, wait false %v", c.what, took[i], took[0])
	}

	// Once the cause is known, a new waiting acquire says it at once.
	start := time.Now()
	r := call(t, "POST", lockURL(a, "z", "acquire"), map[string]any{"session_id": s, "wait": true})
	require.Equal(t, httpapi.CodeNoQuorum, r.Str("code"), r.Raw)
	require.Less(t, time.Since(start), 2*time.Second)
}
