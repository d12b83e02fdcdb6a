package serve

// A mirror's subscription (package mirror): a replica that runs a group
// feeds the mirrors of hosts that do not.
//
// A subscription is taken inside a local read of the state machine, which
// Dragonboat serialises with its updates: the snapshot (the state's
// encoding at its applied index) and the registration of the subscriber
// happen with no entry applied in between, so the subscriber then gets
// every entry after the snapshot's index, in order, from the apply
// observer. The observer never blocks: a subscriber whose queue grows past
// its bounds (a mirror that does not keep up) is cut off, and subscribes
// again. A snapshot restored here ends every subscription the same way: the
// entries it covered never reach the observer.
//
// A request names the group by its subscription; one for a group this
// replica does not run (any more) is answered with wire.CodeElsewhere, and the
// mirror asks another replica.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/transport"
)

const (
	// maxSubQueue bounds what waits to be sent to one mirror, in bytes of
	// entries and in entries.
	maxSubQueue      = 64 << 20
	maxSubQueueCount = 1 << 16
	// maxSubMessage is about how many bytes of entries one message
	// carries.
	maxSubMessage = 1 << 20
	// subscribeWait bounds how long a new connection may take to
	// subscribe.
	subscribeWait = 10 * time.Second
)

// Subscribers are the mirrors a shard feeds. The zero value has none.
type Subscribers struct {
	mu   sync.Mutex
	list []*subscriber
}

// add registers s; it runs inside a read of the state machine (see above).
func (ss *Subscribers) add(s *subscriber) {
	ss.mu.Lock()
	ss.list = append(ss.list, s)
	ss.mu.Unlock()
}

func (ss *Subscribers) remove(s *subscriber) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for i, x := range ss.list {
		if x == s {
			ss.list = append(ss.list[:i], ss.list[i+1:]...)
			return
		}
	}
}

// Publish queues the entry at index for every subscriber; it runs on the
// apply goroutine and never blocks: a subscriber that does not keep up is
// cut off, and subscribes again.
func (ss *Subscribers) Publish(index uint64, data []byte) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.list) == 0 {
		return
	}
	cp := bytes.Clone(data)
	if cp == nil {
		cp = []byte{}
	}
	for _, s := range ss.list {
		s.push(wire.Entry{Index: index, Data: cp})
	}
}

// End ends every subscription with why (the shard stopped, or restored a
// snapshot whose entries never reach Publish); each mirror subscribes
// again, elsewhere or here.
func (ss *Subscribers) End(why error) {
	ss.mu.Lock()
	list := ss.list
	ss.list = nil
	ss.mu.Unlock()
	for _, s := range list {
		s.end(why)
	}
}

// subscriber is one mirror's queue.
type subscriber struct {
	mu      sync.Mutex
	entries []wire.Entry
	bytes   int
	replies []wire.Msg
	wake    chan struct{}
	done    chan struct{}
	once    sync.Once
	why     error
}

func newSubscriber() *subscriber {
	return &subscriber{wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (s *subscriber) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *subscriber) push(e wire.Entry) {
	s.mu.Lock()
	s.entries = append(s.entries, e)
	s.bytes += len(e.Data)
	over := s.bytes > maxSubQueue || len(s.entries) > maxSubQueueCount
	s.mu.Unlock()
	if over {
		s.end(errors.New("the mirror does not keep up with the group's entries"))
		return
	}
	s.signal()
}

func (s *subscriber) reply(m wire.Msg) {
	s.mu.Lock()
	s.replies = append(s.replies, m)
	s.mu.Unlock()
	s.signal()
}

func (s *subscriber) end(why error) {
	s.once.Do(func() {
		s.mu.Lock()
		s.why = why
		s.mu.Unlock()
		close(s.done)
	})
}

// take returns what waits to be sent: the replies after the entries
// queued before them.
func (s *subscriber) take() (entries []wire.Entry, replies []wire.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	entries, replies = s.entries, s.replies
	s.entries, s.replies, s.bytes = nil, nil, 0
	return entries, replies
}

// chunk cuts entries into messages of about maxSubMessage bytes.
func chunk(entries []wire.Entry) [][]wire.Entry {
	var out [][]wire.Entry
	for len(entries) > 0 {
		n, size := 0, 0
		for n < len(entries) && (n == 0 || size+len(entries[n].Data) <= maxSubMessage) && n < wire.MaxEntries {
			size += len(entries[n].Data)
			n++
		}
		out = append(out, entries[:n:n])
		entries = entries[n:]
	}
	return out
}

// serveMirror serves the mirror that subscribed with m on c until its
// call ends.
func (s *Server) serveMirror(peer peering.Hello, c transport.CallConn, m wire.Msg) {
	c.SetIdle(0)
	g := s.servingGroup(c, m)
	if g == nil {
		return
	}
	sub := newSubscriber()
	subs := g.Subscribers()
	index, state, err := g.State(func() { subs.add(sub) })
	if err != nil {
		refuseCall(c, wire.CodeElsewhere, fmt.Sprintf("replica %d cannot serve group %q: %v", s.cfg.ReplicaID, g.Name(), err))
		return
	}
	defer subs.remove(sub)
	if err := s.sendStateBounded(c, g.Name(), index, g.Leader(), state); err != nil {
		return
	}
	g.Logger().Debug("fencelock: feeding a mirror of the group", "mirror", peer.Replica, "index", index)
	c.SetIdle(wire.IdleAfter) // the mirror pings every wire.PingEvery
	ctx, cancel := context.WithCancel(g.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer c.Close()
		feed(ctx, g, sub, c)
	}()
	for {
		b, err := c.Recv()
		if err != nil {
			sub.end(err)
			return
		}
		m, err := wire.Decode(b)
		if err == nil && m.Kind == wire.KindPing {
			continue
		}
		if err != nil || (m.Kind != wire.KindPropose && m.Kind != wire.KindRead) {
			sub.end(fmt.Errorf("a malformed request: %v", err))
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub.reply(s.answer(ctx, g, m))
		}()
	}
}

// A state up to wholeState bytes goes to a new subscriber in one message,
// as every build sends and takes it; a larger one, which a build before
// parts refuses to serve, goes in parts of statePart bytes. Variables for
// tests only (TestingStateParts).
var (
	wholeState = transport.MaxCallMessage - 64
	statePart  = wire.MaxStatePart
)

// stateSendsMost bounds the states larger than one message a replica sends
// to mirrors at once: each send holds a copy of its group's state, and
// mirrors that subscribe together (after this voter restarted) must not
// take its memory. A refused mirror asks another voter. An atomic only for
// tests (TestingStateSends).
var stateSendsMost atomic.Int32

func init() { stateSendsMost.Store(2) }

// sendStateBounded is sendState within stateSendsMost.
func (s *Server) sendStateBounded(c transport.CallConn, name string, index, leader uint64, state []byte) error {
	if len(state) <= wholeState {
		return sendState(c, index, leader, state)
	}
	most := stateSendsMost.Load()
	release, ok := s.takeSlot(c, name, &s.sendingStates, most, fmt.Sprintf("sending %d states of groups larger than one message to mirrors", most))
	if !ok {
		return errors.New("refused: too many states in flight")
	}
	defer release()
	return sendState(c, index, leader, state)
}

// sendState sends a new subscriber the state it starts from, taken at
// index: whole, or in parts (wire.SendParts) that each name the state's
// index, leader and size.
func sendState(c transport.CallConn, index, leader uint64, state []byte) error {
	if len(state) <= wholeState {
		return c.Send((&wire.Msg{Kind: wire.KindSnapshot, Index: index, Leader: leader, Data: state}).Encode(nil))
	}
	total := uint64(len(state))
	return wire.SendParts(c, bytes.NewReader(state), total, statePart, func(data []byte) wire.Msg {
		return wire.Msg{Kind: wire.KindSnapshotPart, Index: index, Leader: leader, Total: total, Data: data}
	})
}

// feed sends sub's queue of g's entries down c until the subscription or ctx ends, with a
// ping when there is nothing to send, and one as soon as the group's
// leader here changes: the mirror leaves a server that has had no leader
// for long (mirror.leaderPatience), and must learn it within a fraction of
// that, not a ping period later.
func feed(ctx context.Context, g Group, sub *subscriber, c transport.CallConn) {
	t := time.NewTicker(wire.PingEvery)
	defer t.Stop()
	watch := time.NewTicker(max(g.ElectionTimeout()/2, time.Millisecond))
	defer watch.Stop()
	sent := g.Leader() // the leader the mirror was last told
	var buf []byte
	for {
		entries, replies := sub.take()
		for _, es := range chunk(entries) {
			sent = g.Leader()
			msg := wire.Msg{Kind: wire.KindEntries, Leader: sent, Entries: es}
			buf = msg.Encode(buf[:0])
			if c.Send(buf) != nil {
				return
			}
		}
		for i := range replies {
			buf = replies[i].Encode(buf[:0])
			if c.Send(buf) != nil {
				return
			}
		}
		if len(entries) > 0 || len(replies) > 0 {
			continue
		}
		select {
		case <-sub.wake:
		case <-t.C:
			sent = g.Leader()
			ping := wire.Msg{Kind: wire.KindPing, Leader: sent}
			if c.Send(ping.Encode(buf[:0])) != nil {
				return
			}
		case <-watch.C:
			if l := g.Leader(); l != sent {
				sent = l
				ping := wire.Msg{Kind: wire.KindPing, Leader: l}
				if c.Send(ping.Encode(buf[:0])) != nil {
					return
				}
			}
		case <-sub.done:
			sub.mu.Lock()
			why := sub.why
			sub.mu.Unlock()
			msg := wire.Msg{Kind: wire.KindRefuse, Code: wire.CodeElsewhere, Text: truncate(why.Error(), wire.MaxText-8)}
			_ = c.Send(msg.Encode(buf[:0]))
			return
		case <-ctx.Done():
			return
		}
	}
}

// answer runs a mirror's request on g: a proposal or a read index.
func (s *Server) answer(ctx context.Context, g Group, m wire.Msg) wire.Msg {
	out := wire.Msg{Kind: wire.KindResult, ID: m.ID}
	if m.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(m.Timeout)*time.Millisecond)
		defer cancel()
	}
	if m.FailFast {
		ctx = groupcore.FailFast(ctx)
	}
	var err error
	switch m.Kind {
	case wire.KindPropose:
		var cmds []fsm.Command
		cmds, err = fsm.DecodeBatch(m.Data, nil)
		if err == nil && len(cmds) != 1 {
			err = fmt.Errorf("%w: %d commands in one request", wire.ErrMalformed, len(cmds))
		}
		if err != nil {
			out.Code, out.Text = wire.CodeInvalid, err.Error()
			return out
		}
		out.Res, out.Index, err = g.Propose(ctx, cmds[0])
	case wire.KindRead:
		out.Index, err = g.ReadIndex(ctx)
	}
	if err != nil {
		out.Code, out.Text = s.host.Code(err), truncate(err.Error(), wire.MaxText-8)
	}
	return out
}
