package fencelock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock/transport"
	"github.com/stretchr/testify/require"
)

// testCluster is a group of replicas in this process on loopback ports, each
// with its own data dir, as several hosts would run them.
type testCluster struct {
	t       testing.TB
	net     *transport.Network // nil: real TCP on loopback
	members map[uint64]string
	dirs    map[uint64]string
	nodes   map[uint64]*Node
	tune    func(*Config)
	lost    uint64 // deferred raft states the crashes lost (testhook.Crash)
}

// quietLogger keeps Dragonboat's noise out of test output.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// freeAddr returns a loopback port free now, below Linux's ephemeral range
// so that no kernel-chosen port takes it before a replica listens on it,
// and never one it returned before (two picks before the first one's
// replica binds it could name the same port). It is
// fencelocktest.FreePort, which this package's tests cannot import:
// fencelocktest imports this package.
func freeAddr(t testing.TB) string {
	t.Helper()
	for range 1000 {
		port := 10000 + rand.IntN(22000)
		if _, used := freeAddrs.LoadOrStore(port, true); used {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			defer l.Close()
			return l.Addr().String()
		}
	}
	t.Fatal("no free loopback port below the ephemeral range")
	return ""
}

// freeAddrs are the ports freeAddr tried in this process.
var freeAddrs sync.Map

// newCluster starts a group of size replicas on an in-process
// transport.Network: no sockets, so no race for free ports. Tests of the
// TCP transport itself (TLS, handshakes, forged frames) use newTCPCluster.
func newCluster(t testing.TB, size int, tune func(*Config)) *testCluster {
	t.Helper()
	return startCluster(t, transport.NewNetwork(uint64(size)), size, tune)
}

// newTCPCluster starts a group of size replicas on real TCP over loopback.
func newTCPCluster(t testing.TB, size int, tune func(*Config)) *testCluster {
	t.Helper()
	return startCluster(t, nil, size, tune)
}

func startCluster(t testing.TB, net *transport.Network, size int, tune func(*Config)) *testCluster {
	t.Helper()
	c := unstartedCluster(t, net, size, tune)
	c.startAll()
	return c
}

// unstartedCluster gives size replicas their addresses and Dirs, and
// registers the cleanup that closes those started, but starts none: a test
// that prepares the Dirs first (Restore) starts them itself (startAll).
func unstartedCluster(t testing.TB, net *transport.Network, size int, tune func(*Config)) *testCluster {
	c := &testCluster{t: t, net: net, members: map[uint64]string{}, dirs: map[uint64]string{},
		nodes: map[uint64]*Node{}, tune: tune}
	base := t.TempDir()
	for id := uint64(1); id <= uint64(size); id++ {
		c.members[id] = c.addr(id)
		c.dirs[id] = filepath.Join(base, fmt.Sprint(id))
	}
	t.Cleanup(c.closeAll)
	return c
}

// addr returns an address for replica id: on the cluster's network, or a
// free loopback port.
func (c *testCluster) addr(id uint64) string {
	if c.net != nil {
		return c.net.Addr(id)
	}
	return freeAddr(c.t)
}

func (c *testCluster) config(id uint64) Config {
	cfg := Config{ReplicaID: id, Members: c.members, Dir: c.dirs[id], Logger: quietLogger}
	if c.net != nil {
		cfg.Transport = c.net
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

// startAll starts every replica at once, as their hosts would: a replica
// that dials a peer not yet listening backs off for up to a second.
func (c *testCluster) startAll() {
	c.t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs error
	for id := range c.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := Start(context.Background(), c.config(id))
			mu.Lock()
			defer mu.Unlock()
			errs = errors.Join(errs, err)
			if n != nil {
				c.nodes[id] = n
			}
		}()
	}
	wg.Wait()
	require.NoError(c.t, errs)
}

// start starts (or restarts, on its dir) replica id.
func (c *testCluster) start(id uint64) *Node {
	c.t.Helper()
	n, err := Start(context.Background(), c.config(id))
	require.NoError(c.t, err)
	c.nodes[id] = n
	return n
}

// stop closes replica id cleanly (Node.Close). A test that means the death
// of its process uses crash.
func (c *testCluster) stop(id uint64) {
	if n := c.nodes[id]; n != nil {
		n.Close()
		delete(c.nodes, id)
	}
}

func (c *testCluster) closeAll() {
	for id := range c.nodes {
		c.stop(id)
	}
}

func (c *testCluster) node(id uint64) *Node { return c.nodes[id] }

// pauseBalancers stops the leader balancer of every running replica, for
// a test that places leaders itself: the balancer would move them.
func (c *testCluster) pauseBalancers() {
	for _, n := range c.nodes {
		n.host.TestingPauseBalancer(true)
	}
}

// leader waits until the running replicas agree on a leader, and returns it.
func (c *testCluster) leader(ctx context.Context) uint64 {
	c.t.Helper()
	for {
		var leader uint64
		agree := true
		for _, n := range c.nodes {
			st := n.Status()
			if leader == 0 {
				leader = st.LeaderID
			}
			agree = agree && st.LeaderID != 0 && st.LeaderID == leader
		}
		if agree && leader != 0 && c.nodes[leader] != nil {
			return leader
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("no leader: %v", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
