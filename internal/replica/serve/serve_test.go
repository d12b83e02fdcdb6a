package serve

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/wire"
)

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
			client, server := TestingCalls()
			defer server.HangUp()
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
