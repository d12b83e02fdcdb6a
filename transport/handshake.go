package transport

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/peering"
)

// The handshake. When a replica has a peering.Local (every fencelock Node
// binds one), each connection opens with
//
//	dialer   -> acceptor: hello   (the dialer's peering.Hello)
//	acceptor -> dialer:   welcome (the acceptor's Hello) | refuse (why)
//
// and each side checks the other's Hello before a raft message passes: a
// replica of another group, one started with a different bootstrap
// membership, or one claiming an ID or an address the group does not give
// it, is refused, and both sides log why. Without a Local (the transport
// used on its own) there is no handshake.
//
// It is also what keeps a misconfigured peer from crashing a replica:
// Dragonboat records the address each message batch reports for its sender,
// and panics when it disagrees with one it recorded before ("inconsistent
// target"), so a typo in one replica's config crashed the healthy ones. A
// batch passes only from the replica the handshake checked, reporting the
// address the handshake checked against the membership.

// errRefused reports a peer that refused this replica, or that this replica
// refused, in the handshake.
var errRefused = errors.New("transport: peer refused")

// Bind implements peering.Binder.
func (f factory) Bind(l peering.Local) config.TransportFactory {
	f.local = l
	f.cell = &tcpCell{}
	return f
}

// warnings rate-limits the handshake's warnings: at most one a minute per
// peer (by its address), whatever the reason, so a misconfigured peer that
// redials every second is reported, not flooded; the next warning about it
// says how many were left out meanwhile.
type warnings struct {
	mu    sync.Mutex
	peers map[string]*peerWarnings
	// now and out are time.Now and the transport's log, unless a test sets
	// them.
	now func() time.Time
	out func(msg string)
}

type peerWarnings struct {
	last       time.Time
	suppressed int
}

// warnEvery is the least time between two warnings about one peer.
const warnEvery = time.Minute

// warn logs "fencelock: " + msg unless a warning about peer was logged
// within warnEvery.
func (w *warnings) warn(peer, msg string) {
	w.mu.Lock()
	now := time.Now()
	if w.now != nil {
		now = w.now()
	}
	if w.peers == nil || len(w.peers) > 256 { // bounded: peers are few, scanners are not
		w.peers = make(map[string]*peerWarnings)
	}
	p := w.peers[peer]
	if p == nil {
		p = &peerWarnings{}
		w.peers[peer] = p
	} else if now.Sub(p.last) < warnEvery {
		p.suppressed++
		w.mu.Unlock()
		return
	}
	if p.suppressed > 0 {
		msg += fmt.Sprintf(" (%s about %s left out since the last one)", plural(p.suppressed, "more warning"), peer)
	}
	p.last, p.suppressed = now, 0
	out := w.out
	w.mu.Unlock()
	msg = "fencelock: " + strings.TrimPrefix(msg, "fencelock: ")
	if out != nil {
		out(msg)
		return
	}
	plog.Errorf("%s", msg)
}

// plural is "1 more warning", "2 more warnings".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// refusedPeer is the key a refused dialer's warnings are limited by: the
// address it claims if its hello was read, else its host (each dial comes
// from a new port).
func refusedPeer(h peering.Hello, from net.Addr) string {
	if h.Addr != "" {
		return h.Addr
	}
	if host, _, err := net.SplitHostPort(from.String()); err == nil {
		return host
	}
	return from.String()
}

// greet runs the dialer's side on a fresh connection to target.
func (t *tcpTransport) greet(conn net.Conn, target string) error {
	if t.local == nil {
		return nil
	}
	if err := conn.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
		return err
	}
	payload := t.local.Hello().Marshal()
	frame := make([]byte, headerSize+len(payload))
	copy(frame[headerSize:], payload)
	putHeader(frame, kindHello)
	if err := writeFrame(conn, frame); err != nil {
		return err
	}
	r := frameReader{conn: conn}
	kind, reply, err := r.next()
	if err != nil {
		return fmt.Errorf("handshake with %s: %w", target, err)
	}
	switch kind {
	case kindRefuse:
		err := fmt.Errorf("%w: the replica at %s refused this one: %s", errRefused, target, reply)
		t.warnings.warn(target, err.Error())
		return err
	case kindWelcome:
		peer, err := peering.Unmarshal(reply)
		if err == nil {
			err = t.local.Check(peer)
		}
		if err == nil && peer.Addr != target {
			// The address led to another replica: a name whose DNS answer
			// is stale, now the IP of another pod of the group. Talking
			// to it would hand it messages for the replica at target,
			// which it drops, for as long as the connection lives;
			// refused, the next dial resolves the name again.
			err = fmt.Errorf("it is replica %d at %s: %s leads to another replica (a stale DNS answer, or addresses swapped?)",
				peer.Replica, peer.Addr, target)
		}
		if err != nil {
			err = fmt.Errorf("%w: refused the replica at %s: %v", errRefused, target, err)
			t.warnings.warn(target, err.Error())
			return err
		}
		t.local.Contact(peer.Replica)
		return conn.SetDeadline(time.Time{})
	}
	return fmt.Errorf("%w: handshake with %s: frame kind %d", errFrame, target, kind)
}

// welcome runs the acceptor's side: it reads the dialer's hello and answers
// it. It returns the peer's Hello, and whether there was a handshake.
func (t *tcpTransport) welcome(conn net.Conn, r *frameReader) (peering.Hello, bool, error) {
	if t.local == nil {
		return peering.Hello{}, false, nil
	}
	kind, payload, err := r.next()
	if err != nil {
		return peering.Hello{}, false, err
	}
	if kind != kindHello {
		return peering.Hello{}, false, fmt.Errorf("%w: a connection must open with a hello, not kind %d (a fencelock replica of an older version?)", errFrame, kind)
	}
	peer, err := peering.Unmarshal(payload)
	if err == nil {
		err = t.local.Check(peer)
	}
	if err != nil {
		why := []byte(err.Error())
		if len(why) > maxRefusal {
			why = why[:maxRefusal]
		}
		t.reply(conn, kindRefuse, why)
		err = fmt.Errorf("%w: refused the replica connecting from %v: %v", errRefused, conn.RemoteAddr(), err)
		t.warnings.warn(refusedPeer(peer, conn.RemoteAddr()), err.Error())
		return peering.Hello{}, false, err
	}
	if err := t.reply(conn, kindWelcome, t.local.Hello().Marshal()); err != nil {
		return peering.Hello{}, false, err
	}
	t.local.Contact(peer.Replica)
	return peer, true, nil
}

func (t *tcpTransport) reply(conn net.Conn, kind byte, payload []byte) error {
	frame := make([]byte, headerSize+len(payload))
	copy(frame[headerSize:], payload)
	putHeader(frame, kind)
	return writeFrame(conn, frame)
}

// admit checks a message batch from the peer a connection greeted as peer
// (verified false: no handshake). Every message must come from that peer,
// and the address the batch reports for it must be the one the handshake
// checked: Dragonboat records that address for the sender (a joining
// replica learns its peers' addresses this way), and panics when it
// disagrees with one it recorded before.
func admit(b *pb.MessageBatch, peer peering.Hello, verified bool) error {
	if !verified {
		return nil
	}
	if b.SourceAddress != peer.Addr {
		return fmt.Errorf("%w: replica %d, greeted as %s, sends as %q", errRefused, peer.Replica, peer.Addr, b.SourceAddress)
	}
	for i := range b.Requests {
		if f := b.Requests[i].From; f != peer.Replica {
			return fmt.Errorf("%w: a message from replica %d on the connection of replica %d", errRefused, f, peer.Replica)
		}
	}
	return nil
}
