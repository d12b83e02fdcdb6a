package transport

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"
)

// Peer connections leave from the replica's own address, not the host's
// default one, so that firewall rules written by address hold. 127.0.0.2 is
// another address of the loopback interface on Linux.
func TestDialerBindsTheReplicasAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	from := make(chan net.Addr, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			from <- nil
			return
		}
		from <- c.RemoteAddr()
		c.Close()
	}()
	tr := &tcpTransport{nhc: config.NodeHostConfig{RaftAddress: "127.0.0.2:7001"}}
	conn, err := tr.dial(context.Background(), ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	got := <-from
	require.NotNil(t, got)
	require.Equal(t, "127.0.0.2", got.(*net.TCPAddr).IP.String())

	// A wildcard listen address says nothing of where to dial from.
	tr = &tcpTransport{nhc: config.NodeHostConfig{RaftAddress: "host.example:7001", ListenAddress: "0.0.0.0:7001"}}
	require.Nil(t, tr.localAddr())
}

// peer accepts connections on ln and passes on the message batches it
// reads; closing ln and every connection it accepted is a peer stopping.
type peer struct {
	ln    net.Listener
	got   chan pb.MessageBatch
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

func startPeer(t *testing.T, addr string) *peer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	p := &peer{ln: ln, got: make(chan pb.MessageBatch, 256), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := frameReader{conn: c}
				for {
					_, payload, err := r.next()
					if err != nil {
						return
					}
					var b pb.MessageBatch
					if b.Unmarshal(payload) == nil {
						p.got <- b
					}
				}
			}()
		}
	}()
	return p
}

func (p *peer) stop() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	<-p.done
}

func batch(index uint64) pb.MessageBatch {
	return pb.MessageBatch{Requests: []pb.Message{{Type: pb.Heartbeat, ShardID: 1, From: 1, To: 2, Commit: index}}}
}

// A connection a restarted peer closed is not Dragonboat's to see: it would
// trip its circuit breaker and drop every message to the peer for up to a
// second. The next message goes to the peer's new process on a new
// connection, and is not lost in the dead one. While the peer is down the
// sender drops messages, as a lossy link would, and reaches the peer as soon
// as it is back; only a peer down for unreachableAfter fails the send.
func TestSenderReconnectsToARestartedPeer(t *testing.T) {
	first := startPeer(t, "127.0.0.1:0")
	addr := first.ln.Addr().String()
	tr := &tcpTransport{}
	ic, err := tr.GetConnection(context.Background(), addr)
	require.NoError(t, err)
	s := ic.(*sender)
	defer s.Close()
	require.NoError(t, s.SendMessageBatch(batch(1)))
	require.Equal(t, uint64(1), (<-first.got).Requests[0].Commit)
	closed := func() bool { return !s.usable() }

	first.stop()
	require.Eventually(t, closed, 10*time.Second, time.Millisecond, "the sender did not see its peer close the connection")
	second := startPeer(t, addr)
	require.NoError(t, s.SendMessageBatch(batch(2)))
	select {
	case b := <-second.got:
		require.Equal(t, uint64(2), b.Requests[0].Commit)
	case <-time.After(10 * time.Second):
		t.Fatal("the restarted peer did not get the message")
	}

	// Down for a moment: messages are dropped, not failed, and the first
	// one after the peer is back reaches it.
	second.stop()
	require.Eventually(t, closed, 10*time.Second, time.Millisecond)
	require.NoError(t, s.SendMessageBatch(batch(3)), "a peer down for a moment is a lossy link to Dragonboat")
	third := startPeer(t, addr)
	require.Eventually(t, func() bool {
		require.NoError(t, s.SendMessageBatch(batch(4)))
		select {
		case b := <-third.got:
			require.Equal(t, uint64(4), b.Requests[0].Commit)
			return true
		default:
			return false
		}
	}, 10*time.Second, 10*time.Millisecond, "the peer back up did not get the messages sent to it")

	// Down for longer: the send fails, and Dragonboat's backoff takes over.
	third.stop()
	require.Eventually(t, closed, 10*time.Second, time.Millisecond)
	down := time.Now()
	require.Eventually(t, func() bool { return s.SendMessageBatch(batch(5)) != nil }, 20*time.Second, 20*time.Millisecond,
		"a peer down for good must fail the send")
	require.GreaterOrEqual(t, time.Since(down), unreachableAfter)
}
