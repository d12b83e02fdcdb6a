package fencelocktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
	"github.com/fencelock/fencelock/internal/testhook"
	"github.com/fencelock/fencelock/transport"
)

// Cluster is a group of replicas, IDs 1 to size, running in the test's
// process on a transport.Network of their own, each with its own data dir:
// as several hosts would run them, without sockets (so no race for free
// ports). Its methods are safe for concurrent use; those that fail the test
// must be called from the test's goroutine, as t.Fatal must.
type Cluster struct {
	t       testing.TB
	net     *transport.Network
	members map[uint64]string
	dirs    map[uint64]string
	tune    func(*fencelock.Config)
	http    []httpapi.Option // with serve: each replica's API options
	serve   bool
	local   bool                            // WithoutForwarding
	wrap    func(http.Handler) http.Handler // WithHandler
	restore []byte                          // WithRestore's backup

	mu     sync.Mutex
	nodes  map[uint64]*fencelock.Node
	apis   map[uint64]*httpapi.Server
	srvs   map[uint64]*httptest.Server
	urls   map[uint64]string
	frozen map[uint64]chan struct{} // closed by Thaw
}

// Option changes how NewCluster starts its replicas.
type Option func(*Cluster)

// WithConfig calls tune with each replica's Config before it starts (and
// restarts): its ReplicaID, Members, Dir and Transport are set, the rest is
// the test's.
func WithConfig(tune func(*fencelock.Config)) Option {
	return func(c *Cluster) { c.tune = tune }
}

// WithHTTP makes each replica serve the HTTP API (httpapi.New with opts,
// after a quiet logger and the kit's own httpapi.WithPeers, unless
// WithoutForwarding) on a loopback URL that stays the same across
// restarts: see URL.
func WithHTTP(opts ...httpapi.Option) Option {
	return func(c *Cluster) { c.serve, c.http = true, opts }
}

// WithoutForwarding leaves the kit's httpapi.WithPeers out of WithHTTP:
// each replica answers every call itself, as one serving alone would (a
// call for a session another replica owns is refused, not forwarded).
func WithoutForwarding() Option {
	return func(c *Cluster) { c.local = true }
}

// WithHandler puts wrap's handler in front of each replica's HTTP endpoint
// (WithHTTP), once for the cluster's life: a test's check of every
// response, say. What it wraps serves the replica's API while it runs
// (through httpapi.Server.ServeHTTP, on the same request), and holds or
// drops calls while it is frozen or down.
func WithHandler(wrap func(http.Handler) http.Handler) Option {
	return func(c *Cluster) { c.wrap = wrap }
}

// WithNetwork starts the replicas on net, rather than on a network of
// their own, so that a test can break it before they start: replica id's
// address is net.Addr(id) (isolate it, cut its links), and Network returns
// net. A network serves one cluster at a time.
func WithNetwork(net *transport.Network) Option {
	return func(c *Cluster) { c.net = net }
}

// WithRestore seeds each replica's empty Dir from backup (a file
// Node.Snapshot wrote) by fencelock.Restore before it first starts, as a
// deployment restored after a disaster is: the cluster starts with the
// backup's groups, locks, sessions and tokens. A backup Restore refuses
// (ErrInvalidBackup, or ErrInvalidConfig for Members without a group's
// voters) fails the test before any replica starts.
func WithRestore(backup []byte) Option {
	return func(c *Cluster) { c.restore = backup }
}

// quiet keeps Dragonboat's and the API's logs out of the test's output.
var quiet = slog.New(slog.DiscardHandler)

// NewCluster starts size replicas at once and returns when each has
// started (fencelock.Start); a replica that fails to start fails the test.
// The test's cleanup closes them all. Use Leader to wait for the group to
// elect one.
func NewCluster(t testing.TB, size int, opts ...Option) *Cluster {
	t.Helper()
	if size < 1 {
		t.Fatalf("fencelocktest: a cluster of %d replicas", size)
	}
	c := &Cluster{t: t, net: transport.NewNetwork(uint64(size)), members: map[uint64]string{},
		dirs: map[uint64]string{}, nodes: map[uint64]*fencelock.Node{}, apis: map[uint64]*httpapi.Server{},
		srvs: map[uint64]*httptest.Server{}, urls: map[uint64]string{}, frozen: map[uint64]chan struct{}{}}
	for _, o := range opts {
		o(c)
	}
	base := t.TempDir()
	for id := uint64(1); id <= uint64(size); id++ {
		c.members[id] = c.net.Addr(id)
		c.dirs[id] = filepath.Join(base, fmt.Sprint(id))
		if c.serve {
			h := c.handler(id)
			if c.wrap != nil {
				h = c.wrap(h)
			}
			c.srvs[id] = httptest.NewUnstartedServer(h)
			c.urls[id] = "http://" + c.srvs[id].Listener.Addr().String()
		}
	}
	t.Cleanup(c.closeAll)
	if c.restore != nil {
		for id := range c.members {
			if _, err := fencelock.Restore(bytes.NewReader(c.restore), c.config(id)); err != nil {
				t.Fatalf("fencelocktest: restoring replica %d: %v", id, err)
			}
		}
	}
	for _, s := range c.srvs {
		s.Start()
	}
	// Every replica starts at once, as their hosts would: one that dials a
	// peer not yet listening backs off.
	var wg sync.WaitGroup
	errs := make([]error, size+1)
	for id := range c.members {
		wg.Go(func() { errs[id] = c.start(id) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("fencelocktest: starting the cluster: %v", err)
	}
	return c
}

// config is replica id's Config.
func (c *Cluster) config(id uint64) fencelock.Config {
	cfg := fencelock.Config{ReplicaID: id, Members: c.members, Dir: c.dirs[id], Transport: c.net, Logger: quiet}
	if c.tune != nil {
		c.tune(&cfg)
	}
	return cfg
}

// start starts replica id on its Dir, and its API if the cluster serves it.
func (c *Cluster) start(id uint64) error {
	n, err := fencelock.Start(context.Background(), c.config(id))
	if err != nil {
		return fmt.Errorf("replica %d: %w", id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes[id] = n
	if c.serve {
		opts := []httpapi.Option{httpapi.WithLogger(quiet)}
		if !c.local {
			opts = append(opts, httpapi.WithPeers(c.urls))
		}
		c.apis[id] = httpapi.New(n, append(opts, c.http...)...)
	}
	return nil
}

// handler is replica id's HTTP endpoint: its API while it runs, held while
// it is frozen, and a dropped connection while it is down, as a dead
// process's port would give.
func (c *Cluster) handler(id uint64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for {
			c.mu.Lock()
			api, hold := c.apis[id], c.frozen[id]
			c.mu.Unlock()
			if hold == nil {
				if api == nil {
					panic(http.ErrAbortHandler) // the server drops the connection, quietly
				}
				api.ServeHTTP(w, r)
				return
			}
			select {
			case <-hold:
			case <-r.Context().Done():
				return
			}
		}
	})
}

// Network returns the replicas' network, for faults finer than Partition
// and Isolate: cut, slow down or make lossy one link (transport.Network).
func (c *Cluster) Network() *transport.Network { return c.net }

// Addr returns replica id's raft address on the Network.
func (c *Cluster) Addr(id uint64) string { return c.members[id] }

// Members returns each replica's raft address, by ID: a new map.
func (c *Cluster) Members() map[uint64]string {
	m := make(map[uint64]string, len(c.members))
	for id, a := range c.members {
		m[id] = a
	}
	return m
}

// Dir returns replica id's data dir (Config.Dir), the same across
// restarts: while the replica is stopped or crashed a test may read it, or
// replace it (an operator's copy of an older one), before Restart. It is
// "" for an ID that is not a member.
func (c *Cluster) Dir(id uint64) string { return c.dirs[id] }

// Node returns replica id's running Node; nil while it is stopped or
// crashed.
func (c *Cluster) Node(id uint64) *fencelock.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// URL returns the base URL of replica id's HTTP API (WithHTTP), the same
// across restarts; "" without WithHTTP.
func (c *Cluster) URL(id uint64) string { return c.urls[id] }

// API returns replica id's HTTP API (WithHTTP) while the replica runs, for
// a test that puts an endpoint of its own in front of it; nil while it is
// stopped or crashed, and without WithHTTP.
func (c *Cluster) API(id uint64) *httpapi.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apis[id]
}

// Leader waits until the running replicas that are not frozen agree on the
// leader of the default group, and returns its ID; it fails the test if
// ctx ends first.
func (c *Cluster) Leader(ctx context.Context) uint64 {
	c.t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if id := c.agreedLeader(); id != 0 {
			return id
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("fencelocktest: the replicas agree on no leader: %v", ctx.Err())
		case <-tick.C:
		}
	}
}

// agreedLeader is the leader the running, unfrozen replicas agree on; 0 for
// none, or one that is not among them.
func (c *Cluster) agreedLeader() uint64 {
	c.mu.Lock()
	var nodes []*fencelock.Node
	for id, n := range c.nodes {
		if c.frozen[id] == nil {
			nodes = append(nodes, n)
		}
	}
	c.mu.Unlock()
	var leader uint64
	for _, n := range nodes {
		st := n.Status()
		if st.LeaderID == 0 || (leader != 0 && st.LeaderID != leader) {
			return 0
		}
		leader = st.LeaderID
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[leader] == nil || c.frozen[leader] != nil {
		return 0
	}
	return leader
}

// Partition splits the network into groups of replicas by ID: replicas in
// different groups cannot talk, one in no group talks to none. It replaces
// the previous partition; Heal ends it.
func (c *Cluster) Partition(groups ...[]uint64) {
	addrs := make([][]string, len(groups))
	for i, g := range groups {
		for _, id := range g {
			addrs[i] = append(addrs[i], c.members[id])
		}
	}
	c.net.Partition(addrs...)
}

// Isolate cuts replica id from every other, both ways, until Heal.
func (c *Cluster) Isolate(id uint64) { c.net.Isolate(c.members[id]) }

// Heal ends every network fault (Partition, Isolate, the Network's link
// faults) but a Freeze's, which only Thaw ends.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.frozen) == 0 {
		c.net.Heal()
		return
	}
	// Network.Heal would reach a frozen replica until it is isolated
	// again; one partition of all and healthy links leave isolation alone.
	var all []string
	for _, a := range c.members {
		all = append(all, a)
	}
	c.net.Partition(all)
	c.net.SetAll(transport.LinkFault{})
	for _, from := range all {
		for _, to := range all {
			c.net.SetLink(from, to, transport.LinkFault{})
		}
	}
	for id, a := range c.members {
		if c.frozen[id] == nil {
			c.net.Rejoin(a)
		}
	}
}

// Freeze holds replica id as a host that hangs: no raft message reaches it
// or leaves it, and calls to its HTTP API (WithHTTP) wait, until Thaw. Its
// Node's own timers run on, and calls made on the Node itself are not
// held: they find no quorum. It fails the test if the replica is not
// running or is frozen already.
func (c *Cluster) Freeze(id uint64) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodes[id] == nil || c.frozen[id] != nil {
		c.t.Fatalf("fencelocktest: replica %d is not running, or frozen already: nothing to freeze", id)
	}
	c.frozen[id] = make(chan struct{})
	c.net.Isolate(c.members[id])
}

// Thaw ends replica id's Freeze: its network is as it was (a Partition or
// link faults made meanwhile stay), and the held calls go on. A replica not
// frozen is left alone, so that a test may defer it.
func (c *Cluster) Thaw(id uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if hold := c.frozen[id]; hold != nil {
		c.net.Rejoin(c.members[id])
		delete(c.frozen, id)
		close(hold)
	}
}

// Stop closes replica id cleanly (Node.Close: its leadership handed over,
// its log synced), thawing it first; a replica not running is left alone.
func (c *Cluster) Stop(id uint64) {
	if n, api := c.down(id); n != nil {
		if api != nil {
			api.Close()
		}
		n.Close()
	}
}

// Crash stops replica id as the death of its process would: unlike Stop,
// it hands nothing over and loses what its log store had not synced (the
// commit index it defers), so Restart finds the older state on disk. It
// waits up to 2s for a deferred commit index to drop; a replica not
// running is left alone.
func (c *Cluster) Crash(id uint64) {
	n, api := c.down(id)
	if n == nil {
		return
	}
	if api != nil {
		api.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	testhook.Crash(ctx, n)
}

// down takes replica id out of the cluster's running ones, thawed, and
// returns its Node and API to close; nil if it is not running.
func (c *Cluster) down(id uint64) (*fencelock.Node, *httpapi.Server) {
	c.Thaw(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	n, api := c.nodes[id], c.apis[id]
	delete(c.nodes, id)
	delete(c.apis, id)
	return n, api
}

// Restart starts replica id again on its Dir after Stop or Crash, and
// returns its Node; it fails the test if the replica is running or does
// not start.
func (c *Cluster) Restart(id uint64) *fencelock.Node {
	c.t.Helper()
	if _, ok := c.members[id]; !ok || c.Node(id) != nil {
		c.t.Fatalf("fencelocktest: replica %d is running or not a member: nothing to restart", id)
	}
	if err := c.start(id); err != nil {
		c.t.Fatalf("fencelocktest: restart: %v", err)
	}
	return c.Node(id)
}

// closeAll stops every replica and its HTTP server, as the test ends.
func (c *Cluster) closeAll() {
	var wg sync.WaitGroup
	for id := range c.members {
		wg.Go(func() { c.Stop(id) })
	}
	wg.Wait()
	for _, s := range c.srvs {
		s.Close()
	}
}
