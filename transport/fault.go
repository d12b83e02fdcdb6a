package transport

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/peering"
)

// Network is an in-process network between replicas that a test can break:
// partition it into groups, isolate a replica, cut, slow down or make lossy
// any link in one direction or both, and heal it again. Replicas started with
// Config.Transport set to the same Network talk through it (over
// Dragonboat's in-memory channel transport), raft messages and snapshot
// chunks alike, so a replica cut off long enough catches up by snapshot after
// healing.
//
// Replicas are named by their raft address, which here is just a name: Addr
// makes unique ones. Dragonboat's channel transport keeps its addresses in
// one map per process, so an address must be unique in the process and a
// replica must be closed before another one reuses its address (restarting it
// on its Dir is fine).
//
// Faults take effect at once in both directions of a cut: a message already
// in flight on a link cut meanwhile is dropped when it arrives. A delayed link
// keeps the order of its messages, as a TCP connection would. A Network is
// safe for concurrent use.
type Network struct {
	id int64

	mu       sync.Mutex
	rng      *rand.Rand
	all      LinkFault            // applies to every link without its own
	links    map[link]LinkFault   // one-way faults
	group    map[string]int       // partition: replica -> group; nil when whole
	isolated map[string]bool      // cut from everyone
	stats    map[string]*counters // by receiving replica
	locals   map[string]peering.Local

	callOnce sync.Once
	calls    *netCalls // faultcall.go

	warnings warnings
}

type link struct{ from, to string }

// LinkFault is what happens to messages sent over a link. The zero value is a
// healthy link.
type LinkFault struct {
	Cut    bool          // nothing gets through
	Drop   float64       // probability in [0, 1] that a message is lost
	Delay  time.Duration // added to every message's latency
	Jitter time.Duration // up to this much more latency, at random
}

func (f LinkFault) healthy() bool { return f == LinkFault{} }

// Stats counts what a replica received and lost, since it first started.
// Messages are raft message batches; chunks are pieces of snapshots.
type Stats struct {
	Messages, MessagesDropped uint64
	Chunks, ChunksDropped     uint64
}

type counters struct {
	messages, messagesDropped, chunks, chunksDropped atomic.Uint64
}

var networks atomic.Int64

// NewNetwork returns a healthy network. Random losses and jitter draw from a
// generator seeded with seed, so a test can be replayed.
func NewNetwork(seed uint64) *Network {
	return &Network{
		id:       networks.Add(1),
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		links:    make(map[link]LinkFault),
		isolated: make(map[string]bool),
		stats:    make(map[string]*counters),
		locals:   make(map[string]peering.Local),
	}
}

// bind records the identity of the replica at addr (nil: none).
func (n *Network) bind(addr string, l peering.Local) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l == nil {
		delete(n.locals, addr)
	} else {
		n.locals[addr] = l
	}
}

// admit is the TCP handshake's check (handshake.go), made per batch: the
// receiver (dst, with local) checks the sender's Hello, and every message
// must be the sender's own, from the address it was checked with.
func (n *Network) admit(src, dst string, local peering.Local, b *pb.MessageBatch) bool {
	n.mu.Lock()
	peer := n.locals[src]
	n.mu.Unlock()
	if local == nil || peer == nil {
		return true
	}
	h := peer.Hello()
	if err := local.Check(h); err != nil {
		n.warnings.warn(src, fmt.Sprintf("the replica at %s refused the replica at %s: %v", dst, src, err))
		return false
	}
	if h.Addr != src {
		return false
	}
	for i := range b.Requests {
		if b.Requests[i].From != h.Replica {
			return false
		}
	}
	local.Contact(h.Replica)
	return true
}

// Addr returns a raft address for replica i of this network, unique in the
// process and the same on every call, so a restarted replica gets its own
// address back.
func (n *Network) Addr(i uint64) string { return fmt.Sprintf("faultnet-%d-%d:1", n.id, i) }

// Configure makes a replica use this network (it implements Transport).
func (n *Network) Configure(nhc *config.NodeHostConfig) error {
	if !validAddr(nhc.RaftAddress) {
		return fmt.Errorf("fault network: invalid raft address %q", nhc.RaftAddress)
	}
	if nhc.ListenAddress != "" && nhc.ListenAddress != nhc.RaftAddress {
		return fmt.Errorf("fault network: ListenAddr is not supported")
	}
	if nhc.MutualTLS {
		return fmt.Errorf("fault network: mutual TLS is not supported")
	}
	nhc.Expert.TransportFactory = &faultFactory{n: n}
	return nil
}

// validAddr accepts any printable name without spaces: addresses are only
// keys here. Dragonboat asks it about every address it is given.
func validAddr(addr string) bool {
	return addr != "" && len(addr) <= 256 && !strings.ContainsAny(addr, " \t\r\n\x00")
}

// Partition splits the network: replicas in different groups cannot talk, and
// a replica in no group is cut from all. It replaces the previous partition;
// isolation and link faults stay.
func (n *Network) Partition(groups ...[]string) {
	defer n.breakCalls() // after the unlock
	n.mu.Lock()
	defer n.mu.Unlock()
	n.group = make(map[string]int)
	for i, g := range groups {
		for _, addr := range g {
			n.group[addr] = i + 1
		}
	}
}

// Isolate cuts addr from every other replica, both ways.
func (n *Network) Isolate(addr string) {
	defer n.breakCalls() // after the unlock
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isolated[addr] = true
}

// Rejoin undoes Isolate(addr); a partition and link faults stay, where Heal
// would remove them all.
func (n *Network) Rejoin(addr string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.isolated, addr)
}

// Cut stops every message from one replica to another; the other direction
// is unaffected. Cut both ways with two calls.
func (n *Network) Cut(from, to string) { n.SetLink(from, to, LinkFault{Cut: true}) }

// SetLink sets the faults of the link from one replica to another (one way);
// the zero LinkFault restores it.
func (n *Network) SetLink(from, to string, f LinkFault) {
	defer n.breakCalls() // after the unlock
	n.mu.Lock()
	defer n.mu.Unlock()
	if f.healthy() {
		delete(n.links, link{from, to})
		return
	}
	n.links[link{from, to}] = f
}

// SetAll sets the faults of every link that has none of its own, e.g. to make
// the whole network lossy or slow.
func (n *Network) SetAll(f LinkFault) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = f
}

// Heal removes every fault: partitions, isolation, and link faults.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.all = LinkFault{}
	n.links = make(map[link]LinkFault)
	n.group = nil
	n.isolated = make(map[string]bool)
}

// Stats returns what addr received and what was lost on its way to it.
func (n *Network) Stats(addr string) Stats {
	c := n.counters(addr)
	return Stats{
		Messages: c.messages.Load(), MessagesDropped: c.messagesDropped.Load(),
		Chunks: c.chunks.Load(), ChunksDropped: c.chunksDropped.Load(),
	}
}

func (n *Network) counters(addr string) *counters {
	n.mu.Lock()
	defer n.mu.Unlock()
	c := n.stats[addr]
	if c == nil {
		c = &counters{}
		n.stats[addr] = c
	}
	return c
}

// fault returns the faults of the link from -> to now.
func (n *Network) fault(from, to string) LinkFault {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cutLocked(from, to) {
		return LinkFault{Cut: true}
	}
	if f, ok := n.links[link{from, to}]; ok {
		return f
	}
	return n.all
}

func (n *Network) cutLocked(from, to string) bool {
	if n.isolated[from] || n.isolated[to] {
		return true
	}
	if n.group != nil && n.group[from] != n.group[to] {
		return true
	}
	return n.links[link{from, to}].Cut
}

// cut reports whether nothing gets from -> to now.
func (n *Network) cut(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cutLocked(from, to)
}

// pass decides the fate of one message on a link with fault f: whether it
// is delivered, and after how long.
func (n *Network) pass(f LinkFault) (bool, time.Duration) {
	if f.Cut {
		return false, 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if f.Drop > 0 && n.rng.Float64() < f.Drop {
		return false, 0
	}
	d := f.Delay
	if f.Jitter > 0 {
		d += time.Duration(n.rng.Int64N(int64(f.Jitter)))
	}
	return true, d
}
