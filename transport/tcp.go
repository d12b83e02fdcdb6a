package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/logger"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/peering"
)

// fencelock's TCP transport. It replaces Dragonboat's built-in one, whose
// receiver allocates whatever length a frame header claims: one 20-byte
// message from anyone who can reach the raft port could make it allocate
// without limit, or crash the process.
const (
	// MaxInboundConns bounds the connections a replica accepts at once;
	// more are closed on arrival. Each peer uses one for raft messages and
	// one per snapshot it streams.
	MaxInboundConns  = 256
	handshakeTimeout = 5 * time.Second
	dialTimeout      = 5 * time.Second
)

// plog reaches the application's logger through fencelock's bridge for
// Dragonboat's logging (internal/dblog), which logs errors at warn level.
var plog = logger.GetLogger("fencelock-transport")

// lookupFunc resolves a host name to IP addresses (TCPConfig.LookupHost).
type lookupFunc = func(ctx context.Context, host string) ([]string, error)

// factory makes the transport for one NodeHost (config.TransportFactory).
// With a Local bound (handshake.go), connections open with a handshake.
type factory struct {
	local  peering.Local
	lookup lookupFunc // nil: the system's resolver
	cell   *tcpCell   // set by Bind: the transport Create made, for DialCall
}

func (f factory) Create(nhc config.NodeHostConfig, handler raftio.MessageHandler,
	chunks raftio.ChunkHandler) raftio.ITransport {
	t := &tcpTransport{nhc: nhc, handler: handler, chunks: chunks, local: f.local, lookup: f.lookup,
		conns: make(map[net.Conn]struct{}), slots: make(chan struct{}, MaxInboundConns)}
	f.cell.set(t)
	return t
}

// Validate accepts host:port addresses with a non-empty host and a numeric
// port.
func (factory) Validate(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.Atoi(port)
	return err == nil && p > 0 && p < 65536
}

type tcpTransport struct {
	nhc     config.NodeHostConfig
	handler raftio.MessageHandler
	chunks  raftio.ChunkHandler
	server  *tls.Config   // nil without mutual TLS
	local   peering.Local // nil: no handshake
	lookup  lookupFunc    // nil: the system's resolver

	warnings warnings

	ln     net.Listener
	slots  chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool

	refused atomic.Uint64 // connections or frames refused, for the log
	logged  atomic.Int64  // unix nanos of the last refusal logged
}

var _ raftio.ITransport = (*tcpTransport)(nil)

func (t *tcpTransport) Name() string { return "fencelock-tcp" }

func (t *tcpTransport) Start() error {
	var err error
	if t.server, err = t.nhc.GetServerTLSConfig(); err != nil {
		return err
	}
	if t.server != nil {
		t.server = t.server.Clone()
		t.server.MinVersion = tls.VersionTLS13
	}
	if t.ln, err = t.listen(); err != nil {
		return err
	}
	t.wg.Add(1)
	go t.accept()
	return nil
}

func (t *tcpTransport) Close() error {
	t.mu.Lock()
	t.closed = true
	for c := range t.conns {
		c.Close()
	}
	t.mu.Unlock()
	if t.ln != nil {
		t.ln.Close()
	}
	t.wg.Wait()
	return nil
}

func (t *tcpTransport) accept() {
	defer t.wg.Done()
	for {
		conn, err := t.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		select {
		case t.slots <- struct{}{}:
		default:
			t.refuse(conn.RemoteAddr(), errors.New("too many connections"))
			conn.Close()
			continue
		}
		if !t.track(conn) {
			<-t.slots
			conn.Close()
			return
		}
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			defer func() { <-t.slots }()
			defer t.untrack(conn)
			t.serve(conn)
		}()
	}
}

func (t *tcpTransport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *tcpTransport) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
	c.Close()
}

// serve reads frames from one peer until it breaks a rule or goes away. A
// peer without a certificate signed by the CA does not get past the
// handshake, so nothing it sends is ever decoded.
func (t *tcpTransport) serve(conn net.Conn) {
	if t.server != nil {
		tc := tls.Server(conn, t.server)
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			t.refuse(conn.RemoteAddr(), err)
			return
		}
		t.swap(conn, tc)
		conn = tc
	}
	r := frameReader{conn: conn}
	peer, verified, err := t.welcome(conn, &r)
	if err != nil {
		if errors.Is(err, errFrame) {
			t.refuse(conn.RemoteAddr(), err)
		}
		return
	}
	for first := true; ; first = false {
		kind, payload, err := r.next()
		if err != nil {
			if errors.Is(err, errFrame) {
				t.refuse(conn.RemoteAddr(), err)
			}
			return
		}
		if first && kind == kindCallOpen {
			t.takeCall(conn, r, peer, verified)
			return
		}
		if kind != kindBatch && kind != kindChunk {
			t.refuse(conn.RemoteAddr(), fmt.Errorf("%w: kind %d after the handshake", errFrame, kind))
			return
		}
		if err := checkBudget(kind, payload); err != nil {
			t.refuse(conn.RemoteAddr(), err)
			return
		}
		if kind == kindBatch {
			var batch pb.MessageBatch
			if err := batch.Unmarshal(payload); err != nil {
				t.refuse(conn.RemoteAddr(), err)
				return
			}
			if err := admit(&batch, peer, verified); err != nil {
				t.refuse(conn.RemoteAddr(), err)
				return
			}
			if verified {
				t.local.Contact(peer.Replica)
			}
			t.handler(batch)
			continue
		}
		var chunk pb.Chunk
		if err := chunk.Unmarshal(payload); err != nil {
			t.refuse(conn.RemoteAddr(), err)
			return
		}
		if !t.chunks(chunk) {
			return
		}
	}
}

// swap replaces a tracked connection by its TLS wrapper, so Close closes it.
func (t *tcpTransport) swap(old, tc net.Conn) {
	t.mu.Lock()
	delete(t.conns, old)
	t.conns[tc] = struct{}{}
	t.mu.Unlock()
}

// refuse logs refused traffic at most once a minute: an impostor or a
// scanner must not flood the log. Refusals are counted meanwhile.
func (t *tcpTransport) refuse(from net.Addr, why error) {
	n := t.refused.Add(1)
	now := time.Now().UnixNano()
	last := t.logged.Load()
	if now-last < int64(time.Minute) || !t.logged.CompareAndSwap(last, now) {
		return
	}
	plog.Errorf("refused traffic on the raft port %s from %v: %v (%d refused since start)",
		t.nhc.GetListenAddress(), from, why, n)
}

// listen binds the listen address. A name in it is resolved by the lookup
// hook when there is one (the system resolver does it otherwise), so that a
// name mapped by the hook is listened on where peers will dial it.
func (t *tcpTransport) listen() (net.Listener, error) {
	addr := t.nhc.GetListenAddress()
	host, port, err := net.SplitHostPort(addr)
	if t.lookup == nil || err != nil || net.ParseIP(host) != nil {
		return net.Listen("tcp", addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	defer cancel()
	ips, err := t.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, port))
		if err == nil {
			return ln, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("listen on %s (%s): %w", addr, strings.Join(ips, ", "), errors.Join(errs...))
}

// resolve looks host up with the hook, whose answer is not trusted to be
// a list of IPs.
func (t *tcpTransport) resolve(ctx context.Context, host string) ([]string, error) {
	ips, err := t.lookup(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	out := ips[:0:0]
	for _, ip := range ips {
		if _, err := netip.ParseAddr(ip); err == nil { // zones allowed
			out = append(out, ip)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("resolve %s: %w", host, errNoAddress)
	}
	return out, nil
}

// errNoAddress reports a name that resolved to no IP address.
var errNoAddress = errors.New("no IP address")

// dial opens a connection to the peer at target and greets it. A name in
// target is resolved here, at every dial, so that a peer back under the
// same name at another IP is reached there: Dragonboat dials again after a
// connection fails.
func (t *tcpTransport) dial(ctx context.Context, target string) (net.Conn, error) {
	d := net.Dialer{Timeout: dialTimeout, KeepAlive: 10 * time.Second, LocalAddr: t.localAddr()}
	conn, err := t.connect(ctx, &d, target)
	if err != nil && d.LocalAddr != nil && errors.Is(err, syscall.EADDRNOTAVAIL) {
		// The raft address is not on this host (a NAT): dial from the
		// default address instead.
		d.LocalAddr = nil
		conn, err = t.connect(ctx, &d, target)
	}
	if err != nil {
		return nil, err
	}
	cfg, err := t.nhc.GetClientTLSConfig(target)
	if err != nil {
		conn.Close()
		return nil, err
	}
	if cfg != nil {
		cfg.MinVersion = tls.VersionTLS13
		tc := tls.Client(conn, cfg)
		hctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
		defer cancel()
		if err := tc.HandshakeContext(hctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	if err := t.greet(conn, target); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// connect opens the TCP connection to target. Without a lookup hook the
// dialer resolves a name itself (Go's resolver caches nothing); with one,
// the hook's addresses are tried in order.
func (t *tcpTransport) connect(ctx context.Context, d *net.Dialer, target string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(target)
	if t.lookup == nil || err != nil || net.ParseIP(host) != nil {
		return d.DialContext(ctx, "tcp", target)
	}
	ips, err := t.resolve(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	var errs []error
	for _, ip := range ips {
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip, port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("dial %s (%s): %w", target, strings.Join(ips, ", "), errors.Join(errs...))
}

// localAddr is the address peer connections leave from: the replica's own
// host (ListenAddr's if it names one, else the raft address's), so that
// firewall rules written by address hold. nil when neither is an IP
// literal, or the listen address is a wildcard.
func (t *tcpTransport) localAddr() net.Addr {
	for _, a := range []string{t.nhc.ListenAddress, t.nhc.RaftAddress} {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		ip := net.ParseIP(host)
		if ip == nil {
			return nil
		}
		if ip.IsUnspecified() {
			continue
		}
		return &net.TCPAddr{IP: ip}
	}
	return nil
}

func (t *tcpTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	conn, err := t.dial(ctx, target)
	if err != nil {
		return nil, err
	}
	s := &sender{conn: conn, redial: func() (net.Conn, error) { return t.dial(ctx, target) }}
	s.watch()
	return s, nil
}

func (t *tcpTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	conn, err := t.dial(ctx, target)
	if err != nil {
		return nil, err
	}
	return &sender{conn: conn}, nil
}

// sender writes frames to one peer; Dragonboat uses each from one goroutine.
//
// A message sender (redial set) hides from Dragonboat a peer that is gone
// for a moment, as at a restart. Dragonboat keeps an idle connection for a
// minute, and a failure it is told of trips its circuit breaker for the
// peer, which then drops every message to it for 250 ms to 1 s, at every
// failed retry, and so for up to a second after the peer is back: a leader
// would reach a restarted follower late, and one that just took over could
// lose its quorum meanwhile. So the sender watches for the close (the
// acceptor never writes after the handshake: any read ending means the
// connection is gone); before a write on a closed connection, or after a
// write that failed, it dials again, at most every redialEvery. While the
// peer cannot be reached, for up to unreachableAfter, it drops the messages
// as a lossy link would, and raft sends again what matters; only then does
// it report the failure, and Dragonboat's own backoff takes over.
type sender struct {
	conn   net.Conn // nil while the peer cannot be reached
	buf    []byte
	redial func() (net.Conn, error) // nil: a snapshot stream, not redialled
	closed chan struct{}            // closed once conn is known to be gone
	down   time.Time                // the first failed redial since conn broke
	dialed time.Time                // the last redial
}

const (
	redialEvery      = 50 * time.Millisecond
	unreachableAfter = 2 * time.Second
)

// watch starts reading conn until it ends; closed tells when it did.
func (s *sender) watch() {
	s.closed = make(chan struct{})
	go func(conn net.Conn, closed chan struct{}) {
		var b [1]byte
		conn.Read(b[:]) // returns when the peer or Close closes conn
		close(closed)
	}(s.conn, s.closed)
}

// usable reports whether conn is open, as far as the sender knows.
func (s *sender) usable() bool {
	if s.conn == nil {
		return false
	}
	select {
	case <-s.closed:
		return false
	default:
		return true
	}
}

// reconnect replaces a broken connection by a new one to the same peer. It
// returns errUnreachable, to drop the message, while the peer has been
// unreachable for less than unreachableAfter, and the dial's error after.
func (s *sender) reconnect() error {
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	now := time.Now()
	if s.down.IsZero() {
		s.down = now
	}
	var err error
	if now.Sub(s.dialed) >= redialEvery {
		s.dialed = now
		var conn net.Conn
		if conn, err = s.redial(); err == nil {
			s.conn, s.down = conn, time.Time{}
			s.watch()
			return nil
		}
	}
	if now.Sub(s.down) < unreachableAfter {
		return errUnreachable
	}
	if err == nil {
		err = fmt.Errorf("%w for %v", errUnreachable, now.Sub(s.down).Round(time.Millisecond))
	}
	return err
}

// errUnreachable is a peer that cannot be reached yet.
var errUnreachable = errors.New("peer unreachable")

func (s *sender) Close() {
	if s.conn != nil {
		s.conn.Close()
	}
}

func (s *sender) SendMessageBatch(b pb.MessageBatch) error {
	frame := s.frame(headerSize + b.SizeUpperLimit())
	n, err := b.MarshalTo(frame[headerSize:])
	if err != nil {
		return err
	}
	return s.send(kindBatch, frame[:headerSize+n])
}

func (s *sender) SendChunk(c pb.Chunk) error {
	frame := s.frame(headerSize + c.Size())
	n, err := c.MarshalTo(frame[headerSize:])
	if err != nil {
		return err
	}
	return s.send(kindChunk, frame[:headerSize+n])
}

func (s *sender) frame(size int) []byte {
	if cap(s.buf) < size || cap(s.buf) > keepBuffer && size <= keepBuffer {
		s.buf = make([]byte, size)
	}
	return s.buf[:size]
}

func (s *sender) send(kind byte, frame []byte) error {
	if len(frame)-headerSize > maxFrame(kind) {
		// The receiver would refuse it; failing here keeps the peer's
		// connection up for everything else.
		return fmt.Errorf("%w: %d bytes of kind %d exceed the bound", errFrame, len(frame)-headerSize, kind)
	}
	putHeader(frame, kind)
	if s.redial == nil {
		return writeFrame(s.conn, frame)
	}
	if !s.usable() {
		if err := s.reconnect(); err != nil {
			return dropped(err)
		}
	}
	err := writeFrame(s.conn, frame)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		// A peer that is alive but stalled keeps its deadline error: a
		// new connection would stall the same way.
		if err := s.reconnect(); err != nil {
			return dropped(err)
		}
		err = writeFrame(s.conn, frame)
	}
	return err
}

// dropped is nil for a message dropped while the peer is briefly
// unreachable, else err.
func dropped(err error) error {
	if err == errUnreachable {
		return nil
	}
	return err
}
