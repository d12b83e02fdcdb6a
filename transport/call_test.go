package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/peering"
)

// echo is a Local that takes calls and sends every message back, with
// the caller's replica ID in front; refuse makes its Check refuse.
type echo struct {
	hello  peering.Hello
	refuse uint64
}

func (e echo) Hello() peering.Hello { return e.hello }
func (e echo) Check(h peering.Hello) error {
	if h.Replica == e.refuse {
		return errors.New("not one of us")
	}
	return nil
}
func (e echo) Contact(uint64) {}
func (e echo) ServeCall(peer peering.Hello, c CallConn) {
	for {
		msg, err := c.Recv()
		if err != nil {
			return
		}
		if c.Send(append([]byte(fmt.Sprint(peer.Replica, ":")), msg...)) != nil {
			return
		}
	}
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func roundTrip(t *testing.T, c CallConn, msg string) string {
	t.Helper()
	require.NoError(t, c.Send([]byte(msg)))
	got, err := c.Recv()
	require.NoError(t, err)
	return string(got)
}

// startTCP starts a bound TCP transport for local at addr.
func startTCP(t *testing.T, l peering.Local, addr string) (CallDialer, func()) {
	f := factory{}.Bind(l).(factory)
	tr := f.Create(config.NodeHostConfig{RaftAddress: addr}, func(pb.MessageBatch) {}, func(pb.Chunk) bool { return true })
	require.NoError(t, tr.Start())
	return f, func() { tr.Close() }
}

// A call connection opens on the raft port after the handshake, carries
// messages both ways, and ends when the acceptor's transport closes; a
// peer the acceptor refuses gets no call connection, and a transport
// without a handshake takes none.
func TestCallsOverTCP(t *testing.T) {
	a1, a2, a3 := freeAddr(t), freeAddr(t), freeAddr(t)
	d1, stop1 := startTCP(t, echo{hello: peering.Hello{Replica: 1, Addr: a1}}, a1)
	defer stop1()
	_, stop2 := startTCP(t, echo{hello: peering.Hello{Replica: 2, Addr: a2}, refuse: 3}, a2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c, err := d1.DialCall(ctx, a2)
	require.NoError(t, err)
	require.Equal(t, "1:hello", roundTrip(t, c, "hello"))
	require.Equal(t, "1:again", roundTrip(t, c, "again"))
	require.Error(t, c.Send(make([]byte, MaxCallMessage+1)), "a message beyond the bound is refused by its sender")

	stop2()
	_, err = c.Recv()
	require.Error(t, err, "the acceptor's close ends the call connection")
	c.Close()

	_, stop2 = startTCP(t, echo{hello: peering.Hello{Replica: 2, Addr: a2}, refuse: 3}, a2)
	defer stop2()
	d3, stop3 := startTCP(t, echo{hello: peering.Hello{Replica: 3, Addr: a3}}, a3)
	defer stop3()
	_, err = d3.DialCall(ctx, a2)
	require.ErrorIs(t, err, errRefused, "the handshake refuses a non-member")

	plain := factory{}.Create(config.NodeHostConfig{RaftAddress: a3}, func(pb.MessageBatch) {}, func(pb.Chunk) bool { return true })
	stop3()
	require.NoError(t, plain.Start())
	defer plain.Close()
	_, err = d1.DialCall(ctx, a3)
	require.Error(t, err, "a transport without a handshake takes no calls")
}

// On a Network, a call connection is checked like a handshake, and a cut
// link refuses new ones and breaks those open.
func TestCallsOnNetwork(t *testing.T) {
	n := NewNetwork(1)
	bind := func(id uint64, refuse uint64) (*faultFactory, func()) {
		var nhc config.NodeHostConfig
		nhc.RaftAddress = n.Addr(id)
		require.NoError(t, n.Configure(&nhc))
		f := nhc.Expert.TransportFactory.(*faultFactory).Bind(echo{hello: peering.Hello{Replica: id, Addr: n.Addr(id)}, refuse: refuse}).(*faultFactory)
		tr := f.Create(nhc, func(pb.MessageBatch) {}, func(pb.Chunk) bool { return true })
		require.NoError(t, tr.Start())
		var once sync.Once
		return f, func() { once.Do(func() { tr.Close() }) }
	}
	f1, stop1 := bind(1, 0)
	defer stop1()
	_, stop2 := bind(2, 3)
	defer stop2()
	f3, stop3 := bind(3, 0)
	defer stop3()
	ctx := context.Background()

	c, err := f1.DialCall(ctx, n.Addr(2))
	require.NoError(t, err)
	require.Equal(t, "1:x", roundTrip(t, c, "x"))
	_, err = f3.DialCall(ctx, n.Addr(2))
	require.ErrorIs(t, err, errRefused)

	n.Cut(n.Addr(2), n.Addr(1))
	_, err = c.Recv()
	require.Error(t, err, "a cut breaks the call connection")
	c.Close()
	_, err = f1.DialCall(ctx, n.Addr(2))
	require.Error(t, err, "no call connection over a cut link")
	n.Heal()
	c, err = f1.DialCall(ctx, n.Addr(2))
	require.NoError(t, err)
	require.Equal(t, "1:y", roundTrip(t, c, "y"))
	stop2()
	_, err = c.Recv()
	require.Error(t, err, "the acceptor's close ends the call connection")
	c.Close()
}
