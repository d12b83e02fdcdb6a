// Package replica runs one replica of a fencelock group on Dragonboat. The
// root package holds the API (sessions, locks, elections) and nothing of
// the machinery; this package is the machinery, and the only one besides
// fsm's adapter that imports Dragonboat.
//
// A map of the package:
//
//   - replica.go: Config, Start and Close: the NodeHost, its transport and
//     its listeners; Status, the replica's local view without I/O.
//   - propose.go: Propose and Read, retried through leader changes and
//     timeouts until the caller's context ends.
//   - apply.go: what the state machine applies, in order: the replica's own
//     bookkeeping (the leader's expiry timers, counters, the group's ID)
//     takes its part, then the Sink (the root) gets the events.
//   - identity.go: the group's identity kept in Dir, the handshake's side
//     of it (internal/peering), and the no-quorum warning.
//   - membership.go: membership changes and linearizable membership reads.
//   - ops.go: counters and the proposal latency histogram.
//
// Data flows one way: the root proposes commands and reads queries
// (root → replica → fsm), and what is applied flows back through one Sink.
// A replica is one Dragonboat shard in a NodeHost of its own; hosting
// several groups in one process would give each its shard ID and share the
// NodeHost, which nothing here rules out.
package replica

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
	"github.com/fencelock/fencelock/internal/logstore"
	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/proposer"
	"github.com/fencelock/fencelock/transport"
)

// shardID is the raft group's ID inside Dragonboat: a fencelock group is one
// Dragonboat shard.
const shardID = 1

// expireRetry is how often the leader proposes an expiry again while the
// session stays.
const expireRetry = 250 * time.Millisecond

// The bounds on what a replica holds in memory on behalf of others. Every
// input from the network or disk is bounded. Each limit is checked before a
// message is queued, so one message larger than the limit still passes when
// the queue is empty: the limits bound memory without ever blocking
// progress.
const (
	// maxQueue bounds, in bytes of entries, the messages queued to each peer
	// and those received and not yet handled (Dragonboat's defaults are
	// unlimited). Past it, messages are dropped and raft resends them.
	maxQueue = 128 << 20
	// maxInMemLog bounds the raft log entries a replica holds in memory
	// before applying them; past it proposals are refused as busy (and
	// retried), and the leader slows down for a lagging follower.
	maxInMemLog = 128 << 20
)

// Config is the root's Config, validated and with its defaults filled in:
// the root documents every field.
type Config struct {
	ReplicaID                           uint64
	Members                             map[uint64]string
	Join                                bool
	Addr, ListenAddr, Dir               string
	RTT, ProposalTimeout                time.Duration
	ElectionTicks, HeartbeatTicks       int
	SnapshotEntries, CompactionOverhead uint64
	DeploymentID                        uint64
	Transport                           transport.Transport
	Logger                              *slog.Logger
	Clock                               clock.Clock
}

// Replica is one running replica. Its methods are safe for concurrent use.
type Replica struct {
	cfg     Config
	log     *slog.Logger
	sink    Sink
	nh      *dragonboat.NodeHost
	prop    *proposer.Proposer
	tracker *expiry.Tracker
	peers   *peers // the group's identity, and the peers this replica reaches

	releaseDir func()                         // frees Dir for another Start in this process
	store      atomic.Pointer[logstore.Store] // the log store the NodeHost opened (TestingCrash)
	down       atomic.Bool                    // set by TestingCrash: the transport is cut off

	leader        atomic.Uint64 // leader ID as last reported by raft; 0 when unknown
	term          atomic.Uint64
	appliedIndex  atomic.Uint64
	groupID       atomic.Uint64 // the group's ID, once applied here (fsm.State.GroupID)
	restoredIndex atomic.Uint64 // the last snapshot the state was restored from
	ops           ops
	snaps         snapStats

	// leaderMu guards leaderUp, which is closed (and replaced) whenever a
	// leader becomes known, so that retries waiting for one go at once.
	leaderMu sync.Mutex
	leaderUp chan struct{}

	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup // background goroutines
	// nhMu orders the reads of the NodeHost's local view (nodeHostInfo)
	// before Close closes it: Dragonboat's Close and GetNodeHostInfo race.
	nhMu     sync.RWMutex
	nhClosed bool

	closed    chan struct{}
	closeOnce sync.Once
	ctx       context.Context // cancelled by Close: bounds background work
	cancel    context.CancelFunc
}

// Start starts the replica and returns once it runs: it has recovered its
// state from Dir and joined its group's traffic. What it applies goes to
// sink, from the first entry replayed on. Every failure wraps
// ErrInvalidConfig: it is a matter of the Config, its Dir or its address.
func Start(cfg Config, sink Sink) (*Replica, error) {
	releaseDir, err := claimDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	r, err := start(cfg, sink)
	if err != nil {
		releaseDir()
		return nil, err
	}
	r.releaseDir = releaseDir
	return r, nil
}

func start(cfg Config, sink Sink) (*Replica, error) {
	g, err := loadGroup(&cfg)
	if err != nil {
		return nil, err
	}
	dblog.Use(cfg.Logger)
	r := &Replica{
		cfg:      cfg,
		log:      cfg.Logger.With("replica", cfg.ReplicaID),
		sink:     sink,
		closed:   make(chan struct{}),
		leaderUp: make(chan struct{}),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.peers = newPeers(r, g)
	// A restarted replica's group is the one in Dir: Members only matter
	// when a group bootstraps, and the membership changes only through
	// AddReplica and RemoveReplica. Dragonboat refuses a restart whose
	// members differ from the bootstrap's, so it is given those.
	bootstrap := cfg.Members
	if !cfg.Join && g.Group != "" && !maps.Equal(g.Members, cfg.Members) {
		r.log.Warn("fencelock: Members differ from the members this replica's group was bootstrapped with, kept in Dir; "+
			"the group's own membership is used, which only AddReplica and RemoveReplica change",
			"differences", peering.DiffMembers(cfg.Members, g.Members))
		bootstrap = g.Members
	}
	r.tracker = expiry.New(cfg.Clock, expireRetry, cfg.ReplicaID, expiry.Actions{Start: r.proposeLeaderStart, Expire: r.proposeExpire,
		Undelay: r.proposeUndelay, ExpireGrant: r.proposeExpireGrant})
	// The proposer exists before the NodeHost, whose leader events it hears;
	// it proposes nothing until the first call, made after Start returns.
	r.prop = proposer.New(func(cmd []byte, timeout time.Duration) (*dragonboat.RequestState, error) {
		return r.nh.Propose(r.nh.GetNoOPSession(shardID), cmd, timeout)
	}, proposer.Config{Timeout: cfg.ProposalTimeout, MaxBatch: 256, InFlight: 16})
	fail := func(err error) (*Replica, error) {
		r.prop.Close()
		r.cancel()
		return nil, err
	}

	nhc := config.NodeHostConfig{
		NodeHostDir:         cfg.Dir,
		RTTMillisecond:      uint64(cfg.RTT / time.Millisecond),
		RaftAddress:         cfg.Addr,
		ListenAddress:       cfg.ListenAddr,
		DeploymentID:        cfg.DeploymentID,
		RaftEventListener:   leaderListener{r},
		SystemEventListener: systemListener{r},
		MaxSendQueueSize:    maxQueue,
		MaxReceiveQueueSize: maxQueue,
		Expert: config.ExpertConfig{
			LogDB: config.GetTinyMemLogDBConfig(),
			// The default log store, syncing only what a restart needs.
			LogDBFactory: logstore.Factory{Opened: r.store.Store},
		},
	}
	tr := cfg.Transport
	if tr == nil {
		tr = transport.TCP()
	}
	if err := tr.Configure(&nhc); err != nil {
		return fail(fmt.Errorf("%w: transport: %v", ErrInvalidConfig, err))
	}
	if b, ok := nhc.Expert.TransportFactory.(peering.Binder); ok {
		nhc.Expert.TransportFactory = b.Bind(r.peers)
	}
	nhc.Expert.TransportFactory = gate{nhc.Expert.TransportFactory, &r.down}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		return fail(startError(cfg, err))
	}
	r.nh = nh
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
	if err := nh.StartReplica(members, cfg.Join, fsm.NewStateMachine(observer{r}), rc); err != nil {
		nh.Close()
		return fail(startError(cfg, err))
	}
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		r.tracker.Run(r.closed)
	}()
	go func() {
		defer r.wg.Done()
		r.peers.monitor(r.closed)
	}()
	r.log.Debug("fencelock replica started", "addr", cfg.Addr, "dir", cfg.Dir)
	return r, nil
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

// CheckHostPort refuses an address Dragonboat could not use, in our words
// rather than its own; callers wrap the error in their sentinel.
func CheckHostPort(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	p, perr := strconv.Atoi(port)
	if err != nil || host == "" || perr != nil || p <= 0 || p > 65535 {
		return fmt.Errorf("address %q is not host:port with a port in 1-65535", truncate(addr, 64))
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Close stops the replica: its background work, then the NodeHost. Calls in
// flight fail with ErrClosed. It is idempotent.
func (r *Replica) Close() {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		r.closing = true
		r.mu.Unlock()
		close(r.closed)
		r.cancel()
		r.prop.Close()
		r.nhMu.Lock()
		r.nhClosed = true
		r.nhMu.Unlock()
		r.nh.Close()
		r.wg.Wait()
		if r.releaseDir != nil {
			r.releaseDir()
		}
		r.log.Debug("fencelock replica closed")
	})
}

// nodeHostInfo is Dragonboat's local view of the membership, or nil once
// Close has begun.
func (r *Replica) nodeHostInfo() *dragonboat.NodeHostInfo {
	r.nhMu.RLock()
	defer r.nhMu.RUnlock()
	if r.nhClosed {
		return nil
	}
	return r.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
}

// Done is closed when Close begins.
func (r *Replica) Done() <-chan struct{} { return r.closed }

// Status is the replica's local view (the root's Status documents it).
type Status struct {
	LeaderID, Term, AppliedIndex, GroupID uint64
	NonVoting, Removed                    bool
	LastSnapshotIndex, ConfigChangeIndex  uint64
	Voters                                map[uint64]string
}

// Status returns the replica's local view, without I/O.
func (r *Replica) Status() Status {
	st := Status{
		LeaderID:     r.leader.Load(),
		Term:         r.term.Load(),
		AppliedIndex: r.appliedIndex.Load(),
		GroupID:      r.groupID.Load(),
	}
	r.opsStatus(&st)
	return st
}

// Leader returns the leader's ID as last reported by raft; 0 when unknown.
func (r *Replica) Leader() uint64 { return r.leader.Load() }

// GroupID returns the group's ID once this replica applied it; 0 before.
func (r *Replica) GroupID() uint64 { return r.groupID.Load() }

// RestoredIndex returns the index of the last snapshot the state was
// restored from (at restart or catching up); 0 if none.
func (r *Replica) RestoredIndex() uint64 { return r.restoredIndex.Load() }

// Group returns the group's bootstrap identity (a digest of its DeploymentID
// and bootstrap Members, kept in Dir); empty on a joining replica until a
// peer told it.
func (r *Replica) Group() string { return r.peers.group() }

// Go runs f in the background unless the replica is closing; Close waits
// for it. The root's background work (keep-alives, withdrawals) runs here
// too, so that one Close waits for everything.
func (r *Replica) Go(f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return false
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		f()
	}()
	return true
}

// leaderListener receives Dragonboat's leader updates; it runs on a
// Dragonboat goroutine and must not block.
type leaderListener struct{ r *Replica }

func (l leaderListener) LeaderUpdated(info raftio.LeaderInfo) {
	r := l.r
	if info.ShardID != shardID {
		return
	}
	old := r.leader.Swap(info.LeaderID)
	r.term.Store(info.Term)
	r.tracker.SetLeader(info.LeaderID == r.cfg.ReplicaID, info.Term)
	if old != info.LeaderID {
		r.prop.LeaderChanged()
		r.leaderChanged(old, info)
		if info.LeaderID != 0 {
			r.leaderMu.Lock()
			close(r.leaderUp)
			r.leaderUp = make(chan struct{})
			r.leaderMu.Unlock()
		}
	}
}

// leaderKnown returns a channel closed when a leader next becomes known.
func (r *Replica) leaderKnown() <-chan struct{} {
	r.leaderMu.Lock()
	defer r.leaderMu.Unlock()
	return r.leaderUp
}
