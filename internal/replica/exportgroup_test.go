package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/replica/serve"
	"github.com/fencelock/fencelock/internal/replica/wire"
)

// pipeCall is one end of an in-memory call connection.
type pipeCall struct {
	in, out chan []byte
	done    chan struct{}
}

func pipeCalls() (*pipeCall, *pipeCall) {
	a, b := make(chan []byte, 4), make(chan []byte, 4)
	done := make(chan struct{})
	return &pipeCall{in: a, out: b, done: done}, &pipeCall{in: b, out: a, done: done}
}

func (p *pipeCall) Send(msg []byte) error {
	select {
	case p.out <- bytes.Clone(msg):
		return nil
	case <-p.done:
		return errors.New("closed")
	}
}

func (p *pipeCall) Recv() ([]byte, error) {
	select {
	case b := <-p.in:
		return b, nil
	case <-p.done:
		return nil, errors.New("closed")
	}
}

func (p *pipeCall) SetIdle(time.Duration) {}
func (p *pipeCall) Close() error          { return nil }

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

	server, client := pipeCalls()
	sent := make(chan error, 1)
	go func() { sent <- serve.SendFile(server, src, uint64(len(data))) }()
	dst := filepath.Join(dir, "dst")
	require.NoError(t, recvFile(ctx, client, dst, uint64(len(data))))
	require.NoError(t, <-sent)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))

	// One byte more than the head said.
	server, client = pipeCalls()
	go func() { sent <- serve.SendFile(server, src, uint64(len(data))) }()
	err = recvFile(ctx, client, filepath.Join(dir, "short"), uint64(len(data))-1)
	require.ErrorIs(t, err, wire.ErrMalformed)
	require.NoError(t, <-sent)

	// A refusal after the first chunk.
	server, client = pipeCalls()
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
	client, server := pipeCalls()
	close(server.done)
	_, err := recvReply(context.Background(), client, wire.KindMembership)
	require.ErrorContains(t, err, "ended with no answer (a replica of an older build")
}
