package httpapi_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// GET /v1/status says what the replica runs: its build's version and
// commit, and the log and snapshot formats it writes.
func TestStatusVersion(t *testing.T) {
	g := newGroup(t, false)
	r := call(t, "GET", g.urls[1]+"/v1/status", nil)
	require.Equal(t, 200, r.status, r.raw)
	v, ok := r.body["version"].(map[string]any)
	require.True(t, ok, r.raw)
	want := fencelock.BuildVersion()
	require.Equal(t, want.Version, v["version"], r.raw)
	require.Equal(t, float64(want.Codec), v["codec"], r.raw)
	require.Equal(t, float64(want.Snapshot), v["snapshot"], r.raw)
	if want.Commit != "" {
		require.Equal(t, want.Commit, v["commit"], r.raw)
	}
}
