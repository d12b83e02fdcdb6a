// Package mirror is the second maker of a group's role, beside the shard
// (internal/replica's Replica): how a host that runs only its own groups
// (PlaceOwn) reaches a group it does not run. A Mirror is a Group of its
// own, which the session machinery uses as it uses a shard (Propose, Read,
// StaleRead, its Sink), and which is fed by a replica that runs the group
// (internal/replica/serve).
//
// It subscribes over a call connection to one of the group's voters (the
// group table's, tried in turn), receives the state as a snapshot at some
// applied index and then every entry the server applies after it, and
// applies them to a state of its own with the state machine's code
// (fsm.ApplyEntry): its Sink (the group's session router) gets Restored and
// Applied as from a local shard. Propose sends the command to the server,
// which proposes it on its shard; the answer carries an index the server
// has applied the entry by, and Propose returns once the mirror has
// applied that far too, so the proposer's side has seen the entry's events
// when Propose returns, as with a local shard. Read asks the server for
// its linearizable read point, waits until the mirror applied it, and runs
// the query on the mirror's state.
//
// A stream that breaks (the server stopped, was cut off, or stopped
// running the group) is replaced by one from the next server, and so is a
// stream whose server cannot reach the group: it answers a call "no
// quorum" or "unavailable", or reports no leader of the group for longer
// than leaderPatience (a voter cut off from the others while its link to
// this host is up, whose pings alone would keep the stream up). Its snapshot
// reaches the Sink as Restored once the mirror's state is at least as new
// as what the Sink has seen (a lagging server's entries are applied
// quietly until then). A call in flight on a broken stream is sent again,
// the same command (never renumbered): commands carry their session and
// sequence or operation IDs, so the group applies each at most once.
//
// A mirror starts at the first call that names its group, and stops when
// the group runs here (the table made this host a voter: the shard takes
// over: HandedOver), when it is dropped, or after Config.Idle with no
// call, no session's part and no watch on it here (its Sink is an Idler):
// a call that meets a mirror stopping so goes to a new one.
//
// It reaches its host only through Host (the calls a mirror makes of the
// host that runs it), and the host reaches it only through its exported
// methods. It imports groupcore (the Core it shares with a shard), wire
// (its messages), the transport's call connections, internal/fsm (the
// state it applies) and lockapi (the errors it returns); nothing of
// internal/replica.
package mirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/internal/seeded"
	"github.com/fencelock/fencelock/lockapi"
	"github.com/fencelock/fencelock/transport"
)

// ErrIdle is why a call on a mirror that stopped unused fails: the
// call goes to a new mirror (Host.Replaced).
var ErrIdle = errors.New("the mirror stopped, unused")

// mirrorRetryMax bounds the wait between two attempts to subscribe (a
// stream silent for wire.IdleAfter is given up: its server pings every
// wire.PingEvery).
const mirrorRetryMax = time.Second

// leaderPatience is how long a mirror stays on a server that reports no
// leader of the group before it tries another voter: four election
// timeouts, twice the longest an election takes (a timeout is randomised in
// [E, 2E)), so a leader change in a healthy group never moves a mirror,
// and a voter cut off from the rest of its group (it calls elections it
// cannot win, or stepped down as leader on losing its quorum) is left well
// within a session's TTL. After each further server found without a
// leader the patience doubles, up to wire.IdleAfter: a group with no leader
// anywhere does not have its mirrors resubscribe (a snapshot each) in a
// tight loop.
func (m *Mirror) leaderPatience() time.Duration {
	return min(4*m.ElectionTimeout()<<min(m.leaderless, 8), max(wire.IdleAfter, 4*m.ElectionTimeout()))
}

// Mirror is a group this host does not run, as fed by a server: the
// second maker of a group's role, beside the shard (internal/replica's
// Replica).
type Mirror struct {
	groupcore.Core // what a mirror shares with a shard
	cfg            Config
	h              Host

	mu        sync.RWMutex // st; held while an entry applies and its events reach the Sink
	st        *fsm.State
	live      bool   // the Sink follows st
	delivered uint64 // the Sink has seen the state up to here
	retired   bool   // the shard took over: nothing more reaches the Sink
	scratch   []fsm.Command

	// applyMu guards appliedUp, closed and replaced whenever the mirror
	// applied more (or went live).
	applyMu   sync.Mutex
	appliedUp chan struct{}

	connMu sync.Mutex
	conn   *mirrorConn   // the live stream; nil while none
	connUp chan struct{} // closed and replaced when a stream goes live
	last   error         // why the last attempt to subscribe failed

	server atomic.Uint64 // the replica serving the stream; 0 while none
	next   int           // the next voter to try (run's own)
	// avoid is a server the mirror left because it could not reach the
	// group: it is tried last next time.
	avoid atomic.Uint64
	// noLeaderSince (unix nanos) is when the server last reported no
	// leader of the group, 0 while it reports one; leaderless counts the
	// streams in a row left for that (run's own).
	noLeaderSince atomic.Int64
	leaderless    int
	ids           atomic.Uint64
	// successor is the shard that took over (HandedOver): calls waiting
	// for an index wait for it there.
	successor atomic.Pointer[Successor]
	// lastUse (unix nanos) and inUse are the calls', for the idle stop.
	lastUse atomic.Int64
	inUse   atomic.Int64
}

// Host is what a mirror asks of the host it runs on, and no more (the
// host is its one maker): the mirror reaches its host through these calls,
// not through the host's fields.
type Host interface {
	// CallsReady says why no call connection can be opened now, nil if
	// one can; DialCall opens one to the replica at addr.
	CallsReady() error
	DialCall(ctx context.Context, addr string) (transport.CallConn, error)
	// TableVoters returns group name's voters as the group table last
	// read here has them, if it has the group on shard.
	TableVoters(name string, shard uint64) ([]uint64, bool)
	// MemberAddr returns the raft address of replica id of group.
	MemberAddr(group string, id uint64) (string, bool)
	// MembersRemote reads the group's membership at one of ask.
	MembersRemote(ctx context.Context, name string, shard uint64, ask []uint64) (wire.Membership, error)
	// Replaced is the group's maker now, if a call on m failed because m
	// was replaced (a mirror stopped unused, a shard took over), else nil.
	Replaced(ctx context.Context, m *Mirror, err error) Group
	// RetireIdle stops m if it is still idle and still the group's
	// mirror; GoBackground runs f on the host's background work.
	RetireIdle(m *Mirror) bool
	GoBackground(f func()) bool
}

// Group is what a call that failed on a replaced mirror is made again on:
// the group's maker of the moment (Host.Replaced).
type Group interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	Read(ctx context.Context, q fsm.Query) (any, error)
	StaleRead(q fsm.Query) (any, error)
}

// Successor is the shard that took a group over from its mirror
// (HandedOver): the calls waiting on the mirror wait on it.
type Successor interface {
	// AwaitApplied waits until the shard applied index, or ctx ends.
	AwaitApplied(ctx context.Context, index uint64) error
	StaleRead(q fsm.Query) (any, error)
}

// Config is what a mirror needs of its host's configuration (the host's
// Config documents the fields).
type Config struct {
	ReplicaID            uint64
	RTT, ProposalTimeout time.Duration
	ElectionTicks        int
	Logger               *slog.Logger
	// Idle is how long a mirror stays without use before it stops.
	Idle func() time.Duration
}

// New makes, not yet running, the mirror of group name on shard (Run and
// WatchIdle run it), asking host what Host names; its Sink has seen the
// group's state up to delivered (the index the shard this host ran of it
// applied, or 0).
func New(host Host, cfg Config, name string, shard uint64, sink groupcore.Sink, voters []uint64, delivered uint64) *Mirror {
	m := &Mirror{cfg: cfg, h: host, delivered: delivered, appliedUp: make(chan struct{}), connUp: make(chan struct{})}
	m.Init(cfg.Logger, cfg.ReplicaID, time.Duration(cfg.ElectionTicks)*cfg.RTT, name, shard, sink)
	m.SetVoters(voters)
	m.AppliedIndex.Store(delivered)
	m.lastUse.Store(time.Now().UnixNano())
	return m
}

// Retire stops the mirror feeding its Sink, for the shard whose closed
// channel is shardClosed to take over, and returns the index the Sink has
// seen. It does nothing, and reports false, once the shard stopped: the
// mirror then goes on feeding the Sink (the host decides under the same
// lock, after the stop: Handover).
func (m *Mirror) Retire(shardClosed <-chan struct{}) (delivered uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-shardClosed:
		return 0, false
	default:
	}
	m.retired = true
	return m.delivered, true
}

// HandedOver records that shard s took over the group's Sink: calls
// waiting for an index wait for it on s, and calls on the mirror fail with
// why, which Host.Replaced retries on s.
func (m *Mirror) HandedOver(s Successor, why error) {
	m.successor.Store(&s)
	m.Gone.Store(&why)
}

// Server is the replica feeding the mirror, 0 while none does.
func (m *Mirror) Server() uint64 { return m.server.Load() }

// Handover returns the index the Sink has seen from the mirror, and
// whether a shard took the Sink over from it, or is taking it.
func (m *Mirror) Handover() (delivered uint64, over bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.delivered, m.retired || m.successor.Load() != nil
}

// use counts a call on the mirror until the returned function is called.
func (m *Mirror) use() func() {
	m.inUse.Add(1)
	m.lastUse.Store(time.Now().UnixNano())
	return func() {
		m.lastUse.Store(time.Now().UnixNano())
		m.inUse.Add(-1)
	}
}

// Idle reports whether the mirror has had no call for Config.Idle and its
// Sink says nothing here uses the group.
func (m *Mirror) Idle() bool {
	if m.inUse.Load() > 0 || time.Since(time.Unix(0, m.lastUse.Load())) < m.cfg.Idle() {
		return false
	}
	i, ok := m.Sink.(groupcore.Idler)
	return ok && i.Idle()
}

// WatchIdle stops the mirror once it is idle (Host.RetireIdle).
func (m *Mirror) WatchIdle() {
	t := time.NewTicker(max(m.cfg.Idle()/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-m.Done():
			return
		case <-t.C:
		}
		if m.Idle() && m.h.RetireIdle(m) {
			return
		}
	}
}

// mirrorConn is one stream and the calls waiting on it.
type mirrorConn struct {
	c      transport.CallConn
	server uint64
	mu     sync.Mutex
	calls  map[uint64]chan wire.Msg
	broken chan struct{}
	once   sync.Once
}

func (c *mirrorConn) close() {
	c.once.Do(func() {
		c.c.Close()
		close(c.broken)
	})
}

func (c *mirrorConn) register(id uint64) chan wire.Msg {
	ch := make(chan wire.Msg, 1)
	c.mu.Lock()
	c.calls[id] = ch
	c.mu.Unlock()
	return ch
}

func (c *mirrorConn) forget(id uint64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

func (c *mirrorConn) answer(m wire.Msg) {
	c.mu.Lock()
	ch := c.calls[m.ID]
	delete(c.calls, m.ID)
	c.mu.Unlock()
	if ch != nil {
		ch <- m
	}
}

// RecvState receives the rest of a state sent in parts (wire.RecvParts;
// internal/replica's sendState sends them), first being its first part,
// and returns it as one snapshot message: the parts must have the same
// index and size, and add up to exactly that size.
func RecvState(c transport.CallConn, first wire.Msg) (wire.Msg, error) {
	state := bytes.NewBuffer(make([]byte, 0, min(first.Total, 64<<20)))
	state.Write(first.Data)
	last := first
	next := func() (wire.Msg, error) {
		b, err := c.Recv()
		if err != nil {
			return wire.Msg{}, err
		}
		return wire.Decode(b)
	}
	check := func(m wire.Msg) error {
		if m.Kind != wire.KindSnapshotPart || m.Index != first.Index || m.Total != first.Total {
			return fmt.Errorf("%w: a part (kind %d, index %d, state size %d) that does not follow %d bytes of a state of %d at index %d",
				wire.ErrMalformed, m.Kind, m.Index, m.Total, state.Len(), first.Total, first.Index)
		}
		last = m
		return nil
	}
	if err := wire.RecvParts(next, check, state, uint64(len(first.Data)), first.Total, wire.MaxStatePart); err != nil {
		return wire.Msg{}, err
	}
	return wire.Msg{Kind: wire.KindSnapshot, Index: first.Index, Leader: last.Leader, Data: state.Bytes()}, nil
}

// Run keeps a stream up until the mirror stops.
func (m *Mirror) Run() {
	r := &m.Core
	wait := m.cfg.RTT
	for {
		select {
		case <-r.Done():
			return
		default:
		}
		err := m.stream()
		m.connMu.Lock()
		m.last = err
		m.connMu.Unlock()
		m.server.Store(0)
		r.LeaderID.Store(0)
		select {
		case <-r.Done():
			return
		default:
		}
		if err != nil {
			r.Logger().Debug("fencelock: the mirror's stream ended; subscribing again", "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.Done():
			t.Stop()
			return
		}
		wait = min(2*wait, mirrorRetryMax)
		if err == nil {
			wait = m.cfg.RTT
		}
	}
}

// servers returns the replicas to subscribe to, in the order to try them
// from the next one: the group's voters as the table has them, with their
// addresses.
func (m *Mirror) servers() []uint64 {
	voters := m.ConfiguredVoters()
	if v, ok := m.h.TableVoters(m.Name(), m.ShardID()); ok {
		voters = v
		m.SetVoters(voters)
	}
	voters = slices.DeleteFunc(slices.Clone(voters), func(id uint64) bool { return id == m.cfg.ReplicaID })
	if len(voters) == 0 {
		return nil
	}
	m.next = (m.next + 1) % len(voters)
	out := append(voters[m.next:], voters[:m.next]...)
	if a := m.avoid.Load(); a != 0 {
		if i := slices.Index(out, a); i >= 0 && len(out) > 1 {
			out = append(slices.Delete(out, i, i+1), a)
		}
	}
	return out
}

// setLeader records the leader the server reports (0: none).
func (m *Mirror) setLeader(leader uint64) {
	m.LeaderID.Store(leader)
	if leader != 0 {
		m.noLeaderSince.Store(0)
		return
	}
	m.noLeaderSince.CompareAndSwap(0, time.Now().UnixNano())
}

// leave ends stream c because its server cannot reach the group (why):
// the mirror subscribes to another voter, this one last.
func (m *Mirror) leave(c *mirrorConn, why string) {
	if seeded.On(seeded.MirrorNeverFailsOver) { // the stream stays on the cut-off server
		return
	}
	m.avoid.Store(c.server)
	select {
	case <-c.broken:
		return
	default:
	}
	m.Logger().Info("fencelock: the replica serving the mirror cannot reach the group; trying another voter", "server", c.server, "why", why)
	c.close()
}

// addr returns the raft address of replica id (Host.memberAddr).
func (m *Mirror) addr(id uint64) (string, bool) { return m.h.MemberAddr(m.Name(), id) }

// stream subscribes to one server and applies what it sends until the
// stream breaks; the error says why.
func (m *Mirror) stream() error {
	r := &m.Core
	if err := m.h.CallsReady(); err != nil {
		return err
	}
	var errs []error
	for _, id := range m.servers() {
		addr, ok := m.addr(id)
		if !ok {
			errs = append(errs, fmt.Errorf("replica %d: no address known", id))
			continue
		}
		err := m.follow(id, addr)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("replica %d at %s: %w", id, addr, err))
		select {
		case <-r.Done():
			return nil
		default:
		}
	}
	if len(errs) == 0 {
		return errors.New("the group has no voter besides this replica")
	}
	return errors.Join(errs...)
}

// follow runs one stream from replica id at addr: nil when it ran and
// broke (worth trying again at once), else why it never went live.
func (m *Mirror) follow(id uint64, addr string) error {
	r := &m.Core
	ctx, cancel := context.WithTimeout(r.Context(), 2*m.cfg.ProposalTimeout)
	c, err := m.h.DialCall(ctx, addr)
	cancel()
	if err != nil {
		return err
	}
	conn := &mirrorConn{c: c, server: id, calls: make(map[uint64]chan wire.Msg), broken: make(chan struct{})}
	defer conn.close()
	stop := context.AfterFunc(r.Context(), conn.close)
	defer stop()
	sub := wire.Msg{Kind: wire.KindSubscribe, Shard: r.ShardID(), Name: r.Name()}
	if err := c.Send(sub.Encode(nil)); err != nil {
		return err
	}
	c.SetIdle(wire.IdleAfter)
	b, err := c.Recv()
	if err != nil {
		return err
	}
	first, err := wire.Decode(b)
	if err != nil {
		return err
	}
	switch first.Kind {
	case wire.KindRefuse:
		return fmt.Errorf("refused: %s", first.Text)
	case wire.KindSnapshot:
	case wire.KindSnapshotPart:
		if first, err = RecvState(c, first); err != nil {
			return fmt.Errorf("its snapshot: %w", err)
		}
	default:
		return fmt.Errorf("%w: a stream that opens with kind %d", wire.ErrMalformed, first.Kind)
	}
	st, err := fsm.Restore(bytes.NewReader(first.Data))
	if err != nil {
		return fmt.Errorf("its snapshot: %w", err)
	}
	first.Data = nil
	m.install(st)
	m.server.Store(id)
	m.noLeaderSince.Store(0)
	m.setLeader(first.Leader)
	patience := m.leaderPatience()
	m.connMu.Lock()
	m.conn = conn
	close(m.connUp)
	m.connUp = make(chan struct{})
	m.connMu.Unlock()
	defer func() {
		m.connMu.Lock()
		if m.conn == conn {
			m.conn = nil
		}
		m.connMu.Unlock()
	}()
	r.Logger().Debug("fencelock: mirror subscribed", "server", id, "index", st.Index())
	// The server gives up a stream it hears nothing on (a mirror gone
	// without a word, behind a dead link): pings say it is still wanted.
	// Those pings keep up a stream from a server cut off from the rest of
	// the group too: one that reports no leader for longer than the
	// patience is left for another voter.
	var pings sync.WaitGroup
	defer pings.Wait()
	defer conn.close()
	leaderless := false
	pings.Go(func() {
		t := time.NewTicker(wire.PingEvery)
		defer t.Stop()
		check := time.NewTicker(max(patience/4, time.Millisecond))
		defer check.Stop()
		ping := (&wire.Msg{Kind: wire.KindPing}).Encode(nil)
		for {
			select {
			case <-t.C:
				if c.Send(ping) != nil {
					conn.close()
					return
				}
			case <-check.C:
				if since := m.noLeaderSince.Load(); since != 0 && time.Since(time.Unix(0, since)) > patience {
					leaderless = true
					m.leave(conn, fmt.Sprintf("it has reported no leader of the group for more than %v", patience))
					return
				}
			case <-conn.broken:
				return
			}
		}
	})
	defer func() {
		conn.close()
		pings.Wait()
		if leaderless {
			m.leaderless++
		} else if r.LeaderID.Load() != 0 {
			m.leaderless = 0
		}
	}()
	for {
		b, err := c.Recv()
		if err != nil {
			return nil
		}
		msg, err := wire.Decode(b)
		if err != nil {
			r.Logger().Warn("fencelock: the replica serving the mirror sent a malformed message; subscribing again", "server", id, "err", err)
			return nil
		}
		switch msg.Kind {
		case wire.KindEntries:
			m.setLeader(msg.Leader)
			if err := m.apply(msg.Entries); err != nil {
				r.Logger().Warn("fencelock: the mirror cannot apply the group's entries; subscribing again", "server", id, "err", err)
				return nil
			}
		case wire.KindPing:
			m.setLeader(msg.Leader)
		case wire.KindResult:
			conn.answer(msg)
		case wire.KindRefuse:
			r.Logger().Debug("fencelock: the replica serving the mirror ended the stream", "server", id, "why", msg.Text)
			return nil
		default:
			return nil
		}
	}
}

// install makes st the mirror's state, from a new stream's snapshot.
func (m *Mirror) install(st *fsm.State) {
	m.mu.Lock()
	m.st = st
	m.live = false
	m.goLive()
	m.mu.Unlock()
	m.applied()
}

// goLive hands the state to the Sink once it is at least as new as what
// the Sink has seen; the caller holds mu.
func (m *Mirror) goLive() {
	if m.live || m.retired || m.st.Index() < m.delivered {
		return
	}
	m.live = true
	m.delivered = m.st.Index()
	m.note(m.st)
	m.Sink.Restored(m.st)
}

// note takes the replica's view from a state: its applied index, group ID
// and gate.
func (m *Mirror) note(st *fsm.State) {
	m.AppliedIndex.Store(st.Index())
	if id := st.GroupID(); id != 0 {
		m.SetGroupID(id)
	}
	m.noteGate(st.Gate())
}

// noteGate records the versions the group writes as the mirror applied
// them: a view only; the host keeps in Dir the versions of the groups it
// runs.
func (m *Mirror) noteGate(g fsm.Gate) {
	for {
		old := m.Writes.Load()
		if old.Covers(g) {
			return
		}
		next := old.Max(g)
		if m.Writes.CompareAndSwap(old, &next) {
			return
		}
	}
}

// apply applies a stream's entries in order.
func (m *Mirror) apply(es []wire.Entry) error {
	m.mu.Lock()
	defer m.applied()
	defer m.mu.Unlock()
	for _, e := range es {
		if e.Index <= m.st.Index() {
			continue // the snapshot had it
		}
		cmds, _, events, err := fsm.ApplyEntry(m.st, e.Index, e.Data, m.scratch[:0])
		m.scratch = cmds[:0]
		if errors.Is(err, fsm.ErrVersionTooNew) {
			return err
		}
		if !m.live {
			m.goLive()
			continue
		}
		if m.retired {
			continue
		}
		for i := range events {
			switch ev := &events[i]; ev.Kind {
			case fsm.EventLeaderStarted:
				if ev.Group != 0 {
					m.SetGroupID(ev.Group)
				}
			case fsm.EventGateRaised:
				m.noteGate(ev.Gate)
			}
		}
		m.AppliedIndex.Store(e.Index)
		m.delivered = e.Index
		if err == nil {
			m.Sink.Applied(e.Index, events)
		}
	}
	return nil
}

// applied wakes the calls waiting for an index.
func (m *Mirror) applied() {
	m.applyMu.Lock()
	close(m.appliedUp)
	m.appliedUp = make(chan struct{})
	m.applyMu.Unlock()
}

// reached reports whether the Sink has seen index, and returns a channel
// closed when that may have changed.
func (m *Mirror) reached(index uint64) (bool, <-chan struct{}) {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	m.mu.RLock()
	ok := m.live && m.delivered >= index
	m.mu.RUnlock()
	return ok, m.appliedUp
}

// await waits until the group's state here has index: the mirror's, or,
// once a shard took over, the shard's.
func (m *Mirror) await(ctx context.Context, index uint64) error {
	for {
		if s := m.successor.Load(); s != nil {
			return (*s).AwaitApplied(ctx, index)
		}
		ok, up := m.reached(index)
		if ok {
			return nil
		}
		select {
		case <-up:
		case <-ctx.Done():
			return m.unavailable(ctx.Err(), fmt.Errorf("the group applied index %d, which this replica's mirror has not reached yet", index))
		case <-m.Done():
			if s := m.successor.Load(); s != nil {
				continue
			}
			return m.ClosedErr()
		}
	}
}

// current returns the live stream, waiting for one until ctx ends. A call
// that must not wait long (a deadline, or FailFast) fails after about two
// election timeouts without one, with why the mirror has none.
func (m *Mirror) current(ctx context.Context) (*mirrorConn, error) {
	var limit <-chan time.Time
	if _, ok := ctx.Deadline(); ok || groupcore.IsFailFast(ctx) {
		t := time.NewTimer(max(2*m.ElectionTimeout(), 2*m.cfg.ProposalTimeout))
		defer t.Stop()
		limit = t.C
	}
	for {
		m.connMu.Lock()
		c, up := m.conn, m.connUp
		m.connMu.Unlock()
		if c != nil {
			select {
			case <-c.broken:
			default:
				return c, nil
			}
		}
		select {
		case <-up:
		case <-limit:
			return nil, m.noServer()
		case <-ctx.Done():
			return nil, m.unavailable(ctx.Err(), m.noServer())
		case <-m.Done():
			return nil, m.ClosedErr()
		}
	}
}

// noServer is the error of a call the mirror could not send: no replica
// that runs the group could be reached, with why the last attempt failed
// (as it is now: the call may have waited through several).
func (m *Mirror) noServer() error {
	m.connMu.Lock()
	last := m.last
	m.connMu.Unlock()
	why := "none answered yet"
	if last != nil {
		why = last.Error()
	}
	return &mirrorError{group: m.Name(), self: m.cfg.ReplicaID, code: wire.CodeUnavailable,
		text: fmt.Sprintf("no replica that runs it can be reached (voters %v): %s", m.ConfiguredVoters(), why)}
}

func (m *Mirror) unavailable(ctxErr, last error) error {
	return groupcore.Unavailable(ctxErr, last)
}

// call sends msg (a propose or a read) to the server until it answers:
// a broken stream, or a server that no longer runs the group, sends the
// same message again on the next stream; so does a server that answers no
// quorum or unavailable before the call's deadline (it cannot reach the
// group, another voter may), once per voter: when every voter answered so,
// the group's answer is the call's.
func (m *Mirror) call(ctx context.Context, msg wire.Msg) (wire.Msg, error) {
	var cutOff []uint64 // the servers that answered they cannot reach the group
	for {
		c, err := m.current(ctx)
		if err != nil {
			return wire.Msg{}, err
		}
		msg.ID = m.ids.Add(1)
		msg.Timeout = 0
		if d, ok := ctx.Deadline(); ok {
			msg.Timeout = uint64(max(time.Until(d).Milliseconds(), 1))
		}
		msg.FailFast = groupcore.IsFailFast(ctx)
		ch := c.register(msg.ID)
		if err := c.c.Send(msg.Encode(nil)); err != nil {
			c.forget(msg.ID)
			c.close()
			continue
		}
		select {
		case res := <-ch:
			if res.Code == wire.CodeElsewhere {
				m.Logger().Debug("fencelock: the replica serving the mirror no longer runs the group; trying another", "server", c.server, "why", res.Text)
				c.close()
				continue
			}
			if res.Code == wire.CodeNoQuorum || res.Code == wire.CodeUnavailable {
				if !slices.Contains(cutOff, c.server) {
					cutOff = append(cutOff, c.server)
				}
				if m.moveOn(ctx, cutOff) {
					m.leave(c, fmt.Sprintf("it answered a call: %s", res.Text))
					continue
				}
			}
			if res.Code != wire.CodeOK {
				return res, &mirrorError{group: m.Name(), self: m.cfg.ReplicaID, server: c.server, code: res.Code, text: res.Text}
			}
			return res, nil
		case <-c.broken:
			c.forget(msg.ID)
		case <-ctx.Done():
			c.forget(msg.ID)
			return wire.Msg{}, m.unavailable(ctx.Err(), fmt.Errorf("no answer yet from replica %d, which serves group %q here", c.server, m.Name()))
		case <-m.Done():
			return wire.Msg{}, m.ClosedErr()
		}
	}
}

// moveOn reports whether a call that servers cutOff answered with no
// quorum or unavailable should try another voter: one is left, and the
// call has time for it (an answer that came at its deadline says nothing
// about the server).
func (m *Mirror) moveOn(ctx context.Context, cutOff []uint64) bool {
	if ctx.Err() != nil {
		return false
	}
	if d, ok := ctx.Deadline(); ok && time.Until(d) < m.ElectionTimeout() {
		return false
	}
	voters := m.ConfiguredVoters()
	return slices.ContainsFunc(voters, func(id uint64) bool {
		return id != m.cfg.ReplicaID && !slices.Contains(cutOff, id)
	})
}

// Propose applies cmd through the mirror's server, retried on another
// voter as the mirror moves on, and returns once the mirror applied the
// entry, so its Sink has seen the entry's events: the same contract as
// Replica.Propose, whose errors it returns in a mirrorError.
func (m *Mirror) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	res, err := m.propose(ctx, cmd)
	if g := m.h.Replaced(ctx, m, err); g != nil {
		return g.Propose(ctx, cmd) // the same command: applied at most once
	}
	return res, err
}

// Read asks the server for its linearizable read point and runs q on the
// mirror's state once it applied that far.
func (m *Mirror) Read(ctx context.Context, q fsm.Query) (any, error) {
	v, err := m.read(ctx, q)
	if g := m.h.Replaced(ctx, m, err); g != nil {
		return g.Read(ctx, q)
	}
	return v, err
}

// StaleRead runs q on the mirror's state as it is: it may lag behind the
// group's leader.
func (m *Mirror) StaleRead(q fsm.Query) (any, error) {
	v, err := m.staleRead(q)
	if g := m.h.Replaced(context.Background(), m, err); g != nil { // a local read has no deadline: lookupLimit bounds the lookup
		return g.StaleRead(q)
	}
	return v, err
}

// Members reads the membership linearizably at one of the group's voters.
func (m *Mirror) Members(ctx context.Context) (wire.Membership, error) {
	return m.h.MembersRemote(ctx, m.Name(), m.ShardID(), m.ConfiguredVoters())
}

// Counters are the mirror's: its proposals, and the counts of its state.
func (m *Mirror) Counters() groupcore.Counters { return m.Ops.Counters(m.StaleRead) }

// Go runs f on the host's background work: the sessions' work on a named
// group outlives its mirror (the shard may take over).
func (m *Mirror) Go(f func()) bool { return m.h.GoBackground(f) }

// propose is Propose without the retry on a replacement.
func (m *Mirror) propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	defer m.use()()
	defer m.Ops.Proposals.Since(time.Now())
	data := fsm.AppendBatch(nil, []fsm.Command{cmd})
	res, err := m.call(ctx, wire.Msg{Kind: wire.KindPropose, Data: data})
	if err != nil {
		return fsm.Result{}, err
	}
	if err := m.await(ctx, res.Index); err != nil {
		return fsm.Result{}, err
	}
	return res.Res, nil
}

// read is Read without the retry on a replacement.
func (m *Mirror) read(ctx context.Context, q fsm.Query) (any, error) {
	defer m.use()()
	res, err := m.call(ctx, wire.Msg{Kind: wire.KindRead})
	if err != nil {
		return nil, err
	}
	if err := m.await(ctx, res.Index); err != nil {
		return nil, err
	}
	if s := m.successor.Load(); s != nil {
		return (*s).StaleRead(q)
	}
	return m.staleRead(q)
}

// staleRead is StaleRead without the retry on a replacement.
func (m *Mirror) staleRead(q fsm.Query) (any, error) {
	defer m.use()()
	select {
	case <-m.Done():
		return nil, m.ClosedErr()
	default:
	}
	if s := m.successor.Load(); s != nil {
		return (*s).StaleRead(q)
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.st == nil || !m.live {
		return nil, &mirrorError{group: m.Name(), self: m.cfg.ReplicaID, code: wire.CodeUnavailable,
			text: "this replica's mirror of the group has no state yet"}
	}
	return q(m.st), nil
}

// Status is the mirror's local view, without I/O: Mirror is its server (0
// while none), Voters the table's with their addresses.
func (m *Mirror) Status() groupcore.Status {
	r := &m.Core
	st := groupcore.Status{LeaderID: r.LeaderID.Load(), AppliedIndex: r.AppliedIndex.Load(), GroupID: r.GroupID(),
		NonVoting: true, Gate: r.Gate(), Mirror: m.server.Load(), Voters: map[uint64]string{}}
	for _, id := range r.ConfiguredVoters() {
		st.Voters[id], _ = m.addr(id)
	}
	return st
}

// Stop ends the mirror: calls in flight fail with its reason.
func (m *Mirror) Stop() {
	m.End(nil, nil) // its Context's end ends the stream (follow)
}

// mirrorError is a call's failure on a mirror: which group, through
// which server, and why; errors.Is finds lockapi.ErrUnavailable (and lockapi.ErrNoQuorum,
// or fsm.ErrVersionGated) as for a local shard.
type mirrorError struct {
	group        string
	self, server uint64
	code         byte
	text         string
}

func (e *mirrorError) Error() string {
	via := "no replica that runs it"
	if e.server != 0 {
		via = fmt.Sprintf("replica %d, which runs it", e.server)
	}
	return fmt.Sprintf("%v: group %q, reached from replica %d through %s: %s", lockapi.ErrUnavailable, e.group, e.self, via, e.text)
}

func (e *mirrorError) Unwrap() []error {
	switch e.code {
	case wire.CodeNoQuorum:
		return []error{lockapi.ErrUnavailable, lockapi.ErrNoQuorum}
	case wire.CodeGated:
		return []error{fsm.ErrVersionGated}
	case wire.CodeInvalid:
		return []error{lockapi.ErrInvalidConfig}
	}
	return []error{lockapi.ErrUnavailable}
}
