package transport

import (
	"errors"
	"fmt"
	"net"
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
	return f
}

// warnings rate-limits the handshake's warnings: each distinct one is logged
// at most once a minute, so a misconfigured peer that redials every second
// is reported, not flooded.
type warnings struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (w *warnings) warn(msg string) {
	w.mu.Lock()
	now := time.Now()
	if w.last == nil || len(w.last) > 256 {
		w.last = make(map[string]time.Time)
	}
	t, seen := w.last[msg]
	if seen && now.Sub(t) < time.Minute {
		w.mu.Unlock()
		return
	}
	w.last[msg] = now
	w.mu.Unlock()
	plog.Errorf("%s", msg)
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
		t.warnings.warn("fencelock: " + err.Error())
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
			t.warnings.warn("fencelock: " + err.Error())
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
		t.warnings.warn("fencelock: " + err.Error())
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
