package replica

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// The identity file comes from disk: whatever its bytes, decodeGroup
// returns a consistent identity or an error, and never panics.
func FuzzDecodeGroup(f *testing.F) {
	good, _ := json.Marshal(groupFile{Version: 1, Group: groupDigest(0, map[uint64]string{1: "a:1"}), Members: map[uint64]string{1: "a:1"}})
	f.Add(good)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":2,"group":"x","members":{"1":"a:1"}}`))
	f.Add([]byte(`{"version":1,"group":"x"}`))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := decodeGroup("f", b)
		if err != nil {
			return
		}
		require.Equal(t, 1, g.Version)
		require.Equal(t, g.Group == "", len(g.Members) == 0)
	})
}

func TestGroupDigest(t *testing.T) {
	m := map[uint64]string{1: "a:1", 2: "b:1"}
	require.Equal(t, groupDigest(0, m), groupDigest(0, map[uint64]string{2: "b:1", 1: "a:1"}), "order does not matter")
	require.NotEqual(t, groupDigest(0, m), groupDigest(1, m), "the DeploymentID is part of it")
	require.NotEqual(t, groupDigest(0, m), groupDigest(0, map[uint64]string{1: "a:1", 2: "b:2"}))
}
