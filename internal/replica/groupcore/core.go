// Package groupcore is what the two makers of a group's role share: a
// local Dragonboat shard (internal/replica's Replica) and a mirror fed by a
// voter (internal/replica/mirror) each embed a Core, which holds the
// group's name and shard, its configured voters, the Sink its events go
// to, what it applied here (index, leader, group ID, the versions it
// writes), its counters (Ops), and its lifecycle (Done, Context, Gone,
// Spawn and Wait, End). It proposes and reads nothing: that is each
// maker's own job.
//
// The role's vocabulary lives here too, so that both makers and the host
// name the same types: Sink (and Dropper, Idler) for what a group applies,
// Status for its local view, Counters for what it counted. internal/replica
// names them under the same names.
//
// It imports internal/fsm for the state machine's types, and lockapi for
// ErrClosed; nothing of internal/replica.
package groupcore

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/lockapi"
)

// Core is what the two makers of a group's role share, each embedding its
// own: the group's name and shard, its configured voters, the Sink its
// events go to, what it applied here (index, leader, group ID, gate), its
// counters, and its lifecycle (Done, Context, Gone, Spawn, End). Its
// exported fields are the makers' to set: the shard sets them from its
// Dragonboat events, the mirror from its stream; what they only read
// (the logger, the lifecycle) is methods. It proposes and reads nothing:
// that is each maker's own job.
type Core struct {
	log   *slog.Logger
	name  string // the group's name; "" for the default group
	shard uint64 // the group's shard ID
	Sink  Sink

	// votersP are the group's configured voters (the default group's are
	// its bootstrap Members; a named group's the table's): SetVoters.
	votersP atomic.Pointer[[]uint64]
	// Gone is set once the group stopped running on this host for good
	// (the table dropped it, or moved it off this host): calls fail with
	// it.
	Gone atomic.Pointer[error]

	LeaderID     atomic.Uint64 // leader ID as last known here; 0 when unknown
	AppliedIndex atomic.Uint64
	groupID      atomic.Uint64 // the group's ID, once applied here (fsm.State.GroupID)
	groupKnown   chan struct{} // closed once groupID is set (SetGroupID)
	groupOnce    sync.Once
	// Writes is the versions the group writes as applied here (Gate).
	Writes atomic.Pointer[fsm.Gate]
	Ops    Ops

	wg       sync.WaitGroup // background goroutines (Spawn)
	closed   chan struct{}  // closed by End (Done)
	stopOnce sync.Once
	ctx      context.Context // cancelled by End: bounds background work
	cancel   context.CancelFunc

	electionTimeout time.Duration
}

// Init prepares a new maker's core of group name (the default group's is
// "") on shard, before anything else uses it: it logs to log, naming
// replica and group, its raft election timeout is electionTimeout, and
// what the group applies reaches sink.
func (g *Core) Init(log *slog.Logger, replica uint64, electionTimeout time.Duration, name string, shard uint64, sink Sink) {
	g.log = log.With("replica", replica)
	if name != "" {
		g.log = g.log.With("group", name)
	}
	g.electionTimeout, g.name, g.shard, g.Sink = electionTimeout, name, shard, sink
	g.closed = make(chan struct{})
	g.groupKnown = make(chan struct{})
	baseline := fsm.Baseline
	g.Writes.Store(&baseline)
	g.ctx, g.cancel = context.WithCancel(context.Background())
}

// Logger is the group's logger, naming the replica and the group.
func (g *Core) Logger() *slog.Logger { return g.log }

// Done is closed once the group stopped here (End).
func (g *Core) Done() <-chan struct{} { return g.closed }

// Context ends once the group stopped here (End): it bounds the group's
// background work and the reads in flight.
func (g *Core) Context() context.Context { return g.ctx }

// Spawn runs f in a goroutine Wait waits for.
func (g *Core) Spawn(f func()) { g.wg.Go(f) }

// Wait returns once every goroutine Spawn started returned (after End,
// which makes them return).
func (g *Core) Wait() { g.wg.Wait() }

// End stops the group here, once: first runs, then Done closes and
// Context ends, then then runs (either may be nil). A second End returns
// once the first returned, so that whoever calls it may rely on what the
// first's then did.
func (g *Core) End(first, then func()) {
	g.stopOnce.Do(func() {
		if first != nil {
			first()
		}
		close(g.closed)
		g.cancel()
		if then != nil {
			then()
		}
	})
}

// Name returns the group's name; "" for the default group.
func (g *Core) Name() string { return g.name }

// ShardID returns the group's Dragonboat shard ID.
func (g *Core) ShardID() uint64 { return g.shard }

// Leader returns the leader's ID as last known here; 0 when unknown.
func (g *Core) Leader() uint64 { return g.LeaderID.Load() }

// GroupID returns the group's ID once applied here; 0 before.
func (g *Core) GroupID() uint64 { return g.groupID.Load() }

// Gate returns the log and snapshot versions the group writes, as applied
// here (fsm.State.Gate).
func (g *Core) Gate() fsm.Gate { return *g.Writes.Load() }

// ConfiguredVoters returns the group's voters as configured: a named
// group's voters as the group table (or, before it, Config.Groups) gives
// them, or the default group's bootstrap Members (its current voters are
// in Status, as AddReplica and RemoveReplica change them).
func (g *Core) ConfiguredVoters() []uint64 {
	if p := g.votersP.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

// SetVoters records the group's configured voters: its bootstrap Members,
// or those the group table gives it.
func (g *Core) SetVoters(voters []uint64) {
	v := slices.Clone(voters)
	g.votersP.Store(&v)
}

// SetGroupID records the group's ID, applied here, and lets the proposals
// held back for it go (GroupKnown).
func (g *Core) SetGroupID(id uint64) {
	g.groupID.Store(id)
	g.groupOnce.Do(func() { close(g.groupKnown) })
}

// GroupKnown is closed once the group's ID is known here (SetGroupID).
func (g *Core) GroupKnown() <-chan struct{} { return g.groupKnown }

// ClosedErr is what a call fails with once the group stopped here: the
// reason it stopped running here, or ErrClosed.
func (g *Core) ClosedErr() error {
	if e := g.Gone.Load(); e != nil {
		return *e
	}
	return lockapi.ErrClosed
}

// ElectionTimeout is the group's raft election timeout.
func (g *Core) ElectionTimeout() time.Duration { return g.electionTimeout }
