package wire

import (
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

func wireSeeds() []Msg {
	return []Msg{
		{Kind: KindSubscribe, Shard: 7, Name: "billing"},
		{Kind: KindPropose, ID: 1, Timeout: 500, FailFast: true, Data: fsm.AppendBatch(nil, []fsm.Command{{Kind: fsm.KindKeepAlive, Session: 3, Floor: 1}})},
		{Kind: KindRead, ID: 2},
		{Kind: KindSnapshot, Index: 9, Leader: 2, Data: []byte{1, 2, 3}},
		{Kind: KindSnapshotPart, Index: 9, Leader: 2, Total: 5, Data: []byte{1, 2, 3}},
		{Kind: KindEntries, Leader: 1, Entries: []Entry{{Index: 10, Data: []byte{9}}, {Index: 12, Data: []byte{}}}},
		{Kind: KindResult, ID: 3, Index: 12, Res: fsm.Result{Status: fsm.Refused, Value: 2, Refused: []uint64{4, 5}}},
		{Kind: KindResult, ID: 4, Code: CodeNoQuorum, Text: "no quorum"},
		{Kind: KindRefuse, Code: CodeElsewhere, Text: "replica 2 does not run group \"g\""},
		{Kind: KindPing, Leader: 3},
		{Kind: KindExport, Shard: 7, Name: "billing", Timeout: 30000},
		{Kind: KindExportHead, Index: 42, Sessions: 3, Locks: 2, Elections: 1, Data: []byte{1, 2, 3}},
		{Kind: KindExportData, Data: []byte{0, 1, 2}},
		{Kind: KindMembers, Shard: 7, Name: "billing", Timeout: 2000},
		{Kind: KindMembership, Mem: Membership{ConfigChangeIndex: 40,
			Voters:    map[uint64]string{1: "10.0.0.1:7001", 2: "10.0.0.2:7001", 3: "10.0.0.3:7001"},
			NonVoting: map[uint64]string{4: "10.0.0.4:7001"}, Removed: []uint64{5, 9}}},
		{Kind: KindMembership, Mem: Membership{Voters: map[uint64]string{}, NonVoting: map[uint64]string{}, Removed: []uint64{}}},
	}
}

// Every message encodes to the bytes it had before the wire became a
// package of its own (testdata/golden.hex, one seed a line): peers of the
// older version decode what this one sends, and this one theirs.
func TestWireBytesUnchanged(t *testing.T) {
	golden, err := os.ReadFile("testdata/golden.hex")
	require.NoError(t, err)
	lines := strings.Fields(string(golden))
	seeds := wireSeeds()
	require.Len(t, lines, len(seeds))
	for i, m := range seeds {
		require.Equal(t, lines[i], hex.EncodeToString(m.Encode(nil)), "seed %d, kind %d", i, m.Kind)
		b, err := hex.DecodeString(lines[i])
		require.NoError(t, err)
		got, err := Decode(b)
		require.NoError(t, err, "seed %d", i)
		require.Equal(t, b, got.Encode(nil), "seed %d", i)
	}
}

// Every message survives its round trip.
func TestWireRoundTrip(t *testing.T) {
	for _, m := range wireSeeds() {
		got, err := Decode(m.Encode(nil))
		require.NoError(t, err, m.Kind)
		require.Equal(t, m.Encode(nil), got.Encode(nil), m.Kind)
	}
	for _, b := range [][]byte{nil, {0}, {KindPing}, {KindPing, 1, 0}, {KindEntries, 0, 0}, {KindResult, 1, 1, 9, 0, 0, 0, 0},
		{KindEntries, 0, 2, 5, 0, 5, 0}, {KindExport, 7, 0}, {KindExportHead, 1, 0, 0, 0, 0}, {KindExportData, 0},
		{KindExportData, 0xff, 0xff, 0xff, 0x0f},
		{KindMembership, 1, 2, 2, 1, 'a', 1, 1, 'b', 0, 0}, // voters not increasing
		{KindMembership, 1, 1, 0, 1, 'a', 0, 0},            // replica 0
		{KindMembership, 1, 0, 0, 2, 5, 5},                 // removed not increasing
		{KindMembership, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},  // a count beyond the bytes
		{KindSnapshotPart, 1, 1, 0, 1, 7},                  // a state of no bytes
		{KindSnapshotPart, 1, 1, 2, 3, 1, 2, 3},            // a part larger than its state
		{KindSnapshotPart, 1, 1, 5, 0},                     // an empty part
		(&Msg{Kind: KindSnapshotPart, Total: MaxState + 1, Data: []byte{1}}).Encode(nil),
		(&Msg{Kind: KindSnapshotPart, Total: MaxState, Data: make([]byte, MaxStatePart+1)}).Encode(nil)} {
		_, err := Decode(b)
		require.ErrorIs(t, err, ErrMalformed, "%v", b[:min(len(b), 16)])
	}
}

// A peer's bytes decode into a message that encodes back to the same
// bytes, or are refused with ErrMalformed: never a panic.
func FuzzDecodeWire(f *testing.F) {
	for _, m := range wireSeeds() {
		f.Add(m.Encode(nil))
	}
	f.Add([]byte{KindEntries, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{KindSnapshot, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{KindExportHead, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformed)
			return
		}
		again, err := Decode(m.Encode(nil))
		require.NoError(t, err)
		require.Equal(t, m.Encode(nil), again.Encode(nil))
	})
}
