package mirror

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/replica/wire"
)

// answeringConn is a server's end of a mirror's stream that answers every
// call with code (and index, for wire.CodeOK), as the server's replica would.
type answeringConn struct {
	c     *mirrorConn
	code  byte
	index uint64
}

func (a *answeringConn) Send(b []byte) error {
	msg, err := wire.Decode(b)
	if err != nil {
		return err
	}
	go a.c.answer(wire.Msg{Kind: wire.KindResult, ID: msg.ID, Code: a.code, Index: a.index, Text: "the group has no quorum here"})
	return nil
}
func (a *answeringConn) Recv() ([]byte, error) { return nil, io.EOF }
func (a *answeringConn) SetIdle(time.Duration) {}
func (a *answeringConn) Close() error          { return nil }

// goLiveWith makes a stream from server, answering with code, the
// mirror's live one.
func goLiveWith(m *Mirror, server uint64, code byte, index uint64) *mirrorConn {
	a := &answeringConn{code: code, index: index}
	c := &mirrorConn{c: a, server: server, calls: make(map[uint64]chan wire.Msg), broken: make(chan struct{})}
	a.c = c
	m.connMu.Lock()
	m.conn = c
	close(m.connUp)
	m.h = lonelyHost{} // no table read yet: the voters are the mirror's own
	m.connUp = make(chan struct{})
	m.connMu.Unlock()
	return c
}

// A voter that answers a mirror's call "no quorum" (cut off from the rest
// of its group) is left: the mirror gives the call to another voter, which
// answers it, and tries the one it left last when it subscribes again.
func TestMirrorCallLeavesAVoterWithNoQuorum(t *testing.T) {
	m := testMirror(&sinkLog{}, 0)
	m.cfg = Config{ReplicaID: 4, RTT: 10 * time.Millisecond, ElectionTicks: 15, ProposalTimeout: time.Second}
	m.Init(slog.New(slog.DiscardHandler), 4, 15*10*time.Millisecond, "g", 0, m.Sink)
	m.SetVoters([]uint64{1, 2, 3})
	m.connUp = make(chan struct{})
	cut := goLiveWith(m, 2, wire.CodeNoQuorum, 0)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type result struct {
		res wire.Msg
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := m.call(ctx, wire.Msg{Kind: wire.KindRead})
		done <- result{res, err}
	}()
	select {
	case <-cut.broken:
	case r := <-done:
		t.Fatalf("the call ended on the voter with no quorum: %v", r.err)
	}
	require.Equal(t, uint64(2), m.avoid.Load(), "the voter left is tried last")
	require.Equal(t, []uint64{3, 1, 2}, m.servers())
	goLiveWith(m, 3, wire.CodeOK, 42)
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, uint64(42), r.res.Index, "voter 3 answered the call")
}
