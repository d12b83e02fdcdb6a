package transport

import (
	"context"
	"net"
	"testing"

	"github.com/lni/dragonboat/v4/config"
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
