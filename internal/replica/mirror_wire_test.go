package replica

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

func wireSeeds() []wireMsg {
	return []wireMsg{
		{Kind: wireSubscribe, Shard: 7, Name: "billing"},
		{Kind: wirePropose, ID: 1, Timeout: 500, FailFast: true, Data: fsm.AppendBatch(nil, []fsm.Command{{Kind: fsm.KindKeepAlive, Session: 3, Floor: 1}})},
		{Kind: wireRead, ID: 2},
		{Kind: wireSnapshot, Index: 9, Leader: 2, Data: []byte{1, 2, 3}},
		{Kind: wireSnapshotPart, Index: 9, Leader: 2, Total: 5, Data: []byte{1, 2, 3}},
		{Kind: wireEntries, Leader: 1, Entries: []wireEntry{{Index: 10, Data: []byte{9}}, {Index: 12, Data: []byte{}}}},
		{Kind: wireResult, ID: 3, Index: 12, Res: fsm.Result{Status: fsm.Refused, Value: 2, Refused: []uint64{4, 5}}},
		{Kind: wireResult, ID: 4, Code: codeNoQuorum, Text: "no quorum"},
		{Kind: wireRefuse, Code: codeElsewhere, Text: "replica 2 does not run group \"g\""},
		{Kind: wirePing, Leader: 3},
		{Kind: wireExport, Shard: 7, Name: "billing", Timeout: 30000},
		{Kind: wireExportHead, Index: 42, Sessions: 3, Locks: 2, Elections: 1, Data: []byte{1, 2, 3}},
		{Kind: wireExportData, Data: []byte{0, 1, 2}},
		{Kind: wireMembers, Shard: 7, Name: "billing", Timeout: 2000},
		{Kind: wireMembership, Mem: Membership{ConfigChangeIndex: 40,
			Voters:    map[uint64]string{1: "10.0.0.1:7001", 2: "10.0.0.2:7001", 3: "10.0.0.3:7001"},
			NonVoting: map[uint64]string{4: "10.0.0.4:7001"}, Removed: []uint64{5, 9}}},
		{Kind: wireMembership, Mem: Membership{Voters: map[uint64]string{}, NonVoting: map[uint64]string{}, Removed: []uint64{}}},
	}
}

// Every message survives its round trip.
func TestWireRoundTrip(t *testing.T) {
	for _, m := range wireSeeds() {
		got, err := decodeWire(m.encode(nil))
		require.NoError(t, err, m.Kind)
		require.Equal(t, m.encode(nil), got.encode(nil), m.Kind)
	}
	for _, b := range [][]byte{nil, {0}, {wirePing}, {wirePing, 1, 0}, {wireEntries, 0, 0}, {wireResult, 1, 1, 9, 0, 0, 0, 0},
		{wireEntries, 0, 2, 5, 0, 5, 0}, {wireExport, 7, 0}, {wireExportHead, 1, 0, 0, 0, 0}, {wireExportData, 0},
		{wireExportData, 0xff, 0xff, 0xff, 0x0f},
		{wireMembership, 1, 2, 2, 1, 'a', 1, 1, 'b', 0, 0}, // voters not increasing
		{wireMembership, 1, 1, 0, 1, 'a', 0, 0},            // replica 0
		{wireMembership, 1, 0, 0, 2, 5, 5},                 // removed not increasing
		{wireMembership, 1, 0xff, 0xff, 0xff, 0xff, 0x0f},  // a count beyond the bytes
		{wireSnapshotPart, 1, 1, 0, 1, 7},                  // a state of no bytes
		{wireSnapshotPart, 1, 1, 2, 3, 1, 2, 3},            // a part larger than its state
		{wireSnapshotPart, 1, 1, 5, 0},                     // an empty part
		(&wireMsg{Kind: wireSnapshotPart, Total: maxMirrorState + 1, Data: []byte{1}}).encode(nil),
		(&wireMsg{Kind: wireSnapshotPart, Total: maxMirrorState, Data: make([]byte, maxSnapshotPart+1)}).encode(nil)} {
		_, err := decodeWire(b)
		require.ErrorIs(t, err, errWire, "%v", b[:min(len(b), 16)])
	}
}

// A peer's bytes decode into a message that encodes back to the same
// bytes, or are refused with errWire: never a panic.
func FuzzDecodeWire(f *testing.F) {
	for _, m := range wireSeeds() {
		f.Add(m.encode(nil))
	}
	f.Add([]byte{wireEntries, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{wireSnapshot, 1, 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{wireExportHead, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeWire(b)
		if err != nil {
			require.ErrorIs(t, err, errWire)
			return
		}
		again, err := decodeWire(m.encode(nil))
		require.NoError(t, err)
		require.Equal(t, m.encode(nil), again.encode(nil))
	})
}

// A state larger than one message reaches the mirror in parts, byte for
// byte; one that fits goes whole, as every build sends it. Parts that do not
// fit together (another index, more bytes than the state) are refused.
func TestStateInParts(t *testing.T) {
	defer TestingStateParts(1000, 300)()
	state := make([]byte, 10_000)
	_, _ = rand.Read(state)
	for _, size := range []int{1000, len(state)} {
		server, client := pipeCalls()
		sent := make(chan error, 1)
		go func() { sent <- sendState(server, 42, 2, state[:size]) }()
		first := recvMsg(t, client)
		if size <= 1000 {
			require.Equal(t, wireSnapshot, first.Kind, "a state that fits goes whole")
		} else {
			require.Equal(t, wireSnapshotPart, first.Kind)
			require.Len(t, first.Data, 300)
			var err error
			first, err = recvState(client, first)
			require.NoError(t, err)
		}
		require.NoError(t, <-sent)
		require.Equal(t, uint64(42), first.Index)
		require.Equal(t, uint64(2), first.Leader)
		require.True(t, bytes.Equal(state[:size], first.Data))
	}

	for name, next := range map[string]wireMsg{
		"another index":        {Kind: wireSnapshotPart, Index: 43, Total: 600, Data: make([]byte, 300)},
		"another size":         {Kind: wireSnapshotPart, Index: 42, Total: 700, Data: make([]byte, 300)},
		"more than the state":  {Kind: wireSnapshotPart, Index: 42, Total: 600, Data: make([]byte, 301)},
		"entries before whole": {Kind: wireEntries, Entries: []wireEntry{{Index: 43, Data: []byte{1}}}},
	} {
		server, client := pipeCalls()
		require.NoError(t, server.Send(next.encode(nil)))
		_, err := recvState(client, wireMsg{Kind: wireSnapshotPart, Index: 42, Total: 600, Data: make([]byte, 300)})
		require.ErrorIs(t, err, errWire, name)
	}
}

func recvMsg(t *testing.T, c *pipeCall) wireMsg {
	t.Helper()
	b, err := c.Recv()
	require.NoError(t, err)
	m, err := decodeWire(b)
	require.NoError(t, err)
	return m
}
