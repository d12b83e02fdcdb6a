package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/peering"
)

// names is a resolver for tests: host names mapped to loopback addresses
// (the whole of 127/8 is loopback on Linux), changeable while replicas run,
// so that a test can move a name without touching the machine's files.
type names struct {
	mu      sync.Mutex
	m       map[string][]string
	lookups map[string]int
}

func newNames() *names {
	return &names{m: map[string][]string{}, lookups: map[string]int{}}
}

func (n *names) set(host string, ips ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.m[host] = ips
}

func (n *names) count(host string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lookups[host]
}

func (n *names) LookupHost(_ context.Context, host string) ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lookups[host]++
	ips, ok := n.m[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return append([]string(nil), ips...), nil
}

// samePortOn listens on one port on each of ips, the same port on all.
func samePortOn(t *testing.T, ips ...string) (int, []net.Listener) {
	t.Helper()
	for range 20 {
		first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
		require.NoError(t, err)
		port := first.Addr().(*net.TCPAddr).Port
		lns := []net.Listener{first}
		for _, ip := range ips[1:] {
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		if len(lns) == len(ips) {
			return port, lns
		}
		for _, ln := range lns {
			ln.Close()
		}
	}
	t.Fatalf("no port free on all of %v", ips)
	return 0, nil
}

// acceptOne reports the local address of the next connection ln accepts.
func acceptOne(ln net.Listener) <-chan string {
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- ""
			return
		}
		got <- c.LocalAddr().String()
		c.Close()
	}()
	return got
}

// A name is resolved at every dial, not once: after the name moves to
// another address, the next dial reaches the new one.
func TestDialResolvesTheNameAtEveryDial(t *testing.T) {
	port, lns := samePortOn(t, "127.0.0.1", "127.0.0.2")
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ns := newNames()
	ns.set("fl-0.test", "127.0.0.1")
	tr := &tcpTransport{lookup: ns.LookupHost}
	target := net.JoinHostPort("fl-0.test", strconv.Itoa(port))

	at1 := acceptOne(lns[0])
	conn, err := tr.dial(context.Background(), target)
	require.NoError(t, err)
	conn.Close()
	require.Equal(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), <-at1)

	ns.set("fl-0.test", "127.0.0.2")
	at2 := acceptOne(lns[1])
	conn, err = tr.dial(context.Background(), target)
	require.NoError(t, err)
	conn.Close()
	require.Equal(t, net.JoinHostPort("127.0.0.2", strconv.Itoa(port)), <-at2)
	require.Equal(t, 2, ns.count("fl-0.test"))
}

// The addresses a name resolves to are tried in order: one that refuses
// does not hide the next.
func TestDialTriesEachAddressOfTheName(t *testing.T) {
	port, lns := samePortOn(t, "127.0.0.1", "127.0.0.3")
	lns[1].Close() // nothing listens at 127.0.0.3:port any more
	defer lns[0].Close()
	ns := newNames()
	ns.set("fl-0.test", "127.0.0.3", "127.0.0.1")
	tr := &tcpTransport{lookup: ns.LookupHost}
	at := acceptOne(lns[0])
	conn, err := tr.dial(context.Background(), net.JoinHostPort("fl-0.test", strconv.Itoa(port)))
	require.NoError(t, err)
	conn.Close()
	require.Equal(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), <-at)
}

// A name that does not resolve, or resolves to nothing usable, is a dial
// error naming the address, not a panic or a dial to nowhere.
func TestDialReportsANameThatDoesNotResolve(t *testing.T) {
	ns := newNames()
	ns.set("empty.test")
	ns.set("junk.test", "not-an-ip", "")
	tr := &tcpTransport{lookup: ns.LookupHost}
	ctx := context.Background()

	_, err := tr.dial(ctx, "gone.test:7001")
	var dnsErr *net.DNSError
	require.ErrorAs(t, err, &dnsErr)
	require.ErrorContains(t, err, "gone.test:7001")

	for _, host := range []string{"empty.test", "junk.test"} {
		_, err = tr.dial(ctx, host+":7001")
		require.ErrorIs(t, err, errNoAddress, host)
		require.ErrorContains(t, err, host+":7001")
	}

	failing := &tcpTransport{lookup: func(context.Context, string) ([]string, error) {
		return nil, errors.New("resolver down")
	}}
	_, err = failing.dial(ctx, "fl-0.test:7001")
	require.ErrorContains(t, err, "resolver down")
}

// An IP literal never goes through the hook.
func TestDialDoesNotResolveAnIP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	ns := newNames()
	tr := &tcpTransport{lookup: ns.LookupHost}
	at := acceptOne(ln)
	conn, err := tr.dial(context.Background(), ln.Addr().String())
	require.NoError(t, err)
	conn.Close()
	require.Equal(t, ln.Addr().String(), <-at)
	ns.mu.Lock()
	defer ns.mu.Unlock()
	require.Empty(t, ns.lookups)
}

// A listen address that is a name is bound where the hook says the name
// is, which is where peers using the same hook dial it.
func TestListenResolvesANameThroughTheHook(t *testing.T) {
	port, lns := samePortOn(t, "127.0.0.2")
	lns[0].Close()
	ns := newNames()
	ns.set("fl-0.test", "127.0.0.2")
	tr := &tcpTransport{lookup: ns.LookupHost,
		nhc: config.NodeHostConfig{RaftAddress: fmt.Sprintf("fl-0.test:%d", port)}}
	ln, err := tr.listen()
	require.NoError(t, err)
	defer ln.Close()
	require.Equal(t, fmt.Sprintf("127.0.0.2:%d", port), ln.Addr().String())

	tr.nhc.RaftAddress = "gone.test:7001"
	_, err = tr.listen()
	require.ErrorContains(t, err, "gone.test")
}

// TCPConfig's mutual TLS needs all three files, as MutualTLS does; without
// any it is plain TCP carrying the lookup hook.
func TestTCPConfigConfigure(t *testing.T) {
	var nhc config.NodeHostConfig
	ns := newNames()
	require.NoError(t, TCPConfig{LookupHost: ns.LookupHost}.Configure(&nhc))
	require.False(t, nhc.MutualTLS)
	f, ok := nhc.Expert.TransportFactory.(factory)
	require.True(t, ok)
	require.NotNil(t, f.lookup)
	bound, ok := f.Bind(nil).(factory)
	require.True(t, ok)
	require.NotNil(t, bound.lookup, "Bind keeps the hook")

	require.Error(t, TCPConfig{CAFile: "ca.pem"}.Configure(&config.NodeHostConfig{}))
	require.Error(t, MutualTLS("", "", "").Configure(&config.NodeHostConfig{}))
	require.NoError(t, TCP().Configure(&config.NodeHostConfig{}))
}

// local is a peering.Local that says hello and accepts every peer.
type local struct{ hello peering.Hello }

func (l local) Hello() peering.Hello      { return l.hello }
func (l local) Check(peering.Hello) error { return nil }
func (l local) Contact(uint64)            {}

// A name whose answer is stale can lead to another replica of the group
// (Kubernetes gives a restarted pod's old IP to another pod). The dialer
// refuses the connection, instead of sending that replica messages meant
// for the one it dialled, and the next dial resolves the name again.
func TestDialRefusesAnotherReplicaBehindAName(t *testing.T) {
	port, lns := samePortOn(t, "127.0.0.1")
	lns[0].Close()
	addr2 := fmt.Sprintf("fl-2.test:%d", port)
	ns := newNames()
	ns.set("fl-2.test", "127.0.0.1")
	ns.set("fl-3.test", "127.0.0.1") // stale: replica 2 is there now
	acceptor := factory{local: local{peering.Hello{Replica: 2, Addr: addr2}}, lookup: ns.LookupHost}.Create(
		config.NodeHostConfig{RaftAddress: addr2}, func(pb.MessageBatch) {}, func(pb.Chunk) bool { return true })
	require.NoError(t, acceptor.Start())
	defer acceptor.Close()

	dialer := &tcpTransport{lookup: ns.LookupHost, local: local{peering.Hello{Replica: 1, Addr: "fl-1.test:7001"}}}
	_, err := dialer.dial(context.Background(), fmt.Sprintf("fl-3.test:%d", port))
	require.ErrorIs(t, err, errRefused)
	require.ErrorContains(t, err, "it is replica 2 at "+addr2)

	conn, err := dialer.dial(context.Background(), addr2)
	require.NoError(t, err, "the replica the address names is welcome")
	conn.Close()
}
