// Package replica runs one replica of a fencelock group on Dragonboat. The
// root package holds the API (sessions, locks, elections) and nothing of
// the machinery; this package is the machinery, and the only one besides
// fsm's adapter that imports Dragonboat.
//
// A map of the package:
//
//   - group.go: Group, a group as this host reaches it, and what
//     Host.Group and Host.Lookup return. Its two makers are the shard
//     (Replica: replica.go, shard_propose.go) and the mirror (package
//     mirror); each does the job its own way, and neither branches on the
//     other nor holds the other; what they share (name, voters, Sink,
//     applied index, group ID, gate, counters, lifecycle) is a
//     groupcore.Core each embeds (initCore). The session layer
//     (internal/session) reaches groups through its own interface of the
//     same role, which both satisfy.
//   - host.go: Config, Start and Close: one Dragonboat NodeHost per process,
//     its transport, its Dir and its listeners, and one Replica (one shard)
//     per group on it: the default group and each Config.Groups entry.
//   - replica.go: one group's shard: its proposer, expiry timers and
//     Status, the local view without I/O.
//   - groups.go: named groups: their shard IDs, their identity kept in Dir,
//     the non-voting replicas every host runs of the groups it does not
//     vote in, and the removal check.
//   - balance.go: TransferLeadership, and the balancer that spreads the
//     groups' leaders over the hosts by rate-limited transfers.
//   - shard_propose.go: the shard's Propose and Read, retried through
//     leader changes and timeouts until the caller's context ends, and the
//     one retry of a call whose Group was replaced meanwhile
//     (Host.replaced), which shard and mirror share.
//   - calls.go: the fence that lets a shard stop only once no read of its
//     state machine is in flight.
//   - apply.go: what the state machine applies, in order: the replica's own
//     bookkeeping (the leader's expiry timers, counters, the group's ID)
//     takes its part, then the Sink (the root) gets the events.
//   - identity.go: the default group's identity kept in Dir, the host's
//     side of the handshake (internal/peering) for every group it runs,
//     and the no-quorum warning.
//   - versions.go: the version gate as a shard takes part in it: what
//     each peer reads, the leader's raise of the versions its group
//     writes, the refusal of a command the group cannot write yet and of
//     a peer that cannot read what it writes; the host's answers to the
//     gate's screen (screenHost). The parts that need no shard are
//     package gate's (below).
//   - membership.go: membership changes and linearizable membership reads.
//   - placement.go: Placement, which named groups a host runs a shard of,
//     and what its peers announced of theirs.
//   - host_mirrors.go: the host's side of its mirrors (package mirror,
//     below): making, finding and retiring them, and its answers to the
//     calls a mirror makes of its host (mirror.Host, through mirrorHost).
//   - host_serve.go: the host's answers to the serving side (package
//     serve, below): finding a shard of a named group (serve.Host, through
//     servedHost), what a call needs of it (serve.Group, through
//     servedShard: its state with a subscriber registered at once,
//     propose, read, membership, export), and what an error means to the
//     caller (wireCode). mirror_members.go: a mirror's membership read at
//     a voter, the caller's side.
//   - mirror_swap.go: a mirror and a shard of one group taking over from
//     each other as the group table moves the group's voters.
//   - backup.go: a group's exported copy and a restore's import;
//     exportgroup.go every group's copy for a backup, from a voter over a
//     call connection for a group this host does not run (the voter's
//     side is package serve's).
//   - ops.go: counters and the proposal latency histogram.
//
// Rooms of their own, below this package (none imports it):
//
//   - wire (internal/replica/wire): the bytes of a call connection between
//     two replicas: a mirror's subscription, a backup's export, a
//     membership read. Pure encode and decode, fixed by golden bytes; the
//     mirror and the serving side both import it.
//   - mirror (internal/replica/mirror): the mirror, Group's second maker:
//     a group this host does not run, reached through a replica that does
//     (its proposals, reads, events). It asks its host only what
//     mirror.Host names, and the host reaches it through its methods.
//   - serve (internal/replica/serve): what a voter does for a replica
//     that does not run a group, over the transport's call connections:
//     feed a mirror (its state, then every entry applied, and its
//     proposals and reads), export the group's copy for a backup, read
//     its membership; each call bounded and refused with a code the
//     caller acts on. It reaches the host only through serve.Host and
//     serve.Group; the shard's apply observer publishes to its
//     Subscribers.
//   - gate (internal/replica/gate): the version gate's parts that need no
//     shard: what a peer's Hello says it reads, the versions each group
//     was seen to write kept in Dir (a build that cannot read them
//     refuses to start), and the screen on the host's Dragonboat
//     transport that sends no peer what it cannot read, which asks the
//     host only what gate.Host names.
//   - groupcore (internal/replica/groupcore): what the two makers of Group
//     share, a Core each embeds, and the role's vocabulary (Sink, Status,
//     Counters), which this package names under the same names.
//   - datadir (internal/replica/datadir): the Dir as fencelock keeps it
//     beside Dragonboat's files: bounded reads and crash-safe writes of its
//     small files, one replica per Dir in a process, the undoing of a
//     failed start, and the Dir ID a peer's handshake checks. host.go,
//     identity.go and the files of the group table, the version gate and
//     the backup keep their own files through it.
//
// Data flows one way: the root proposes commands and reads queries
// (root → session → a Group here → fsm), and what is applied flows back
// through one Sink per group. A Replica is one Dragonboat shard; every
// group of a process shares the Host's NodeHost, so its transport, log
// store and disk writes.
package replica

import (
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"

	"github.com/fencelock/fencelock/internal/expiry"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/proposer"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/internal/replica/serve"
)

// defaultShard is the default group's shard ID inside Dragonboat: a
// fencelock group is one Dragonboat shard, and the default group was the
// only one before named groups existed.
const defaultShard = 1

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

// Replica is one running replica of one group: one Dragonboat shard on its
// Host. Its methods are safe for concurrent use.
type Replica struct {
	groupcore.Core // what a shard shares with a mirror (initCore)

	cfg     Config
	host    *Host
	nh      *dragonboat.NodeHost
	prop    *proposer.Proposer
	tracker *expiry.Tracker

	// bootstrap is the members map the shard starts with, nil for a
	// non-voting host, which joins.
	bootstrap map[uint64]string
	join      bool
	// ident and identVoters are a named group's identity (namedDigest)
	// and the voters it was bootstrapped with, for the handshake.
	ident       string
	identVoters []uint64

	term          atomic.Uint64
	restoredIndex atomic.Uint64 // the last snapshot the state was restored from
	// leaderlessSince is when the group was last seen to lose its leader
	// (or the shard started), in unix nanoseconds; 0 while a leader is
	// known. voterAddrs are the group's voters as last applied here
	// (refreshed by the monitor). Both feed the no-quorum error.
	leaderlessSince atomic.Int64
	voterAddrs      atomic.Pointer[map[uint64]string]
	// refused is set once this replica found its log lost entries it had
	// acknowledged (oldcopy.go): calls fail with it.
	refused atomic.Pointer[error]
	// gateNudge wakes the leader's loop that raises the gate, and
	// gateView is the membership a gated call names (versions.go).
	gateNudge chan struct{}
	gateView  atomic.Pointer[gateView]
	// preferGaveUp is when an open last waited for the gate in vain
	// (preferGate), in Unix nanoseconds; 0: never.
	preferGaveUp atomic.Int64
	snaps        snapStats
	// held holds a new shard's events back while the group's mirror
	// feeds its Sink (mirror_swap.go); nil otherwise.
	held *holdSink
	// subs are the mirrors this replica feeds (package serve).
	subs serve.Subscribers
	// lostReplies is set only by tests (TestingLoseReplies): kinds whose
	// next committed proposals Propose reports as lost to a leader change.
	lostReplies atomic.Pointer[lostReplies]
	// holdRaise is set only by tests (TestingHoldGateRaise).
	holdRaise atomic.Pointer[func()]

	// leaderMu guards leaderUp, which is closed (and replaced) whenever a
	// leader becomes known, so that retries waiting for one go at once.
	leaderMu sync.Mutex
	leaderUp chan struct{}

	mu      sync.Mutex
	closing bool
	// calls are the reads of the shard's state machine in flight, which
	// stop waits for before the shard may stop (calls.go).
	calls callFence
}

// newReplica prepares the replica of one group; the Host starts its shard.
func newReplica(h *Host, name string, shard uint64, sink Sink) *Replica {
	cfg := h.cfg
	r := &Replica{host: h, leaderUp: make(chan struct{}), gateNudge: make(chan struct{}, 1)}
	r.cfg = cfg
	initCore(&r.Core, cfg, name, shard, sink)
	r.tracker = expiry.New(cfg.Clock, expireRetry, cfg.ReplicaID, expiry.Actions{Start: r.proposeLeaderStart, Expire: r.proposeExpire,
		Undelay: r.proposeUndelay, ExpireGrant: r.proposeExpireGrant})
	// The proposer exists before the NodeHost, whose leader events it hears;
	// it proposes nothing until the first call, made after Start returns.
	r.prop = proposer.New(func(cmd []byte, timeout time.Duration) (*dragonboat.RequestState, error) {
		return r.nh.Propose(r.nh.GetNoOPSession(r.ShardID()), cmd, timeout)
	}, proposer.Config{Timeout: cfg.ProposalTimeout, MaxBatch: 256, InFlight: 16, Gate: r.Gate})
	return r
}

// shardConfig is the group's Dragonboat configuration.
func (r *Replica) shardConfig() config.Config {
	return config.Config{
		ShardID:             r.ShardID(),
		ReplicaID:           r.cfg.ReplicaID,
		ElectionRTT:         uint64(r.cfg.ElectionTicks),
		HeartbeatRTT:        uint64(r.cfg.HeartbeatTicks),
		CheckQuorum:         true,
		PreVote:             true,
		SnapshotEntries:     r.cfg.SnapshotEntries,
		CompactionOverhead:  r.cfg.CompactionOverhead,
		OrderedConfigChange: true,
		WaitReady:           true,
		// A joining replica always starts non-voting: AddReplica adds a new
		// voter as non-voting first and then promotes it, which the replica
		// follows from its log or snapshot; a host that does not vote in a
		// named group joins it non-voting for good. Starting a replica that
		// the log makes non-voting as a voter would stop Dragonboat with a
		// panic.
		IsNonVoting:     r.join,
		MaxInMemLogSize: maxInMemLog,
	}
}

// startShard starts the group's shard on the host's NodeHost, and the
// replica's background work.
func (r *Replica) startShard() error {
	r.nh = r.host.nh
	members := make(map[uint64]dragonboat.Target, len(r.bootstrap))
	for id, addr := range restoredMembers(r.host.restored, r.Name(), r.bootstrap) {
		members[id] = addr
	}
	r.leaderlessSince.Store(time.Now().UnixNano())
	if len(r.bootstrap) > 0 {
		voters := maps.Clone(r.bootstrap)
		r.voterAddrs.Store(&voters)
	}
	if err := r.nh.StartReplica(members, r.join, fsm.NewStateMachine(observer{r}), r.shardConfig()); err != nil {
		return err
	}
	r.Spawn(func() { r.tracker.Run(r.Done()) })
	r.Spawn(func() { r.runGate(r.Done()) })
	r.Spawn(func() { r.host.peers.monitor(r, r.Done()) })
	return nil
}

// stop ends the replica's own work before its shard stops or the NodeHost
// closes: calls in flight fail with ErrClosed (or why the group stopped
// here), and when stop returns none is inside Dragonboat any more.
func (r *Replica) stop() {
	// Ending the Core's Context ends the reads in flight (Read).
	r.End(func() {
		r.mu.Lock()
		r.closing = true
		r.mu.Unlock()
	}, func() {
		r.prop.Close()
		r.calls.close()
		r.subs.End(errors.New("the replica stopped"))
	})
}

// Close closes the Host the replica runs on, and so every group of the
// process: a group's shard shares the NodeHost with the others. It is
// idempotent.
func (r *Replica) Close() { r.host.Close() }

// nodeHostInfo is Dragonboat's local view of the membership, or nil once
// Close has begun.
func (r *Replica) nodeHostInfo() *dragonboat.NodeHostInfo { return r.host.nodeHostInfo() }

// Status is a group's local view (the root's Status documents it), and
// Counters, Histogram and Bucket what it counted (package groupcore).
type (
	Status    = groupcore.Status
	Counters  = groupcore.Counters
	Histogram = groupcore.Histogram
	Bucket    = groupcore.Bucket
)

// Status returns the replica's local view, without I/O.
func (r *Replica) Status() Status {
	st := Status{
		LeaderID:     r.LeaderID.Load(),
		Term:         r.term.Load(),
		AppliedIndex: r.AppliedIndex.Load(),
		GroupID:      r.GroupID(),
		Gate:         r.Gate(),
	}
	r.opsStatus(&st)
	// Every running voter talks to a leader (its answers) and, while there
	// is none, to every other voter (its votes); a follower hears from the
	// leader only, so it cannot tell.
	if st.LeaderID != 0 && st.LeaderID != r.cfg.ReplicaID {
		return st
	}
	for _, id := range slices.Sorted(maps.Keys(st.Voters)) {
		if id != r.cfg.ReplicaID && !r.host.peers.reached(id, r.reachWindow()) {
			st.Unreached = append(st.Unreached, id)
		}
	}
	return st
}

// RestoredIndex returns the index of the last snapshot the state was
// restored from (at restart or catching up); 0 if none.
func (r *Replica) RestoredIndex() uint64 { return r.restoredIndex.Load() }

// Group returns the default group's bootstrap identity (a digest of its
// DeploymentID and bootstrap Members, kept in Dir); empty on a joining
// replica until a peer told it. A named group's identity is its name and
// voters (see groups.go).
func (r *Replica) Group() string { return r.host.peers.group() }

// Go runs f in the background unless the replica is closing; Close waits
// for it. The root's background work (keep-alives, withdrawals) runs here
// too, so that one Close waits for everything.
func (r *Replica) Go(f func()) bool {
	if r.Name() != "" {
		// A named group's shard may stop while the group goes on here
		// through a mirror, or the other way round: the sessions' work on
		// it is the host's.
		return r.host.goBackground(f)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return false
	}
	r.Spawn(f)
	return true
}

// leaderListener receives Dragonboat's leader updates for every shard of
// the host; it runs on a Dragonboat goroutine and must not block.
type leaderListener struct{ h *Host }

func (l leaderListener) LeaderUpdated(info raftio.LeaderInfo) {
	r := l.h.byShard(info.ShardID)
	if r == nil {
		return
	}
	old := r.LeaderID.Swap(info.LeaderID)
	if info.LeaderID != 0 {
		r.leaderlessSince.Store(0)
	} else {
		r.leaderlessSince.CompareAndSwap(0, time.Now().UnixNano())
	}
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
		l.h.leadersChanged()
	}
}

// leaderKnown returns a channel closed when a leader next becomes known.
func (r *Replica) leaderKnown() <-chan struct{} {
	r.leaderMu.Lock()
	defer r.leaderMu.Unlock()
	return r.leaderUp
}
