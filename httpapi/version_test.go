package httpapi_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// GET /v1/status says what the replica runs: its build's version and
// commit, and the newest log and snapshot formats it reads; and, for the
// default group and each group, the formats it writes (its version gate),
// which rise to the build's once every member reads them.
func TestStatusVersion(t *testing.T) {
	g := newGroup(t, false)
	r := call(t, "GET", g.urls[1]+"/v1/status", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	v, ok := r.Body["version"].(map[string]any)
	require.True(t, ok, r.Raw)
	want := fencelock.BuildVersion()
	require.Equal(t, want.Version, v["version"], r.Raw)
	require.Equal(t, float64(want.Codec), v["codec"], r.Raw)
	require.Equal(t, float64(want.Snapshot), v["snapshot"], r.Raw)
	if want.Commit != "" {
		require.Equal(t, want.Commit, v["commit"], r.Raw)
	}
	wantWrites := map[string]any{"codec": float64(want.Codec), "snapshot": float64(want.Snapshot)}
	require.Eventually(t, func() bool {
		r := call(t, "GET", g.urls[1]+"/v1/status", nil)
		groups, _ := r.Body["groups"].([]any)
		if len(groups) == 0 || !reflect.DeepEqual(wantWrites, r.Body["writes"]) {
			return false
		}
		for _, gr := range groups {
			if !reflect.DeepEqual(wantWrites, gr.(map[string]any)["writes"]) {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every replica of the group reads this build's formats: the group writes them")
}
