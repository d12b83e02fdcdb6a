package replica

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Group is one group as this host reaches it, and what Host.Group and
// Host.Lookup return: its two makers are a local shard (*Replica: this host
// votes in the group, or runs a non-voting copy of it) and a mirror
// (*mirror: a copy fed by a voter of a group this host does not run,
// mirror.go). Each does the job its own way; neither branches on the
// other. What a group applies reaches the Sink it was started with, from
// either.
//
// A call on a Group that this host replaced meanwhile (a mirror stopped
// unused, a shard whose voters moved off, a mirror whose group now runs
// here) is made again on the group's Group of the moment: the same
// command, which the group applies at most once.
type Group interface {
	// Propose applies cmd in the group, retried until ctx ends; see
	// Replica.Propose for its errors.
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
	// Read runs q as a linearizable read, failing as Propose does.
	Read(ctx context.Context, q fsm.Query) (any, error)
	// StaleRead runs q on this host's copy of the state, without asking the
	// group; once the copy stopped it fails with ErrClosed or why.
	StaleRead(q fsm.Query) (any, error)
	// Members reads the membership linearizably (a mirror at a voter).
	Members(ctx context.Context) (Membership, error)

	// Status is the local view, without I/O; Status.Mirror names a
	// mirror's server.
	Status() Status
	// Counters are what this host counted of the group (ops.go).
	Counters() Counters
	// Leader is the leader's ID as last known here; 0 when unknown.
	Leader() uint64
	// GroupID is the group's ID once known here; 0 before.
	GroupID() uint64
	// Gate is the versions the group writes, as applied here.
	Gate() fsm.Gate
	// Name is the group's name, "" for the default group; ShardID its
	// Dragonboat shard ID.
	Name() string
	ShardID() uint64
	// ConfiguredVoters are the group's voters as the group table (or the
	// Config) gives them.
	ConfiguredVoters() []uint64

	// Go runs f in the background unless the group is closing here; Close
	// waits for it. It reports whether f was started.
	Go(f func()) bool
}

var (
	_ Group = (*Replica)(nil)
	_ Group = (*mirror)(nil)
)

// groupCore is what the two makers of Group share, each embedding its own:
// the group's name and shard, its configured voters, the Sink its events
// go to, what it applied here (index, group ID, gate), its counters, and
// its lifecycle (closed, ctx, gone, wg). It proposes and reads nothing:
// that is each maker's own job.
type groupCore struct {
	cfg   Config
	log   *slog.Logger
	name  string // the group's name; "" for the default group
	shard uint64 // the group's shard ID (GroupShardID)
	sink  Sink

	// voters are the group's configured voters (the default group's are
	// its bootstrap Members; a named group's the table's, once it is set:
	// setVoters).
	voters  []uint64
	votersP atomic.Pointer[[]uint64] // replaces voters once set
	// gone is set once the group stopped running on this host for good
	// (the table dropped it, or moved it off this host): calls fail with
	// it.
	gone atomic.Pointer[error]

	leader       atomic.Uint64 // leader ID as last known here; 0 when unknown
	appliedIndex atomic.Uint64
	groupID      atomic.Uint64 // the group's ID, once applied here (fsm.State.GroupID)
	groupKnown   chan struct{} // closed once groupID is set (setGroupID)
	groupOnce    sync.Once
	// gate is the versions the group writes as applied here (versions.go).
	gate atomic.Pointer[fsm.Gate]
	ops  ops

	wg       sync.WaitGroup // background goroutines
	closed   chan struct{}
	stopOnce sync.Once
	ctx      context.Context // cancelled by stop: bounds background work
	cancel   context.CancelFunc
}

// init prepares a new maker's core, before anything else uses it.
func (g *groupCore) init(cfg Config, name string, shard uint64, sink Sink) {
	g.cfg, g.name, g.shard, g.sink = cfg, name, shard, sink
	g.log = cfg.Logger.With("replica", cfg.ReplicaID)
	if name != "" {
		g.log = g.log.With("group", name)
	}
	g.closed = make(chan struct{})
	g.groupKnown = make(chan struct{})
	baseline := fsm.Baseline
	g.gate.Store(&baseline)
	g.ctx, g.cancel = context.WithCancel(context.Background())
}

// Name returns the group's name; "" for the default group.
func (g *groupCore) Name() string { return g.name }

// ShardID returns the group's Dragonboat shard ID.
func (g *groupCore) ShardID() uint64 { return g.shard }

// Leader returns the leader's ID as last known here; 0 when unknown.
func (g *groupCore) Leader() uint64 { return g.leader.Load() }

// GroupID returns the group's ID once applied here; 0 before.
func (g *groupCore) GroupID() uint64 { return g.groupID.Load() }

// Gate returns the log and snapshot versions the group writes, as applied
// here (fsm.State.Gate).
func (g *groupCore) Gate() fsm.Gate { return *g.gate.Load() }

// ConfiguredVoters returns the group's voters as configured: a named
// group's voters as the group table (or, before it, Config.Groups) gives
// them, or the default group's bootstrap Members (its current voters are
// in Status, as AddReplica and RemoveReplica change them).
func (g *groupCore) ConfiguredVoters() []uint64 {
	if p := g.votersP.Load(); p != nil {
		return slices.Clone(*p)
	}
	return slices.Clone(g.voters)
}

// setVoters records the voters the group table gives the group.
func (g *groupCore) setVoters(voters []uint64) {
	v := slices.Clone(voters)
	g.votersP.Store(&v)
}

// setGroupID records the group's ID, applied here, and lets the proposals
// held back for it go (awaitGroupID).
func (g *groupCore) setGroupID(id uint64) {
	g.groupID.Store(id)
	g.groupOnce.Do(func() { close(g.groupKnown) })
}

// closedErr is what a call fails with once the group stopped here: the
// reason it stopped running here, or ErrClosed.
func (g *groupCore) closedErr() error {
	if e := g.gone.Load(); e != nil {
		return *e
	}
	return ErrClosed
}

// electionTimeout is the group's raft election timeout.
func (g *groupCore) electionTimeout() time.Duration {
	return time.Duration(g.cfg.ElectionTicks) * g.cfg.RTT
}
