package replica

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The identity file comes from disk: whatever its bytes, decodeGroup
// returns an identity that survives being written and read again, or an
// error, and never panics.
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
		// What was accepted is an identity the replica writes back as it
		// is: written and read again, it is the same.
		path := filepath.Join(t.TempDir(), groupFileName)
		require.NoError(t, writeGroup(path, g))
		again, err := readGroup(path)
		require.NoError(t, err)
		require.Equal(t, normalGroup(g), normalGroup(again))
	})
}

// The identity file round trip: writeGroup then readGroup returns every
// identity the replica can write (version 1, or 2 once the Dir refuses
// builds from before the gate; a group with its members or, for a joining
// replica, neither), and refuses what it never writes: another version, a
// group without members, members without a group.
func FuzzGroupRoundTrip(f *testing.F) {
	f.Add(1, uint64(0), "a:1", uint64(2), "b:1", true)
	f.Add(1, uint64(7), "a:1", uint64(0), "", false)
	f.Add(2, uint64(1), "a:1", uint64(0), "", true)
	f.Add(1, uint64(0), "", uint64(0), "", true)
	f.Add(3, uint64(1), "a:1", uint64(0), "", true)
	f.Fuzz(func(t *testing.T, version int, id1 uint64, addr1 string, id2 uint64, addr2 string, withGroup bool) {
		if !utf8.ValidString(addr1) || !utf8.ValidString(addr2) {
			t.Skip("JSON carries text: addresses are UTF-8")
		}
		g := groupFile{Version: version, Members: map[uint64]string{}}
		for id, addr := range map[uint64]string{id1: addr1, id2: addr2} {
			if id != 0 {
				g.Members[id] = addr
			}
		}
		if withGroup {
			g.Group = groupDigest(0, g.Members)
		}
		path := filepath.Join(t.TempDir(), groupFileName)
		require.NoError(t, writeGroup(path, g))
		got, err := readGroup(path)
		if (version != 1 && version != 2) || withGroup != (len(g.Members) > 0) {
			require.Error(t, err, "an identity the replica never writes is refused: %+v", g)
			return
		}
		require.NoError(t, err)
		require.Equal(t, normalGroup(g), normalGroup(got))
	})
}

// normalGroup is g with no members as nil: the file does not tell an empty
// map from none, and nothing that reads it does either.
func normalGroup(g groupFile) groupFile {
	if len(g.Members) == 0 {
		g.Members = nil
	}
	return g
}

func TestGroupDigest(t *testing.T) {
	m := map[uint64]string{1: "a:1", 2: "b:1"}
	require.Equal(t, groupDigest(0, m), groupDigest(0, map[uint64]string{2: "b:1", 1: "a:1"}), "order does not matter")
	require.NotEqual(t, groupDigest(0, m), groupDigest(1, m), "the DeploymentID is part of it")
	require.NotEqual(t, groupDigest(0, m), groupDigest(0, map[uint64]string{1: "a:1", 2: "b:2"}))
}
