package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/peering"
)

// Calls between replicas. Besides raft traffic, a replica may open a call
// connection to a peer: a replica that does not run a group reaches it
// through one that does (fencelock.Config.Placement). A call connection is
// made like a raft connection, on the same port, with the same TLS and the
// same handshake (both sides check the other's Hello), and then its first
// frame says it carries calls:
//
//	dialer   -> acceptor: callOpen
//	acceptor -> dialer:   callOpen (taken) | refuse (why)
//
// after which both sides exchange messages, each one frame of kind call,
// bounded by MaxCallMessage. What the messages mean is the replica's
// business (internal/replica); the transport only carries them, between
// members of the deployment: a connection the handshake did not verify
// (a transport used without a peering.Local) takes no calls.
//
// The transports of this package offer calls through their bound factory
// (the one peering.Binder.Bind returns), which implements CallDialer; the
// acceptor hands each call connection to its peering.Local if that
// implements CallHandler, and refuses it otherwise.

// MaxCallMessage bounds one message of a call connection: a larger one is
// refused by its sender, and closes the connection at its receiver.
const MaxCallMessage = 64 << 20

// CallConn is one call connection: messages both ways, each delivered
// whole and in order. Send and Close may be called concurrently with each
// other and with Recv; Recv from one goroutine at a time.
type CallConn interface {
	// Send writes one message of at most MaxCallMessage bytes; an error
	// means the connection is broken (or msg too large).
	Send(msg []byte) error
	// Recv returns the next message, valid until the next Recv, or an
	// error once the connection is broken or closed, or (with SetIdle)
	// nothing arrived in time.
	Recv() ([]byte, error)
	// SetIdle makes Recv fail when nothing arrives for d; 0 (the default)
	// waits for ever.
	SetIdle(d time.Duration)
	// Close closes the connection; a Recv in progress returns an error.
	Close() error
}

// CallDialer is implemented by a bound transport factory that carries
// calls (see peering.Binder).
type CallDialer interface {
	// DialCall opens a call connection to the replica at target, once its
	// transport runs. It fails if target cannot be reached, is refused by
	// the handshake (either way), or takes no calls (ErrNoCalls: an older
	// version, or a transport without calls).
	DialCall(ctx context.Context, target string) (CallConn, error)
}

// CallHandler is implemented by a peering.Local that takes calls: the
// acceptor's transport hands it each call connection, from a peer whose
// Hello it checked, on a goroutine of its own. ServeCall owns conn and
// returns when done with it; the transport closes conn when it closes,
// and waits for ServeCall to return.
type CallHandler interface {
	ServeCall(peer peering.Hello, conn CallConn)
}

// ErrNoCalls reports a peer that takes no calls: one of an older version,
// or whose transport carries none.
var ErrNoCalls = errors.New("transport: the peer takes no calls")

// errNotStarted reports a DialCall before the transport started.
var errNotStarted = errors.New("transport: not started")

// frameCall is a call connection over a net.Conn, in frames.
type frameCall struct {
	conn net.Conn
	r    frameReader
	wmu  sync.Mutex
}

func newFrameCall(conn net.Conn, r frameReader) *frameCall {
	c := &frameCall{conn: conn, r: r}
	c.r.idle = -1
	return c
}

func (c *frameCall) Send(msg []byte) error {
	if len(msg) > MaxCallMessage || len(msg) == 0 {
		return fmt.Errorf("%w: a call message of %d bytes", errFrame, len(msg))
	}
	frame := make([]byte, headerSize+len(msg))
	copy(frame[headerSize:], msg)
	putHeader(frame, kindCall)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return writeFrame(c.conn, frame)
}

func (c *frameCall) Recv() ([]byte, error) {
	kind, payload, err := c.r.next()
	if err != nil {
		return nil, err
	}
	if kind != kindCall {
		c.conn.Close()
		return nil, fmt.Errorf("%w: kind %d on a call connection", errFrame, kind)
	}
	return payload, nil
}

func (c *frameCall) SetIdle(d time.Duration) {
	if d <= 0 {
		d = -1
	}
	c.r.idle = d
}

func (c *frameCall) Close() error { return c.conn.Close() }

// callOpen is the payload of a callOpen frame: the version of the calls'
// framing.
var callOpen = []byte{1}

// openCall runs the dialer's side of a call connection's opening on conn,
// greeted already.
func openCall(conn net.Conn, target string) (CallConn, error) {
	if err := conn.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return nil, err
	}
	frame := make([]byte, headerSize+len(callOpen))
	copy(frame[headerSize:], callOpen)
	putHeader(frame, kindCallOpen)
	if err := writeFrame(conn, frame); err != nil {
		return nil, err
	}
	r := frameReader{conn: conn}
	kind, reply, err := r.next()
	switch {
	case err != nil:
		return nil, fmt.Errorf("%w: the replica at %s closed the call connection (%v)", ErrNoCalls, target, err)
	case kind == kindRefuse:
		return nil, fmt.Errorf("%w: the replica at %s refused: %s", ErrNoCalls, target, reply)
	case kind != kindCallOpen:
		return nil, fmt.Errorf("%w: a call connection answered with kind %d", errFrame, kind)
	}
	if err := conn.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	return newFrameCall(conn, r), nil
}

// DialCall implements CallDialer for the TCP transport.
func (f factory) DialCall(ctx context.Context, target string) (CallConn, error) {
	t := f.cell.get()
	if t == nil {
		return nil, errNotStarted
	}
	if f.local == nil {
		return nil, fmt.Errorf("%w: a transport without a handshake carries no calls", ErrNoCalls)
	}
	conn, err := t.dial(ctx, target)
	if err != nil {
		return nil, err
	}
	c, err := openCall(conn, target)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

// takeCall runs the acceptor's side of a call connection whose callOpen
// frame was read: it hands the connection to the Local, or refuses it.
func (t *tcpTransport) takeCall(conn net.Conn, r frameReader, peer peering.Hello, verified bool) {
	h, ok := t.local.(CallHandler)
	if !verified || !ok {
		t.reply(conn, kindRefuse, []byte("this replica takes no calls"))
		return
	}
	if err := t.reply(conn, kindCallOpen, callOpen); err != nil {
		return
	}
	h.ServeCall(peer, newFrameCall(conn, r))
}

// tcpCell is where a bound factory finds the transport it created, for
// DialCall: Dragonboat creates the transport, the host dials through the
// factory.
type tcpCell struct {
	mu sync.Mutex
	t  *tcpTransport
}

func (c *tcpCell) set(t *tcpTransport) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func (c *tcpCell) get() *tcpTransport {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}
