package peering

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHelloRoundTrip(t *testing.T) {
	h := Hello{Group: "abc", Replica: 3, Addr: "127.0.0.1:7003", Members: map[uint64]string{1: "a:1", 3: "127.0.0.1:7003"}}
	got, err := Unmarshal(h.Marshal())
	require.NoError(t, err)
	require.Equal(t, h, got)
	h.Groups = []GroupHello{{Name: "billing", Group: "d1", Voters: []uint64{1, 2, 3}, GroupID: 9}, {Name: "solo", Group: "d2", Voters: []uint64{3}}}
	got, err = Unmarshal(h.Marshal())
	require.NoError(t, err)
	require.Equal(t, h, got)
	h.Codec, h.Snapshot = 9, 7
	got, err = Unmarshal(h.Marshal())
	require.NoError(t, err)
	require.Equal(t, h, got)
	require.Contains(t, string(h.Marshal()), `"cv":9,"sv":7`)
}

// A Hello of a build from before the versions were announced has none:
// they decode as 0. The other way round, such a build (b096aa6, the last)
// decodes a Hello with plain json.Unmarshal into a Hello of the fields in
// before below, which ignores the fields it does not know: decoding
// today's Hello into them is what it reads.
func TestHelloVersionsAcrossBuilds(t *testing.T) {
	old := []byte(`{"g":"abc","r":3,"a":"127.0.0.1:7003","id":7}`)
	h, err := Unmarshal(old)
	require.NoError(t, err)
	require.Zero(t, h.Codec)
	require.Zero(t, h.Snapshot)
	require.Empty(t, h.Place, "an older build runs every group")

	var before struct {
		Group   string            `json:"g,omitempty"`
		Replica uint64            `json:"r"`
		Addr    string            `json:"a"`
		Members map[uint64]string `json:"m,omitempty"`
		GroupID uint64            `json:"id,omitempty"`
		Groups  []GroupHello      `json:"gs,omitempty"`
		Dir     uint64            `json:"d,omitempty"`
		Dirs    map[uint64]uint64 `json:"ds,omitempty"`
	}
	today := Hello{Group: "abc", Replica: 3, Addr: "127.0.0.1:7003", GroupID: 7, Codec: 9, Snapshot: 7, Place: PlaceOwn}
	require.NoError(t, json.Unmarshal(today.Marshal(), &before))
	require.Equal(t, uint64(3), before.Replica)
	require.Equal(t, "127.0.0.1:7003", before.Addr)
	require.Equal(t, uint64(7), before.GroupID)

	for _, b := range []string{`{"r":1,"a":"x:1","cv":-1}`, `{"r":1,"a":"x:1","cv":256}`, `{"r":1,"a":"x:1","sv":"7"}`} {
		_, err := Unmarshal([]byte(b))
		require.ErrorIs(t, err, ErrBadHello, b)
	}
}

func TestUnmarshalRefusesMalformed(t *testing.T) {
	for _, b := range [][]byte{
		nil, []byte("{"), []byte(`{"r":0,"a":"x:1"}`), []byte(`{"r":1}`), []byte(`{"r":-1,"a":"x:1"}`),
		[]byte(`{"r":1,"a":"x:1","m":{"x":"y"}}`), make([]byte, MaxHello+1),
	} {
		_, err := Unmarshal(b)
		require.ErrorIs(t, err, ErrBadHello, "%q", b)
	}
}

func TestDiffMembers(t *testing.T) {
	require.Equal(t, "3 is b:2 there, b:1 here; 4 only there (d:1); 5 only here (e:1)",
		DiffMembers(map[uint64]string{1: "a:1", 3: "b:2", 4: "d:1"}, map[uint64]string{1: "a:1", 3: "b:1", 5: "e:1"}))
	require.Equal(t, "the same members", DiffMembers(map[uint64]string{1: "a"}, map[uint64]string{1: "a"}))
	require.Equal(t, "1=a:1, 2=b:1", FormatMembers(map[uint64]string{2: "b:1", 1: "a:1"}))
}

// Hellos come from the network: whatever the bytes, Unmarshal returns a
// Hello with an ID and an address, or ErrBadHello, and never panics.
func FuzzUnmarshal(f *testing.F) {
	f.Add(Hello{Group: "g", Replica: 1, Addr: "a:1", Members: map[uint64]string{1: "a:1"}}.Marshal())
	f.Add([]byte(`{"r":18446744073709551615,"a":"x"}`))
	f.Add([]byte(`{"r":1,"a":"x","m":null,"g":""}`))
	f.Add([]byte("\x00\xff"))
	f.Add(Hello{Replica: 1, Addr: "a:1", Groups: []GroupHello{{Name: "b", Group: "d", Voters: []uint64{1, 2, 3}, GroupID: 7}}}.Marshal())
	f.Add([]byte(`{"r":1,"a":"x","gs":[{"n":"","g":"","v":null},{"v":[-1]}]}`))
	f.Add(Hello{Replica: 2, Addr: "b:1", Dir: 9, Dirs: map[uint64]uint64{1: 7, 2: 9}}.Marshal())
	f.Add([]byte(`{"r":1,"a":"x","d":-1,"ds":{"x":1}}`))
	f.Add(Hello{Replica: 3, Addr: "c:1", Codec: 9, Snapshot: 7}.Marshal())
	f.Add([]byte(`{"r":1,"a":"x","cv":255,"sv":0}`))
	f.Add(Hello{Replica: 4, Addr: "d:1", Place: PlaceOwn}.Marshal())
	f.Add([]byte(`{"r":1,"a":"x","pl":7}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Unmarshal(b)
		if err != nil {
			require.ErrorIs(t, err, ErrBadHello)
			return
		}
		require.NotZero(t, h.Replica)
		require.NotEmpty(t, h.Addr)
		require.LessOrEqual(t, len(h.Marshal()), MaxHello, "what was accepted is re-sent within the bound")
		again, err := Unmarshal(h.Marshal())
		require.NoError(t, err)
		require.Equal(t, normal(h), normal(again), "every field survives the round trip")
	})
}

// What Marshal produces, Unmarshal returns unchanged, every field of it,
// and what a sender may not send (no ID, no address) is refused.
func FuzzHelloRoundTrip(f *testing.F) {
	f.Add("g", uint64(1), "a:1", uint64(2), "b:1", uint64(7))
	f.Add("", uint64(3), "127.0.0.1:7003", uint64(0), "", uint64(0))
	f.Add("x", uint64(0), "a:1", uint64(1), "a:1", uint64(1))
	f.Fuzz(func(t *testing.T, group string, replica uint64, addr string, member uint64, maddr string, groupID uint64) {
		if !utf8.ValidString(group) || !utf8.ValidString(addr) || !utf8.ValidString(maddr) {
			t.Skip("JSON carries text: identities and addresses are UTF-8")
		}
		h := Hello{Group: group, Replica: replica, Addr: addr, GroupID: groupID}
		if member != 0 {
			h.Members = map[uint64]string{member: maddr}
		}
		b := h.Marshal()
		got, err := Unmarshal(b)
		if replica == 0 || addr == "" || len(b) > MaxHello {
			require.ErrorIs(t, err, ErrBadHello)
			return
		}
		require.NoError(t, err)
		require.Equal(t, h, got)
	})
}

// normal is h with an empty Members map as nil: the wire does not tell
// them apart, and neither does anything that reads a Hello.
func normal(h Hello) Hello {
	if len(h.Members) == 0 {
		h.Members = nil
	}
	return h
}
