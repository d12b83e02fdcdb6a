// Package serve is what a voter does for a replica that does not run a
// group: it answers the calls that come over the transport's call
// connections (transport.CallHandler), from members of the deployment only
// (the handshake checked the caller's Hello). A call names a group by its
// name and shard; the voter serves it from its own shard of the group, or
// refuses it (wire.CodeElsewhere: ask another replica; wire.CodeUnavailable:
// ask another voter, or later).
//
// A map of the package:
//
//   - serve.go: Server, its ServeCall, and the two narrow ties to the host:
//     Host (find a group's shard here, say what an error means to a
//     caller, and whether the host is cut off) and Group (what a call needs
//     of a shard: its state at an index, propose, read, membership,
//     export). The bounds on the calls served at once (takeSlot).
//   - feed.go: a mirror's subscription (package mirror): the state it
//     starts from, then every entry applied after it (Subscribers, which
//     the shard's apply observer publishes to), and its proposals and reads.
//   - export.go: a backup's export of a group: its copy, in parts.
//   - members.go: a group's membership, read linearizably.
//
// It imports the transport for the call connection, internal/peering for
// the caller's Hello, internal/replica/wire for the messages, internal/fsm
// for the state machine's commands, and groupcore for a call's fail-fast
// mark; nothing of internal/replica, which reaches it through Server,
// Subscribers and SendFile, and answers it through host_serve.go.
package serve

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/transport"
)

// Host is what the serving side asks of the host it runs on.
type Host interface {
	// Down reports that the host is cut off (a test's crash): it serves
	// no call.
	Down() bool
	// Running returns the host's shard of group name on shard, or nil if
	// it runs none (any more).
	Running(name string, shard uint64) Group
	// Code is the code a caller acts on for err, which a Group returned
	// (wire.CodeNoQuorum, CodeGated, CodeElsewhere, CodeUnavailable or
	// CodeInvalid).
	Code(err error) byte
}

// Group is what a served call needs of the host's shard of a group.
type Group interface {
	Name() string
	Logger() *slog.Logger
	// Context ends when the shard stops: it bounds every call served.
	Context() context.Context
	// Serving returns why the shard cannot serve a call (it stopped, was
	// taken off its group, or refused its Dir), nil if it can.
	Serving() error
	Leader() uint64
	ElectionTimeout() time.Duration
	// Subscribers are the mirrors the shard feeds: its apply observer
	// publishes every entry to them.
	Subscribers() *Subscribers
	// State returns the group's state and its applied index, and runs add
	// in between with no entry applied, or fails if the shard cannot read
	// it or it is larger than wire.MaxState.
	State(add func()) (index uint64, state []byte, err error)
	// Propose proposes cmd and returns its result and the index applied
	// here once it applied.
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, uint64, error)
	// ReadIndex returns an index at or past every entry committed before
	// the call, read linearizably.
	ReadIndex(ctx context.Context) (uint64, error)
	Members(ctx context.Context) (wire.Membership, error)
	// Export writes a checked copy of the group into dir, after a read
	// barrier (replica.Export).
	Export(ctx context.Context, dir string) (Copy, error)
}

// Copy is a group's exported copy as a backup takes it: what the export's
// head tells the caller, and the snapshot file sent after it.
type Copy struct {
	Index                      uint64 // the snapshot's index
	Meta                       []byte // its metadata record (backup.EncodeMetadata)
	File                       string // the snapshot file
	Size                       uint64 // its size in bytes
	Sessions, Locks, Elections int    // what the state held at the read barrier
}

// Config is what a Server says of its host in its refusals and needs for
// its calls' files and waits.
type Config struct {
	ReplicaID       uint64
	Dir             string        // where a backup's export writes its copy
	ProposalTimeout time.Duration // a membership read waits at most twice this
}

// Server answers the calls of other replicas for the groups its host runs.
type Server struct {
	cfg  Config
	host Host

	exporting      atomic.Int32 // copies of groups being written for other replicas' backups (serveExport)
	readingMembers atomic.Int32 // memberships being read for other replicas (serveMembers)
	sendingStates  atomic.Int32 // group states larger than one message being sent to mirrors (serveMirror)
}

// New returns the Server of host.
func New(cfg Config, host Host) *Server { return &Server{cfg: cfg, host: host} }

// ServeCall implements transport.CallHandler: a mirror's subscription
// (feed.go), a backup's export of a group (export.go), or a read of a
// group's membership (members.go). It returns once the call ended.
func (s *Server) ServeCall(peer peering.Hello, c transport.CallConn) {
	defer c.Close()
	if s.host.Down() {
		return
	}
	c.SetIdle(subscribeWait)
	b, err := c.Recv()
	if err != nil {
		return
	}
	m, err := wire.Decode(b)
	if err == nil && m.Kind == wire.KindExport {
		s.serveExport(peer, c, m)
		return
	}
	if err == nil && m.Kind == wire.KindMembers {
		s.serveMembers(c, m)
		return
	}
	if err != nil || m.Kind != wire.KindSubscribe {
		return
	}
	s.serveMirror(peer, c, m)
}

// servingGroup returns this host's shard of the group request m names,
// or answers c with a refusal saying why it cannot serve it
// (wire.CodeElsewhere: the caller asks another replica) and returns nil.
func (s *Server) servingGroup(c transport.CallConn, m wire.Msg) Group {
	g := s.host.Running(m.Name, m.Shard)
	if g == nil {
		refuseCall(c, wire.CodeElsewhere, fmt.Sprintf("replica %d does not run group %q (shard %x)", s.cfg.ReplicaID, truncate(m.Name, 64), m.Shard))
		return nil
	}
	if why := g.Serving(); why != nil {
		refuseCall(c, wire.CodeElsewhere, fmt.Sprintf("replica %d does not serve group %q: %v", s.cfg.ReplicaID, g.Name(), why))
		return nil
	}
	return g
}

// refuseCall answers a call on c with a refusal: code and why.
func refuseCall(c transport.CallConn, code byte, text string) {
	msg := wire.Msg{Kind: wire.KindRefuse, Code: code, Text: truncate(text, wire.MaxText-8)}
	_ = c.Send(msg.Encode(nil))
}

// takeSlot takes one of the most slots of a kind of call a replica serves
// at once, counted in n, for a call on c about group name; when none is
// free it refuses the call as unavailable (the caller asks another voter)
// saying what the replica is already doing at its most. release gives the
// slot back.
func (s *Server) takeSlot(c transport.CallConn, name string, n *atomic.Int32, most int32, doing string) (release func(), ok bool) {
	if n.Add(1) > most {
		n.Add(-1)
		refuseCall(c, wire.CodeUnavailable, fmt.Sprintf("replica %d is already %s, its most at once: ask another voter of group %q, or again later",
			s.cfg.ReplicaID, doing, truncate(name, 64)))
		return nil, false
	}
	return func() { n.Add(-1) }, true
}

// takeGroup takes a slot for request m on c (takeSlot) and the shard of
// the group it names (servingGroup); or, having refused the call, returns
// a nil Group and holds no slot.
func (s *Server) takeGroup(c transport.CallConn, m wire.Msg, n *atomic.Int32, most int32, doing string) (Group, func()) {
	release, ok := s.takeSlot(c, m.Name, n, most, doing)
	if !ok {
		return nil, nil
	}
	g := s.servingGroup(c, m)
	if g == nil {
		release()
		return nil, nil
	}
	return g, release
}

// callWait is how long a served call may take: def, or less when the
// caller's request names a timeout (milliseconds; 0: none).
func callWait(def time.Duration, timeout uint64) time.Duration {
	if timeout > 0 {
		return min(def, time.Duration(timeout)*time.Millisecond)
	}
	return def
}

// truncate cuts s to n bytes and marks the cut: a name or an error in a
// refusal's text must leave it within wire.MaxText.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
