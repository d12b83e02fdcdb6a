package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/peering"
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
	go func() { sent <- sendFile(server, src, uint64(len(data))) }()
	dst := filepath.Join(dir, "dst")
	require.NoError(t, recvFile(ctx, client, dst, uint64(len(data))))
	require.NoError(t, <-sent)
	got, err := os.ReadFile(dst)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))

	// One byte more than the head said.
	server, client = pipeCalls()
	go func() { sent <- sendFile(server, src, uint64(len(data))) }()
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

// A replica serves at most maxExports exports and maxMemberReads membership
// reads at once for other replicas: one more is refused at once as
// unavailable (the caller asks another voter), naming the replica and the
// bound; a slot given back serves the next (here: refused as elsewhere,
// since the bare host runs no group).
func TestServedCallsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		kind, reply byte
		most        int32
		slots       func(h *Host) *atomic.Int32
		serve       func(h *Host, c *pipeCall, m wire.Msg)
		refusal     string
	}{
		{wire.KindExport, wire.KindExportHead, maxExports, func(h *Host) *atomic.Int32 { return &h.exporting },
			func(h *Host, c *pipeCall, m wire.Msg) { h.serveExport(peering.Hello{Replica: 9}, c, m) },
			"replica 7 is already writing 2 copies"},
		{wire.KindMembers, wire.KindMembership, maxMemberReads, func(h *Host) *atomic.Int32 { return &h.readingMembers },
			func(h *Host, c *pipeCall, m wire.Msg) { h.serveMembers(c, m) },
			"replica 7 is already reading 16 memberships"},
	} {
		h := &Host{cfg: Config{ReplicaID: 7}}
		h.gset.Store(&groupSet{})
		slots := tc.slots(h)
		ask := func() error {
			t.Helper()
			client, server := pipeCalls()
			defer close(server.done)
			go tc.serve(h, server, wire.Msg{Kind: tc.kind, Shard: 5, Name: "b"})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := recvReply(ctx, client, tc.reply)
			return err
		}
		slots.Store(tc.most) // every slot taken
		err := ask()
		var refused *exportRefusal
		require.ErrorAs(t, err, &refused)
		require.Equal(t, wire.CodeUnavailable, refused.code)
		require.Contains(t, refused.text, tc.refusal)
		require.Contains(t, refused.text, `group "b"`)
		require.Equal(t, tc.most, slots.Load(), "a refused call holds no slot")

		slots.Add(-1) // one ended
		err = ask()
		require.ErrorAs(t, err, &refused)
		require.Equal(t, wire.CodeElsewhere, refused.code, "%v", err)
		require.Eventually(t, func() bool { return slots.Load() == tc.most-1 }, 10*time.Second, time.Millisecond,
			"the served call gave its slot back")
	}
}
