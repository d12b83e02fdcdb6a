package fencelock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/dblog"
	"github.com/fencelock/fencelock/internal/expiry"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/proposer"
	"github.com/fencelock/fencelock/transport"
)

// shardID is the raft group's ID inside Dragonboat: a fencelock group is one
// Dragonboat shard.
const shardID = 1

// Config configures one replica. Every replica of a group is started with the
// same Members (except a joining one) and its own ReplicaID, Addr and Dir.
type Config struct {
	ReplicaID  uint64            // this replica, > 0
	Members    map[uint64]string // initial voting members: replica ID -> raft address "host:port"
	Join       bool              // join a running group instead of bootstrapping (Members then empty)
	Addr       string            // raft address to listen on; defaults to Members[ReplicaID]
	Dir        string            // data directory: raft log and snapshots live here; required
	SessionTTL time.Duration     // default TTL of new sessions; 0 means 10s

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
	// before a snapshot stay in the log for lagging followers; 0 means 5000.
	// A replica further behind catches up from a snapshot.
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

	clock clock.Clock // tests only
}

// The defaults Start applies to zero fields of a Config.
const (
	DefaultSessionTTL         = 10 * time.Second
	DefaultRTT                = 10 * time.Millisecond
	DefaultElectionTicks      = 15
	DefaultHeartbeatTicks     = 2
	DefaultSnapshotEntries    = 10000
	DefaultCompactionOverhead = 5000
	DefaultProposalTimeout    = time.Second
)

const (
	defaultTTL  = DefaultSessionTTL
	minTTL      = 100 * time.Millisecond
	maxTTL      = 24 * time.Hour
	minTimeout  = 100 * time.Millisecond
	expireRetry = 250 * time.Millisecond
)

// Validate reports whether Start would accept c, without starting anything.
// Every failure wraps ErrInvalidConfig (a SessionTTL out of range also wraps
// ErrInvalidTTL) and names the field.
func (c Config) Validate() error { return c.normalize() }

// checkHostPort refuses an address Dragonboat could not use, in our words
// rather than its own; callers wrap the error in their sentinel.
func checkHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || host == "" || perr != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("address %q is not host:port with a port in 1-65535", truncate(addr, 64))
	}
	return nil
}

func checkAddr(field, addr string) error {
	if err := checkHostPort(addr); err != nil {
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
		for id, addr := range c.Members {
			if id == 0 || addr == "" {
				return fmt.Errorf("%w: member %d has no address", ErrInvalidConfig, id)
			}
			if err := checkAddr(fmt.Sprintf("Members[%d]", id), addr); err != nil {
				return err
			}
		}
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
	if c.SessionTTL < minTTL || c.SessionTTL > maxTTL {
		return fmt.Errorf("%w: %w: SessionTTL %v outside [%v, %v]", ErrInvalidConfig, ErrInvalidTTL, c.SessionTTL, minTTL, maxTTL)
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
	c.CompactionOverhead = cmp.Or(c.CompactionOverhead, DefaultCompactionOverhead)
	c.ProposalTimeout = cmp.Or(c.ProposalTimeout, DefaultProposalTimeout)
	if c.ProposalTimeout < minTimeout || c.ProposalTimeout < 2*c.RTT {
		return fmt.Errorf("%w: ProposalTimeout %v is too short", ErrInvalidConfig, c.ProposalTimeout)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.clock == nil {
		c.clock = clock.Real
	}
	return nil
}

// Node is one running replica of a fencelock group, and the entry point for
// the sessions of the process it runs in. Its methods are safe for concurrent
// use.
type Node struct {
	cfg     Config
	log     *slog.Logger
	nh      *dragonboat.NodeHost
	prop    *proposer.Proposer
	tracker *expiry.Tracker
	watches *watches // Observe calls by election
	peers   *peers   // the group's identity, and the peers this replica reaches

	releaseDir func() // frees Dir for another Start in this process

	leader  atomic.Uint64 // leader ID as last reported by raft; 0 when unknown
	groupID atomic.Uint64 // the group's ID, once this replica applied it (fsm.State.GroupID)
	term    atomic.Uint64
	applied atomic.Uint64
	// restoredIndex is the index of the last snapshot the state was
	// restored from, at restart or when catching up.
	restoredIndex atomic.Uint64
	ops           ops // membership role, snapshots and counters: see ops.go
	snaps         snapStats

	// leaderMu guards leaderUp, which is closed (and replaced) whenever a
	// leader becomes known, so that retries waiting for one go at once.
	leaderMu sync.Mutex
	leaderUp chan struct{}

	mu       sync.RWMutex
	sessions map[uint64]*Session // sessions that live on this node
	closing  bool
	wg       sync.WaitGroup // background goroutines

	closed    chan struct{}
	closeOnce sync.Once
	ctx       context.Context // cancelled by Close: bounds background work
	cancel    context.CancelFunc
}

// Start starts this replica and returns once it runs: it has recovered its
// state from Dir, if any, and joined its group's traffic. It does not wait for
// a quorum: the replicas of a new group are started one after another. Calls
// made before the group has a leader wait for one, bounded by their context.
//
// A replica restarted on the same Dir recovers everything it had: start it
// with the same Config.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	releaseDir, err := claimDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	n, err := start(cfg)
	if err != nil {
		releaseDir()
		return nil, err
	}
	n.releaseDir = releaseDir
	return n, nil
}

func start(cfg Config) (*Node, error) {
	g, err := loadGroup(&cfg)
	if err != nil {
		return nil, err
	}
	dblog.Use(cfg.Logger)
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With("replica", cfg.ReplicaID),
		sessions: make(map[uint64]*Session),
		watches:  newWatches(),
		closed:   make(chan struct{}),
		leaderUp: make(chan struct{}),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.peers = newPeers(n, g)
	// A restarted replica's group is the one in Dir: Members only matter
	// when a group bootstraps, and the membership changes only through
	// AddReplica and RemoveReplica. Dragonboat refuses a restart whose
	// members differ from the bootstrap's, so it is given those.
	bootstrap := cfg.Members
	if !cfg.Join && g.Group != "" && !maps.Equal(g.Members, cfg.Members) {
		n.log.Warn("fencelock: Members differ from the members this replica's group was bootstrapped with, kept in Dir; "+
			"the group's own membership is used, which only AddReplica and RemoveReplica change",
			"differences", peering.DiffMembers(cfg.Members, g.Members))
		bootstrap = g.Members
	}
	n.tracker = expiry.New(cfg.clock, expireRetry, cfg.ReplicaID, expiry.Actions{Start: n.proposeLeaderStart, Expire: n.proposeExpire})
	// The proposer exists before the NodeHost, whose leader events it hears;
	// it proposes nothing until the first call, made after Start returns.
	n.prop = proposer.New(func(cmd []byte, timeout time.Duration) (*dragonboat.RequestState, error) {
		return n.nh.Propose(n.nh.GetNoOPSession(shardID), cmd, timeout)
	}, proposer.Config{Timeout: cfg.ProposalTimeout, MaxBatch: 256, InFlight: 16})

	nhc := config.NodeHostConfig{
		NodeHostDir:       cfg.Dir,
		RTTMillisecond:    uint64(cfg.RTT / time.Millisecond),
		RaftAddress:       cfg.Addr,
		ListenAddress:     cfg.ListenAddr,
		DeploymentID:      cfg.DeploymentID,
		RaftEventListener: leaderListener{n},
		Expert:            config.ExpertConfig{LogDB: config.GetTinyMemLogDBConfig()},
	}
	nhc.SystemEventListener = systemListener{n}
	boundQueues(&nhc)
	tr := cfg.Transport
	if tr == nil {
		tr = transport.TCP()
	}
	if err := tr.Configure(&nhc); err != nil {
		n.prop.Close()
		n.cancel()
		return nil, fmt.Errorf("%w: transport: %v", ErrInvalidConfig, err)
	}
	if b, ok := nhc.Expert.TransportFactory.(peering.Binder); ok {
		nhc.Expert.TransportFactory = b.Bind(n.peers)
	}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		n.prop.Close()
		n.cancel()
		return nil, startError(cfg, err)
	}
	n.nh = nh
	rc := config.Config{
		ShardID:             shardID,
		ReplicaID:           cfg.ReplicaID,
		ElectionRTT:         uint64(cfg.ElectionTicks),
		HeartbeatRTT:        uint64(cfg.HeartbeatTicks),
		CheckQuorum:         true,
		PreVote:             true,
		SnapshotEntries:     cfg.SnapshotEntries,
		CompactionOverhead:  cfg.CompactionOverhead,
		OrderedConfigChange: true,
		WaitReady:           true,
		// A joining replica always starts non-voting: AddReplica adds a new
		// voter as non-voting first and then promotes it, which the replica
		// follows from its log or snapshot. Starting a replica that the log
		// makes non-voting as a voter would stop Dragonboat with a panic.
		IsNonVoting:     cfg.Join,
		MaxInMemLogSize: maxInMemLog,
	}
	members := make(map[uint64]dragonboat.Target, len(bootstrap))
	for id, addr := range bootstrap {
		members[id] = addr
	}
	if err := nh.StartReplica(members, cfg.Join, fsm.NewStateMachine(fsmObserver{n}), rc); err != nil {
		n.prop.Close()
		n.cancel()
		nh.Close()
		return nil, startError(cfg, err)
	}
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.tracker.Run(n.closed)
	}()
	go func() {
		defer n.wg.Done()
		n.peers.monitor(n.closed)
	}()
	n.log.Debug("fencelock replica started", "addr", cfg.Addr, "dir", cfg.Dir)
	return n, nil
}

// startError says why Dragonboat refused to start the replica, in the
// library's words. Every such failure is a matter of configuration (or of
// the Dir and the address it names), so it wraps ErrInvalidConfig.
func startError(cfg Config, err error) error {
	why := err.Error()
	switch {
	case errors.Is(err, dragonboat.ErrReplicaRemoved):
		return fmt.Errorf("%w: start replica %d: %w: start a new replica with a fresh ID and an empty Dir", ErrInvalidConfig, cfg.ReplicaID, ErrIDRemoved)
	case errors.Is(err, dragonboat.ErrInvalidShardSettings):
		why = "Join does not match how this Dir's replica first started (a replica that joined restarts with Join, one that bootstrapped without it)"
	case errors.Is(err, syscall.EADDRINUSE):
		why = fmt.Sprintf("the raft address %s is in use by another process", cmp.Or(cfg.ListenAddr, cfg.Addr))
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		why = fmt.Sprintf("the raft address %s is not an address of this host (set ListenAddr to bind another)", cmp.Or(cfg.ListenAddr, cfg.Addr))
	}
	return fmt.Errorf("%w: start replica %d: %s", ErrInvalidConfig, cfg.ReplicaID, why)
}

// Close stops this replica. Every session of this node ends: its Done
// channel closes and Err returns ErrClosed. Close does not release their
// locks at the group, as a crash would not: the group expires the sessions
// after their TTL. Close sessions first (Session.Close) to free locks at
// once. Close is idempotent and always returns nil.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closing = true
		sessions := make([]*Session, 0, len(n.sessions))
		for _, s := range n.sessions {
			sessions = append(sessions, s)
		}
		n.mu.Unlock()
		close(n.closed)
		n.cancel()
		for _, s := range sessions {
			s.end(ErrClosed)
		}
		n.prop.Close()
		n.nh.Close()
		n.wg.Wait()
		if n.releaseDir != nil {
			n.releaseDir()
		}
		n.log.Debug("fencelock replica closed")
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
}

// Status returns this replica's local view, without I/O. LeaderID is 0 when
// no leader is known.
func (n *Node) Status() Status {
	leader := n.leader.Load()
	st := Status{
		ReplicaID:    n.cfg.ReplicaID,
		LeaderID:     leader,
		IsLeader:     leader == n.cfg.ReplicaID,
		Term:         n.term.Load(),
		AppliedIndex: n.applied.Load(),
		GroupID:      n.groupID.Load(),
	}
	n.opsStatus(&st)
	return st
}

// goBackground runs f in the background unless the node is closing.
func (n *Node) goBackground(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

// leaderListener receives Dragonboat's leader updates; it runs on a
// Dragonboat goroutine and must not block.
type leaderListener struct{ n *Node }

func (l leaderListener) LeaderUpdated(info raftio.LeaderInfo) {
	n := l.n
	if info.ShardID != shardID {
		return
	}
	old := n.leader.Swap(info.LeaderID)
	n.term.Store(info.Term)
	n.tracker.SetLeader(info.LeaderID == n.cfg.ReplicaID, info.Term)
	if old != info.LeaderID {
		n.prop.LeaderChanged()
		n.leaderChanged(old, info)
		if info.LeaderID != 0 {
			n.leaderMu.Lock()
			close(n.leaderUp)
			n.leaderUp = make(chan struct{})
			n.leaderMu.Unlock()
		}
	}
}

// leaderKnown returns a channel closed when a leader next becomes known.
func (n *Node) leaderKnown() <-chan struct{} {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	return n.leaderUp
}

// localSessions returns the sessions that live on this node.
func (n *Node) localSessions() []*Session {
	n.mu.RLock()
	defer n.mu.RUnlock()
	local := make([]*Session, 0, len(n.sessions))
	for _, s := range n.sessions {
		local = append(local, s)
	}
	return local
}

// local returns the session with this ID if it lives on this node.
func (n *Node) local(id uint64) *Session {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.sessions[id]
}

// forget drops s from this node's sessions once the group is done with it.
func (n *Node) forget(s *Session) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sessions[s.id] == s {
		delete(n.sessions, s.id)
	}
}
