package transport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4/config"
	chantrans "github.com/lni/dragonboat/v4/plugin/chan"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/peering"
)

// errLinkDown fails a snapshot chunk on a cut or lossy link: Dragonboat
// then abandons that snapshot stream and sends the snapshot again later, as
// it would after a broken TCP connection.
var errLinkDown = errors.New("fault network: link down")

// maxQueued bounds the messages waiting on one delayed connection; beyond it
// messages are lost, as a full socket buffer would lose them.
const maxQueued = 4096

// faultFactory is the Dragonboat transport factory of a Network. Dragonboat's own
// channel factory cannot be used directly: its Validate panics.
type faultFactory struct {
	n     *Network
	local peering.Local // nil: no identity checks
	// self is the address of the transport Create made (set by Bind),
	// for DialCall.
	self *atomic.Pointer[string]
}

// Bind implements peering.Binder. A Network has no connections to open
// with a handshake, so it checks the sender's Hello on every batch, as the
// TCP transport's handshake would have when the connection opened.
func (f *faultFactory) Bind(l peering.Local) config.TransportFactory {
	return &faultFactory{n: f.n, local: l, self: new(atomic.Pointer[string])}
}

func (f *faultFactory) Create(nhc config.NodeHostConfig, handler raftio.MessageHandler,
	chunks raftio.ChunkHandler) raftio.ITransport {
	t := &faultTransport{n: f.n, self: nhc.RaftAddress, local: f.local, stop: make(chan struct{})}
	if f.self != nil {
		self := nhc.RaftAddress
		f.self.Store(&self)
	}
	in := f.n.counters(t.self)
	f.n.bind(t.self, f.local)
	recv := func(b pb.MessageBatch) {
		// A message in flight when its link was cut is lost on arrival.
		src := b.SourceAddress
		if f.n.cut(src, t.self) {
			in.messagesDropped.Add(1)
			return
		}
		if !f.n.admit(src, t.self, f.local, &b) {
			in.messagesDropped.Add(1)
			return
		}
		in.messages.Add(1)
		handler(b)
	}
	recvChunk := func(c pb.Chunk) bool {
		in.chunks.Add(1)
		return chunks(c)
	}
	t.inner = chantrans.NewChanTransport(nhc, recv, recvChunk)
	return t
}

func (f *faultFactory) Validate(addr string) bool { return validAddr(addr) }

type faultTransport struct {
	n     *Network
	self  string
	local peering.Local
	inner raftio.ITransport
	calls sync.WaitGroup // call handlers (faultcall.go)

	mu      sync.Mutex
	stopped bool
	stop    chan struct{}
	wg      sync.WaitGroup // delivery goroutines
}

func (t *faultTransport) Name() string { return "fencelock-fault-network" }

func (t *faultTransport) Start() error {
	if err := t.inner.Start(); err != nil {
		return err
	}
	t.n.startCalls(t)
	return nil
}

func (t *faultTransport) Close() error {
	t.mu.Lock()
	if !t.stopped {
		t.stopped = true
		close(t.stop)
	}
	t.mu.Unlock()
	t.n.stopCalls(t)
	t.wg.Wait()
	return t.inner.Close()
}

func (t *faultTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	inner, err := t.inner.GetConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	c := &faultConn{t: t, target: target, inner: inner, queue: make(chan delayed, maxQueued),
		closed: make(chan struct{}), broken: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		inner.Close()
		return nil, chantrans.ErrClosed
	}
	t.wg.Add(1)
	go c.deliver()
	return c, nil
}

func (t *faultTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	inner, err := t.inner.GetSnapshotConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return &faultSnapshotConn{t: t, target: target, inner: inner}, nil
}

// faultConn carries raft messages to one target. Every message goes through
// its delivery goroutine, in order, after the delay its link has when it is
// sent.
type faultConn struct {
	t      *faultTransport
	target string
	inner  raftio.IConnection
	queue  chan delayed

	closeOnce sync.Once
	closed    chan struct{} // closed by Close
	broken    chan struct{} // closed when delivery stops
}

// delayed is a message waiting for its time. It is kept encoded: Dragonboat
// reuses a batch's memory once SendMessageBatch returns.
type delayed struct {
	at   time.Time
	data []byte
}

func (c *faultConn) Close() {
	c.closeOnce.Do(func() { close(c.closed) })
}

// SendMessageBatch never fails for a fault: a lost message is lost silently,
// as on a real network, so that Dragonboat does not back off and a healed
// link works again at once.
func (c *faultConn) SendMessageBatch(b pb.MessageBatch) error {
	ok, delay := c.t.n.pass(c.t.n.fault(c.t.self, c.target))
	if !ok {
		c.t.n.counters(c.target).messagesDropped.Add(1)
		return nil
	}
	select {
	case <-c.broken:
		return chantrans.ErrClosed
	default:
	}
	select {
	case c.queue <- delayed{at: time.Now().Add(delay), data: pb.MustMarshal(&b)}:
	default:
		c.t.n.counters(c.target).messagesDropped.Add(1)
	}
	return nil
}

func (c *faultConn) deliver() {
	defer c.t.wg.Done()
	defer close(c.broken)
	defer c.inner.Close()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var d delayed
		select {
		case d = <-c.queue:
		case <-c.closed:
			return
		case <-c.t.stop:
			return
		}
		if wait := time.Until(d.at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-c.closed:
				return
			case <-c.t.stop:
				return
			}
		}
		if c.t.n.cut(c.t.self, c.target) { // cut while it waited
			c.t.n.counters(c.target).messagesDropped.Add(1)
			continue
		}
		var b pb.MessageBatch
		if err := b.Unmarshal(d.data); err != nil {
			continue // cannot happen: encoded above by the same library
		}
		if err := c.inner.SendMessageBatch(b); err != nil {
			return // the receiver went away; Dragonboat reconnects
		}
	}
}

// faultSnapshotConn carries the chunks of one snapshot stream. A chunk that
// is lost fails the stream, and Dragonboat retries the snapshot later.
type faultSnapshotConn struct {
	t      *faultTransport
	target string
	inner  raftio.ISnapshotConnection
}

func (c *faultSnapshotConn) Close() { c.inner.Close() }

func (c *faultSnapshotConn) SendChunk(chunk pb.Chunk) error {
	ok, delay := c.t.n.pass(c.t.n.fault(c.t.self, c.target))
	if !ok {
		c.t.n.counters(c.target).chunksDropped.Add(1)
		return errLinkDown
	}
	if delay > 0 {
		timer := time.NewTimer(delay)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-c.t.stop:
			return chantrans.ErrClosed
		}
	}
	return c.inner.SendChunk(chunk)
}
