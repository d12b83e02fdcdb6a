package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/replica/serve"
	"github.com/fencelock/fencelock/internal/replica/wire"
)

// A snapshot file of several chunks arrives whole, byte for byte; a
// server that sends more than the file's size, or refuses midway, fails
// the copy with a clear error.
func TestExportFileInChunks(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data := make([]byte, 2*wire.MaxExportData+12345)
	_, _ = rand.Read(data)
	src := filepath.Join(dir, "src")
	require.NoError(t, os.WriteFile(src, data, 0o600))

	server, client := serve.TestingCalls()
	sent := make(chan error, 1)
	go func() { sent <- serve.SendFile(server, src, uint64(len(data))) }()
	dst := filepath.Join(dir, "dst")
	require.NoError(t, recvFile(ctx, client, dst, uint64(len(data))))
	require.NoError(t, <-sent)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))

	// One byte more than the head said.
	server, client = serve.TestingCalls()
	go func() { sent <- serve.SendFile(server, src, uint64(len(data))) }()
	err = recvFile(ctx, client, filepath.Join(dir, "short"), uint64(len(data))-1)
	require.ErrorIs(t, err, wire.ErrMalformed)
	require.NoError(t, <-sent)

	// A refusal after the first chunk.
	server, client = serve.TestingCalls()
	go func() {
		_ = server.Send((&wire.Msg{Kind: wire.KindExportData, Data: data[:wire.MaxExportData]}).Encode(nil))
		_ = server.Send((&wire.Msg{Kind: wire.KindRefuse, Code: wire.CodeNoQuorum, Text: "replica 5 cannot export group \"b\": no quorum"}).Encode(nil))
	}()
	err = recvFile(ctx, client, filepath.Join(dir, "refused"), uint64(len(data)))
	require.ErrorIs(t, err, ErrNoQuorum)
	require.ErrorContains(t, err, `group "b"`)
}

// A replica that closes the connection without answering (an older build,
// which does not serve the request) is named as such, not with the
// connection's end alone.
func TestReplyNeverSentNamesAnOlderBuild(t *testing.T) {
	client, server := serve.TestingCalls()
	server.HangUp()
	_, err := recvReply(context.Background(), client, wire.KindMembership)
	require.ErrorContains(t, err, "ended with no answer (a replica of an older build")
}
