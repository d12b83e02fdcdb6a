package serve

import (
	"bytes"
	"errors"
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

// bareHost runs no group.
type bareHost struct{}

func (bareHost) Down() bool                   { return false }
func (bareHost) Running(string, uint64) Group { return nil }
func (bareHost) Code(error) byte              { return wire.CodeInvalid }

// A replica serves at most maxExports exports and maxMemberReads membership
// reads at once for other replicas: one more is refused at once as
// unavailable (the caller asks another voter), naming the replica and the
// bound; a slot given back serves the next (here: refused as elsewhere,
// since the bare host runs no group).
func TestServedCallsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		kind    byte
		most    int32
		slots   func(s *Server) *atomic.Int32
		refusal string
	}{
		{wire.KindExport, maxExports, func(s *Server) *atomic.Int32 { return &s.exporting },
			"replica 7 is already writing 2 copies"},
		{wire.KindMembers, maxMemberReads, func(s *Server) *atomic.Int32 { return &s.readingMembers },
			"replica 7 is already reading 16 memberships"},
	} {
		s := New(Config{ReplicaID: 7}, bareHost{})
		slots := tc.slots(s)
		ask := func() wire.Msg {
			t.Helper()
			client, server := pipeCalls()
			defer close(server.done)
			served := make(chan struct{})
			go func() {
				defer close(served)
				s.ServeCall(peering.Hello{Replica: 9}, server)
			}()
			defer func() { <-served }()
			require.NoError(t, client.Send((&wire.Msg{Kind: tc.kind, Shard: 5, Name: "b"}).Encode(nil)))
			m := recvMsg(t, client)
			require.Equal(t, wire.KindRefuse, m.Kind)
			return m
		}
		slots.Store(tc.most) // every slot taken
		refused := ask()
		require.Equal(t, wire.CodeUnavailable, refused.Code)
		require.Contains(t, refused.Text, tc.refusal)
		require.Contains(t, refused.Text, `group "b"`)
		require.Equal(t, tc.most, slots.Load(), "a refused call holds no slot")

		slots.Add(-1) // one ended
		refused = ask()
		require.Equal(t, wire.CodeElsewhere, refused.Code, "%s", refused.Text)
		require.Eventually(t, func() bool { return slots.Load() == tc.most-1 }, 10*time.Second, time.Millisecond,
			"the served call gave its slot back")
	}
}
