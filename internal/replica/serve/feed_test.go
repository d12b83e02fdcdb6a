package serve

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/replica/mirror"
	"github.com/fencelock/fencelock/internal/replica/wire"
)

// A state larger than one message reaches the mirror in parts, byte for
// byte; one that fits goes whole, as every build sends it. Parts that do not
// fit together (another index, more bytes than the state) are refused.
func TestStateInParts(t *testing.T) {
	defer TestingStateParts(1000, 300)()
	state := make([]byte, 10_000)
	_, _ = rand.Read(state)
	for _, size := range []int{1000, len(state)} {
		server, client := TestingCalls()
		sent := make(chan error, 1)
		go func() { sent <- sendState(server, 42, 2, state[:size]) }()
		first := recvMsg(t, client)
		if size <= 1000 {
			require.Equal(t, wire.KindSnapshot, first.Kind, "a state that fits goes whole")
		} else {
			require.Equal(t, wire.KindSnapshotPart, first.Kind)
			require.Len(t, first.Data, 300)
			var err error
			first, err = mirror.RecvState(client, first)
			require.NoError(t, err)
		}
		require.NoError(t, <-sent)
		require.Equal(t, uint64(42), first.Index)
		require.Equal(t, uint64(2), first.Leader)
		require.True(t, bytes.Equal(state[:size], first.Data))
	}

	for name, next := range map[string]wire.Msg{
		"another index":        {Kind: wire.KindSnapshotPart, Index: 43, Total: 600, Data: make([]byte, 300)},
		"another size":         {Kind: wire.KindSnapshotPart, Index: 42, Total: 700, Data: make([]byte, 300)},
		"more than the state":  {Kind: wire.KindSnapshotPart, Index: 42, Total: 600, Data: make([]byte, 301)},
		"entries before whole": {Kind: wire.KindEntries, Entries: []wire.Entry{{Index: 43, Data: []byte{1}}}},
	} {
		server, client := TestingCalls()
		require.NoError(t, server.Send(next.Encode(nil)))
		_, err := mirror.RecvState(client, wire.Msg{Kind: wire.KindSnapshotPart, Index: 42, Total: 600, Data: make([]byte, 300)})
		require.ErrorIs(t, err, wire.ErrMalformed, name)
	}
}

func recvMsg(t *testing.T, c *TestingCall) wire.Msg {
	t.Helper()
	b, err := c.Recv()
	require.NoError(t, err)
	m, err := wire.Decode(b)
	require.NoError(t, err)
	return m
}
