package fencelock

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/internal/testhook"
	"github.com/fencelock/fencelock/transport"
)

// Config configures one replica. Every replica of a group is started with the
// same Members (except a joining one) and its own ReplicaID, Addr and Dir.
type Config struct {
	ReplicaID uint64 // this replica, > 0
	// Members are the initial voting members, replica ID -> raft address
	// ("host:port"), the same map on every replica of a new group. A
	// mistake here is refused, not obeyed: a replica whose map differs from
	// its peers' (a mistyped address, a map of itself alone) bootstraps with
	// another group identity, so the others refuse its connections and both
	// sides log what differs; on restart the bootstrap members kept in Dir
	// win. docs/operations.md lists each mistake and what it does.
	Members    map[uint64]string
	Join       bool          // join a running group instead of bootstrapping (Members then empty)
	Addr       string        // raft address to listen on; defaults to Members[ReplicaID]
	Dir        string        // data directory: raft log and snapshots live here; required
	SessionTTL time.Duration // default TTL of new sessions; 0 means 10s

	// ListenAddr is the address to bind, e.g. "0.0.0.0:7001", when it
	// differs from Addr (which the other replicas dial). Optional.
	ListenAddr string
	// RTT is one raft tick, about a round trip between replicas: raft
	// heartbeats and election timeouts are counted in it. 0 means 10ms,
	// right for a LAN; use the measured round trip on slower networks.
	RTT time.Duration
	// ElectionTicks is the election timeout in RTTs (randomised in [E, 2E)
	// by raft); 0 means 15. HeartbeatTicks is the leader's heartbeat period
	// in RTTs; 0 means 2. ElectionTicks must exceed 2×HeartbeatTicks.
	ElectionTicks, HeartbeatTicks int
	// SnapshotEntries is how many entries are applied between automatic
	// snapshots; 0 means 10000. CompactionOverhead is how many entries
	// before a snapshot stay in the log for lagging followers; 0 means
	// SnapshotEntries. A replica further behind catches up from the latest
	// snapshot, and must restore it before the group's log is compacted
	// past it, or it needs the next one: with CompactionOverhead at least
	// SnapshotEntries that is SnapshotEntries to 2×SnapshotEntries entries
	// later, with less it can be at once. Size both to the group's entry
	// rate and the time a restore takes.
	SnapshotEntries, CompactionOverhead uint64
	// ProposalTimeout bounds one attempt of a raft proposal or read; an
	// attempt that times out is retried (never applied twice) until the
	// caller's context ends. A proposal sent to a peer that lost it (a
	// connection being re-established, a leader that just stepped down) is
	// only retried after it, so keep it short; 0 means 1s.
	ProposalTimeout time.Duration
	// DeploymentID keeps groups on one network apart: replicas with
	// different IDs ignore each other. 0 is a valid ID.
	DeploymentID uint64
	// Transport chooses how replicas talk; nil means TCP.
	Transport transport.Transport
	// Logger receives fencelock's and Dragonboat's logs; nil means
	// slog.Default(). Raft chatter is logged at debug level.
	Logger *slog.Logger
	// Groups seed the named groups beside the default one (whose voters
	// are Members and whose name is ""): each its own raft group, so a
	// quorum loss, a hot lock or a leader change in one touches no other.
	// The deployment's groups are its group table, replicated by the
	// default group: the first replica to start with Groups seeds it, and
	// from then on the table rules. CreateGroup, DropGroup and SetVoters
	// change it with no restart; a replica restarted with other Groups runs
	// the table's and logs the difference, and a joining replica needs
	// none. By default (Placement) every replica runs every group: as a
	// voter where the group's voters name it, else as a non-voting replica
	// (it stores and applies the group's log, so its sessions propose and
	// hear events locally; availability depends only on the voters). See
	// docs/operations.md, "Many groups".
	Groups []GroupConfig
	// Placement is which named groups this replica runs. PlaceEveryGroup
	// (the zero value) runs every group, a non-voting replica where it
	// does not vote: choose it for a few groups, or when most sessions use
	// most groups, as every call is then local. PlaceOwnGroups runs only
	// the groups this replica votes in and reaches the others through a
	// replica that runs them: choose it for many groups spread over many
	// replicas, where each replica should pay only for the groups it
	// serves (docs/operations.md, "Placement: when to choose which").
	// Replicas of one deployment may differ; a replica restarted with
	// PlaceOwnGroups keeps the non-voting replicas it already runs. Any
	// other value is refused (ErrInvalidConfig).
	Placement Placement
	// TracerProvider makes the OpenTelemetry spans of this node's sessions:
	// one per Acquire, TryAcquire (every mode), Campaign, TryCampaign,
	// Release and Resign, a child of the span in the call's context, with a
	// child span per raft proposal (docs/operations.md lists the
	// attributes). nil means otel.GetTracerProvider() as it is at Start: a
	// no-op unless the application set one (a provider set later is used
	// too, as the global one delegates to it). Attributes are computed only
	// for a recording span; with the no-op provider, or the global one
	// while no provider is set behind it, a call makes no span at all
	// unless its context carries a recording one.
	TracerProvider trace.TracerProvider

	clock   clock.Clock            // tests only
	applied func(testhook.Applied) // tests only: testhook.ObserveApplied
	reads   session.Gate           // tests only: testhook.Announce
}

// GroupConfig is one named group of a deployment.
type GroupConfig struct {
	// Name is 1 to 32 of [a-z0-9-], unique among the Groups.
	Name string
	// Voters are the IDs of the replicas that vote in the group: 1, 3 or 5
	// of them, no duplicates; in Config.Groups, from Members, for
	// CreateGroup any members of the deployment. The group is available
	// while a majority of them runs.
	Voters []uint64
}

// maxGroupName bounds a group's name.
const maxGroupName = 32

// validGroupName reports whether name is 1 to 32 of [a-z0-9-].
func validGroupName(name string) bool {
	if name == "" || len(name) > maxGroupName {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// checkGroups validates Groups: names, voters, and that their shard IDs
// (derived from the names, see replica.GroupShardID) are distinct.
func (c *Config) checkGroups() error {
	names := make(map[string]bool, len(c.Groups))
	shards := map[uint64]string{replica.GroupShardID(""): ""}
	for i, g := range c.Groups {
		field := fmt.Sprintf("Groups[%d]", i)
		if !validGroupName(g.Name) {
			return fmt.Errorf("%w: %s.Name %q: want 1 to %d of [a-z0-9-]", ErrInvalidConfig, field, truncateName(g.Name), maxGroupName)
		}
		field = fmt.Sprintf("Groups[%d] (%q)", i, g.Name)
		if names[g.Name] {
			return fmt.Errorf("%w: %s.Name: named twice", ErrInvalidConfig, field)
		}
		names[g.Name] = true
		id := replica.GroupShardID(g.Name)
		if other, ok := shards[id]; ok || id <= 1 {
			return fmt.Errorf("%w: %s.Name: its shard ID %d collides with group %q's; choose another name", ErrInvalidConfig, field, id, other)
		}
		shards[id] = g.Name
		switch len(g.Voters) {
		case 1, 3, 5:
		default:
			return fmt.Errorf("%w: %s.Voters: %d voters; want 1, 3 or 5", ErrInvalidConfig, field, len(g.Voters))
		}
		seen := make(map[uint64]bool, len(g.Voters))
		for _, v := range g.Voters {
			if seen[v] {
				return fmt.Errorf("%w: %s.Voters: %d listed twice", ErrInvalidConfig, field, v)
			}
			seen[v] = true
			if c.Join {
				// A joining replica has no Members: it checks only that
				// it is not a voter, as it cannot bootstrap the group.
				if v == 0 {
					return fmt.Errorf("%w: %s.Voters: replica ID 0", ErrInvalidConfig, field)
				}
				if v == c.ReplicaID {
					return fmt.Errorf("%w: %s.Voters: a joining replica (%d) cannot be a voter of a group", ErrInvalidConfig, field, v)
				}
				continue
			}
			if _, ok := c.Members[v]; !ok {
				return fmt.Errorf("%w: %s.Voters: %d is not one of Members", ErrInvalidConfig, field, v)
			}
		}
	}
	return nil
}

// truncateName shortens a name for an error message.
func truncateName(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// The defaults Start applies to zero fields of a Config.
const (
	DefaultSessionTTL      = 10 * time.Second
	DefaultRTT             = 10 * time.Millisecond
	DefaultElectionTicks   = 15
	DefaultHeartbeatTicks  = 2
	DefaultSnapshotEntries = 10000
	// DefaultCompactionOverhead is CompactionOverhead's default when
	// SnapshotEntries is left at its own; a zero CompactionOverhead is
	// SnapshotEntries, whatever that is.
	DefaultCompactionOverhead = DefaultSnapshotEntries
	DefaultProposalTimeout    = time.Second
)

const (
	defaultTTL = DefaultSessionTTL
	minTTL     = 100 * time.Millisecond
	maxTTL     = 24 * time.Hour
	minTimeout = 100 * time.Millisecond
)

// Validate reports whether Start would accept c, without starting anything.
// Every failure wraps ErrInvalidConfig (a SessionTTL out of range also wraps
// ErrInvalidTTL) and names the field.
func (c Config) Validate() error { return c.normalize() }

// checkTTL refuses a session TTL outside the range a lease can work in.
func checkTTL(ttl time.Duration) error {
	if ttl < minTTL || ttl > maxTTL {
		return fmt.Errorf("%w: %v outside [%v, %v]", ErrInvalidTTL, ttl, minTTL, maxTTL)
	}
	return nil
}

func checkAddr(field, addr string) error {
	if err := replica.CheckHostPort(addr); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidConfig, field, err)
	}
	return nil
}

// normalize fills c's defaults and validates it; Start calls it on its own
// copy.
func (c *Config) normalize() error {
	if c.ReplicaID == 0 {
		return fmt.Errorf("%w: ReplicaID must be > 0", ErrInvalidConfig)
	}
	if c.Dir == "" {
		return fmt.Errorf("%w: Dir is required", ErrInvalidConfig)
	}
	if c.Join && len(c.Members) > 0 {
		return fmt.Errorf("%w: a joining replica takes no Members", ErrInvalidConfig)
	}
	if !c.Join {
		if _, ok := c.Members[c.ReplicaID]; !ok {
			return fmt.Errorf("%w: Members must include ReplicaID %d", ErrInvalidConfig, c.ReplicaID)
		}
		at := map[string]uint64{} // Dragonboat panics on two members at one address
		for _, id := range slices.Sorted(maps.Keys(c.Members)) {
			addr := c.Members[id]
			if id == 0 || addr == "" {
				return fmt.Errorf("%w: member %d has no address", ErrInvalidConfig, id)
			}
			if err := checkAddr(fmt.Sprintf("Members[%d]", id), addr); err != nil {
				return err
			}
			if other, ok := at[addr]; ok {
				return fmt.Errorf("%w: Members[%d] and Members[%d] are both %s: each replica needs an address of its own", ErrInvalidConfig, other, id, addr)
			}
			at[addr] = id
		}
	}
	if err := c.checkGroups(); err != nil {
		return err
	}
	if err := c.checkPlacement(); err != nil {
		return err
	}
	if c.Addr == "" {
		c.Addr = c.Members[c.ReplicaID]
	}
	if c.Addr == "" {
		return fmt.Errorf("%w: Addr is required", ErrInvalidConfig)
	}
	if err := checkAddr("Addr", c.Addr); err != nil {
		return err
	}
	if c.ListenAddr != "" {
		if err := checkAddr("ListenAddr", c.ListenAddr); err != nil {
			return err
		}
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = defaultTTL
	}
	if err := checkTTL(c.SessionTTL); err != nil {
		return fmt.Errorf("%w: SessionTTL: %w", ErrInvalidConfig, err)
	}
	c.RTT = cmp.Or(c.RTT, DefaultRTT)
	if c.RTT < time.Millisecond {
		return fmt.Errorf("%w: RTT must be at least 1ms", ErrInvalidConfig)
	}
	c.ElectionTicks = cmp.Or(c.ElectionTicks, DefaultElectionTicks)
	c.HeartbeatTicks = cmp.Or(c.HeartbeatTicks, DefaultHeartbeatTicks)
	if c.HeartbeatTicks < 1 || c.ElectionTicks <= 2*c.HeartbeatTicks {
		return fmt.Errorf("%w: ElectionTicks must exceed 2×HeartbeatTicks", ErrInvalidConfig)
	}
	c.SnapshotEntries = cmp.Or(c.SnapshotEntries, DefaultSnapshotEntries)
	// A log that keeps less than a snapshot's worth can be compacted past
	// the snapshot a lagging replica is restoring as soon as the next one
	// is taken (see the field's doc).
	c.CompactionOverhead = cmp.Or(c.CompactionOverhead, c.SnapshotEntries)
	c.ProposalTimeout = cmp.Or(c.ProposalTimeout, DefaultProposalTimeout)
	if c.ProposalTimeout < minTimeout || c.ProposalTimeout < 2*c.RTT {
		return fmt.Errorf("%w: ProposalTimeout %v is too short", ErrInvalidConfig, c.ProposalTimeout)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.clock == nil {
		c.clock = clock.Real
	}
	return nil
}

// tracerName is the instrumentation scope of fencelock's spans.
const tracerName = "github.com/fencelock/fencelock"

// Node is one running replica of a fencelock group, and the entry point for
// the sessions of the process it runs in. Its methods are safe for concurrent
// use.
type Node struct {
	cfg  Config
	log  *slog.Logger
	host *replica.Host    // one NodeHost, one shard per group
	r    *replica.Replica // the default group's replica
	h    *session.Host    // the sessions' machinery

	closeOnce sync.Once
}

// nodeGroups resolves a group's name to this node's replica of it, for the
// session machinery (session.Groups).
type nodeGroups struct{ n *Node }

// Group returns this node's shard or mirror of group name, nil for a
// group this node does not reach now.
func (g nodeGroups) Group(name string) session.Group {
	if r := g.n.host.Group(name); r != nil {
		return r
	}
	return nil // a nil interface: the session machinery compares with nil
}

// Lookup returns this node's shard or mirror of group name, waiting for
// one the group table created a moment ago (see replica.Host.Lookup).
func (g nodeGroups) Lookup(ctx context.Context, name string) (session.Group, error) {
	r, err := g.n.host.Lookup(ctx, name)
	if r == nil {
		return nil, err
	}
	return r, err
}

// Names returns the groups this node runs, the default group first.
func (g nodeGroups) Names() []string { return g.n.host.Groups() }

// Reachable returns every group a call on this node can name, the default
// group first (see replica.Host.Reachable).
func (g nodeGroups) Reachable(ctx context.Context) ([]string, error) {
	return g.n.host.Reachable(ctx)
}

func (n *Node) groups() session.Groups { return nodeGroups{n} }

// Start starts this replica and returns once it runs: it has recovered its
// state from Dir, if any, and joined its group's traffic. It does not wait for
// a quorum: the replicas of a new group are started one after another. Calls
// made before the group has a leader wait for one, bounded by their context.
//
// A replica restarted on the same Dir recovers everything it had: start it
// with the same Config. Every failure wraps ErrInvalidConfig.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, log: cfg.Logger.With("replica", cfg.ReplicaID)}
	n.h = session.NewHost(session.Config{
		ReplicaID: cfg.ReplicaID, ProposalTimeout: cfg.ProposalTimeout, RTT: cfg.RTT,
		Clock: cfg.clock, Log: n.log, Groups: n.groups(), UnknownGroup: ErrUnknownGroup,
		Tracer: cfg.TracerProvider.Tracer(tracerName), Tracing: session.Tracing(cfg.TracerProvider),
	})
	rc := replicaConfig(cfg)
	rc.OnApplied, rc.Reads = cfg.applied, cfg.reads
	host, err := replica.Start(rc, n.h.Sink)
	if err != nil {
		n.h.Close(ErrClosed)
		return nil, err
	}
	n.host = host
	n.r = host.Shard("") // every host runs the default group's shard
	return n, nil
}

// Close stops this replica. It first hands the raft leadership of every
// group this replica leads to the voter whose log is furthest along among
// those it reaches, and waits for each new leader, at most a few election
// timeouts (3 election timeouts and 2 RTTs, 470ms with the defaults): the other replicas then go on at once instead of waiting
// an election timeout for a leader that is gone, and their calls see at
// most the few round trips of the transfer. A group with no voter to hand
// to (no quorum, a group of one) or whose transfer does not happen within
// the bound is left as it is, and its other replicas elect a leader after
// an election timeout, as after a crash; Close never waits longer.
//
// Then every session of this node ends: its Done channel closes and Err
// returns ErrClosed. Close does not release their locks at the group, as a
// crash would not: the group expires the sessions after their TTL, unless
// the process comes back within it and resumes them (ResumeSession, with a
// token from Session.ResumeToken kept across the restart). Close sessions
// first (Session.Close) to free locks at once: a Release or Resign made
// once Close began fails with ErrClosed and frees nothing. Close is
// idempotent and always returns nil.
func (n *Node) Close() error { return n.close(true) }

// close stops the node, handing its groups over first if handover (Close),
// or as a crash would (testhook.Crash).
func (n *Node) close(handover bool) error {
	n.closeOnce.Do(func() {
		if handover {
			n.host.Handover(context.Background()) // bounded by HandoverTimeout per group
		}
		n.h.Close(ErrClosed)
		n.host.Close() // waits for the background work too
	})
	return nil
}

// Status is this replica's local view of the group.
type Status struct {
	ReplicaID, LeaderID uint64
	IsLeader            bool
	Term                uint64 // raft term of the leader known locally
	AppliedIndex        uint64 // last raft log index applied on this replica

	// NonVoting is true while this replica does not vote (see AddNonVoting).
	NonVoting bool
	// Removed is true once this replica was removed from the group.
	Removed bool
	// LastSnapshotIndex is the log index of the latest snapshot this replica
	// took, or restored its state from; 0 before the first.
	LastSnapshotIndex uint64
	// GroupID is the group's ID, chosen at random by its first raft leader
	// and never changed after; 0 until this replica applied it. Fences
	// carry it, so that a resource can refuse the tokens of another group,
	// or of this group bootstrapped again from empty Dirs (see Fence).
	GroupID uint64
	// Voters are the voting members as last applied on this replica, and
	// ConfigChangeIndex the log index of that membership change. Members
	// gives the full membership as a linearizable read.
	Voters            map[uint64]string
	ConfigChangeIndex uint64
	// Unreached are the other voters this replica has not heard from in
	// the last few election timeouts (at least 3 s), sorted: each is down,
	// or cut off from this replica. Only the leader and, while there is
	// none, every voter can tell (a follower hears from the leader alone):
	// on a follower of a group with a leader it is empty; ask the leader.
	Unreached []uint64

	// Groups are every group this replica runs, the default group (Name
	// "") first, then the named groups in name order; the fields above are
	// the default group's.
	Groups []GroupStatus
	// Mirrors are the groups this replica reaches without running them, in
	// name order: under PlaceOwnGroups, a group it does not vote in that a
	// session or call here uses (it keeps a mirror of it, fed by one of
	// its voters: GroupStatus.Mirror). Their NonVoting is true, and Term,
	// Unreached and the snapshot and membership fields are zero: a mirror
	// has no raft state of its own.
	Mirrors []GroupStatus
	// FollowsGroupTable is true once this replica runs the named groups
	// the group table lists (it has seen the table set, seeded from
	// Config.Groups or changed by CreateGroup), rather than its own
	// Config.Groups; it never turns false again. While it is false, a
	// group created through another replica is not run here yet.
	FollowsGroupTable bool

	// Version is what this replica runs (BuildVersion): the library's
	// build, and the newest log and snapshot formats it reads.
	Version Version
	// Writes is the log entry and snapshot formats the default group
	// writes (its version gate), as applied here: see GroupStatus.Writes.
	Writes Formats
}

// Formats is a pair of format versions: of the raft log's entries (Codec)
// and of the snapshots (Snapshot).
type Formats struct{ Codec, Snapshot int }

// GroupStatus is this replica's local view of one group.
type GroupStatus struct {
	Name string // "" for the default group
	// GroupID is the group's ID (see Status.GroupID): Fence().Group of its
	// locks; 0 until this replica applied it.
	GroupID  uint64
	LeaderID uint64 // 0 when no leader is known
	IsLeader bool
	// Voters are the group's voting members as last applied here.
	Voters       map[uint64]string
	Term         uint64
	AppliedIndex uint64
	// NonVoting is true where this replica does not vote in the group:
	// it runs a non-voting replica of every group it is not a voter of.
	NonVoting bool
	// Removed and LastSnapshotIndex mean what Status' fields do, for this
	// group.
	Removed           bool
	LastSnapshotIndex uint64
	// Unreached are the group's other voters this replica has not heard
	// from lately (see Status.Unreached).
	Unreached []uint64
	// Mirror is set in Status.Mirrors only: the voter of the group that
	// feeds this replica's mirror of it, 0 while none does (the mirror is
	// between voters).
	Mirror uint64
	// Writes is the log entry and snapshot formats the group writes (its
	// version gate), as applied here: log 8 and snapshot 6 until every
	// voter and non-voting member of the group runs a build that reads
	// newer ones, then raised by the group's leader, for good
	// (docs/operations.md, "Upgrading"). A call that needs a newer log
	// format fails with ErrVersionGated until then.
	Writes Formats
}

// Status returns this replica's local view, without I/O. LeaderID is 0 when
// no leader is known.
func (n *Node) Status() Status {
	st := n.r.Status()
	out := Status{
		ReplicaID: n.cfg.ReplicaID, LeaderID: st.LeaderID, IsLeader: st.LeaderID == n.cfg.ReplicaID,
		Term: st.Term, AppliedIndex: st.AppliedIndex,
		NonVoting: st.NonVoting, Removed: st.Removed, LastSnapshotIndex: st.LastSnapshotIndex,
		GroupID: st.GroupID, Voters: st.Voters, ConfigChangeIndex: st.ConfigChangeIndex,
		Unreached: st.Unreached, Version: BuildVersion(), Writes: formats(st.Gate),
		FollowsGroupTable: n.host.FollowsTable(),
	}
	for _, r := range n.host.Replicas() {
		name, gs := r.Name(), st
		if name != "" {
			gs = r.Status()
		}
		out.Groups = append(out.Groups, GroupStatus{
			Name: name, GroupID: gs.GroupID, LeaderID: gs.LeaderID, IsLeader: gs.LeaderID == n.cfg.ReplicaID,
			Voters: gs.Voters, Term: gs.Term, AppliedIndex: gs.AppliedIndex, NonVoting: gs.NonVoting,
			Removed: gs.Removed, LastSnapshotIndex: gs.LastSnapshotIndex, Unreached: gs.Unreached,
			Writes: formats(gs.Gate),
		})
	}
	for _, r := range n.host.Mirrors() {
		ms := r.Status()
		out.Mirrors = append(out.Mirrors, GroupStatus{
			Name: r.Name(), GroupID: ms.GroupID, LeaderID: ms.LeaderID, Voters: ms.Voters,
			AppliedIndex: ms.AppliedIndex, NonVoting: true, Mirror: ms.Mirror, Writes: formats(ms.Gate),
		})
	}
	return out
}

func formats(g session.Gate) Formats { return Formats{Codec: g.Codec, Snapshot: g.Snapshot} }

// The test hooks (internal/testhook) reach into a Node, a Config and a
// Session through these; internal/testhook cannot import this package.
func init() {
	testhook.Register(func(s any, frozen bool) { s.(*Session).s.Testing().Freeze(frozen) })
	testhook.RegisterPause(func(s any, paused bool) { s.(*Session).s.Testing().Pause(paused) })
	testhook.RegisterLastKeepAlive(func(s any) time.Time { return s.(*Session).s.Testing().LastKeepAlive() })
	testhook.RegisterClock(func(cfg any, c clock.Clock) { cfg.(*Config).clock = c })
	testhook.RegisterObserveApplied(func(cfg any, f func(testhook.Applied)) { cfg.(*Config).applied = f })
	testhook.RegisterAnnounce(func(cfg any, reads session.Gate) { cfg.(*Config).reads = reads })
	testhook.RegisterSnapshots(func(node any) testhook.Snapshots { return node.(*Node).r.Snapshots() })
	testhook.RegisterMirrors(func(node any) map[string]uint64 { return node.(*Node).host.MirrorsApplied() })
	testhook.RegisterCrash(func(ctx context.Context, node any) uint64 {
		n := node.(*Node)
		n.host.TestingCrash(ctx)
		n.close(false) // a crash hands nothing over
		return n.host.TestingLogStoreStats().Dropped
	})
}

// TransferLeadership hands the leadership of group ("" is the default
// group) to replica to, and returns once this replica sees to lead it. Use
// it before stopping a leader (a graceful restart): the group then does not
// wait an election timeout for a new one. The transfer is repeated until it
// happens or ctx ends (ErrUnavailable and ctx's error): raft does not
// promise it, and a target that is behind catches up first. A group this
// replica does not run is ErrUnknownGroup; a target that is not a voter of
// the group, or a call on a replica that does not vote in it, is
// ErrMembership. While the transfer runs the group accepts no proposals;
// calls wait for the new leader.
func (n *Node) TransferLeadership(ctx context.Context, group string, to uint64) error {
	return n.host.TransferLeadership(ctx, group, to)
}

// replicaConfig is the replica's configuration for cfg (normalized): what
// Start runs and what Restore writes a Dir for, built in one place so that
// a restored Dir is the Dir Start expects.
func replicaConfig(cfg Config) replica.Config {
	groups := make([]replica.GroupConfig, len(cfg.Groups))
	for i, g := range cfg.Groups {
		groups[i] = replica.GroupConfig{Name: g.Name, Voters: slices.Clone(g.Voters)}
	}
	return replica.Config{
		ReplicaID: cfg.ReplicaID, Members: cfg.Members, Join: cfg.Join,
		Addr: cfg.Addr, ListenAddr: cfg.ListenAddr, Dir: cfg.Dir,
		RTT: cfg.RTT, ProposalTimeout: cfg.ProposalTimeout,
		ElectionTicks: cfg.ElectionTicks, HeartbeatTicks: cfg.HeartbeatTicks,
		SnapshotEntries: cfg.SnapshotEntries, CompactionOverhead: cfg.CompactionOverhead,
		DeploymentID: cfg.DeploymentID, Transport: cfg.Transport, Logger: cfg.Logger, Clock: cfg.clock,
		Groups: groups, Placement: cfg.Placement.replicaPlacement(),
	}
}
