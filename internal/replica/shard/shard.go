// Package shard is the first maker of a group's role, beside the mirror
// (internal/replica/mirror): a replica of a group that runs here as one
// Dragonboat shard on the host's NodeHost, voting in the group or
// following it as a non-voting member. A Shard is a Group of its own, which
// the session machinery uses as it uses a mirror (Propose, Read,
// StaleRead, its Sink); what both makers share is a groupcore.Core each
// embeds.
//
// A map of the package:
//
//   - shard.go: Shard, Config, New, Start and Stop; Status, the local view
//     without I/O; the leader updates the host hands it (LeaderUpdated).
//   - propose.go: Propose and Read, retried through leader changes and
//     timeouts until the caller's context ends, and retried once on the
//     group's maker of the moment if the shard was replaced meanwhile
//     (Host.Replaced); the no-quorum check; StaleRead and LocalRead.
//   - calls.go: the fence that lets a shard stop only once no read of its
//     state machine is in flight, and why a call is refused (Serving).
//   - apply.go: what the state machine applies, in order: the shard's own
//     bookkeeping (the leader's expiry timers, counters, the group's ID)
//     takes its part, then the Sink gets the events.
//   - ops.go: counters, the proposal latency histogram, and the shard's
//     end when the group removed this replica (RemovedFromGroup).
//   - quorum.go: the monitor of the group's voters and the no-quorum view
//     a call's error and the log name.
//   - membership.go: membership changes and linearizable membership reads;
//     addr.go the addresses a member may have (CheckHostPort).
//   - transfer.go: leadership transfers (TransferLeadership, Transfer).
//   - versions.go: the version gate as a shard takes part in it: the
//     leader's raise of the versions its group writes, the refusal of a
//     command the group cannot write yet, and the stop on an entry this
//     build cannot read. The host's side is internal/replica's versions.go,
//     and the parts that need no shard are package gate's.
//   - oldcopy.go: the stop of a replica whose Dir is an older copy of
//     itself (Refuse), which the host's screen detects.
//   - export.go, locallocks.go: a snapshot exported for a backup, and the
//     locks held in the local copy (the removal check).
//   - errors.go: the shard's errors in the library's words.
//   - host.go: Host, all a shard asks of its host, and Group, what a
//     replaced shard's calls are made again on.
//   - testing.go: hooks for tests only.
//
// It reaches its host only through Host (internal/replica's shardHost
// answers it), and the host reaches it only through its exported methods.
// It imports groupcore (the Core it shares with a mirror), gate (the
// version gate's names), serve (the mirrors it feeds: Subscribers), wire
// (the membership it reads), Dragonboat, and internal/fsm, proposer,
// expiry, clock, testhook and lockapi; nothing of internal/replica.
package shard

import (
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/expiry"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/proposer"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/internal/replica/serve"
	"github.com/fencelock/fencelock/internal/testhook"
)

// DefaultShard is the default group's shard ID inside Dragonboat: a
// fencelock group is one Dragonboat shard, and the default group was the
// only one before named groups existed.
const DefaultShard = 1

// expireRetry is how often the leader proposes an expiry again while the
// session stays.
const expireRetry = 250 * time.Millisecond

// maxInMemLog bounds the raft log entries a replica holds in memory before
// applying them; past it proposals are refused as busy (and retried), and
// the leader slows down for a lagging follower. Like every bound on what a
// replica holds on behalf of others (the host's maxQueue), it is checked
// before an entry is queued, so one entry larger than the limit still
// passes when the queue is empty: it bounds memory without ever blocking
// progress.
const maxInMemLog = 128 << 20

// Shard is one running replica of one group: one Dragonboat shard on its
// Host. Its methods are safe for concurrent use.
type Shard struct {
	groupcore.Core // what a shard shares with a mirror (New)

	cfg     Config
	host    Host
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
	// Stop waits for before the shard may stop (calls.go).
	calls callFence
}

// Config is what a shard takes of its host's configuration (the root's
// Config documents each field).
type Config struct {
	ReplicaID                           uint64
	RTT, ProposalTimeout                time.Duration
	ElectionTicks, HeartbeatTicks       int
	SnapshotEntries, CompactionOverhead uint64
	Logger                              *slog.Logger
	Clock                               clock.Clock
	// OnApplied, if set (tests only: internal/testhook.ObserveApplied),
	// is called with every entry the shard applies.
	OnApplied func(testhook.Applied)
}

// New prepares the replica of group name on Dragonboat shard shard, whose
// Sink is sink; the Host starts it (Start).
func New(h Host, cfg Config, name string, shard uint64, sink groupcore.Sink) *Shard {
	r := &Shard{host: h, leaderUp: make(chan struct{}), gateNudge: make(chan struct{}, 1)}
	r.cfg = cfg
	r.Core.Init(cfg.Logger, cfg.ReplicaID, time.Duration(cfg.ElectionTicks)*cfg.RTT, name, shard, sink)
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
func (r *Shard) shardConfig() config.Config {
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

// Bootstrap sets the members map the shard starts with (nil for a replica
// that joins), and whether it joins; the host calls it before Start.
func (r *Shard) Bootstrap(members map[uint64]string, join bool) {
	r.bootstrap, r.join = members, join
}

// Bootstrapped is the members map the shard starts with, nil for one that
// joins.
func (r *Shard) Bootstrapped() map[uint64]string { return r.bootstrap }

// SetIdentity sets a named group's identity (its digest and the voters it
// was bootstrapped with), for the handshake; the host calls it before
// Start.
func (r *Shard) SetIdentity(ident string, voters []uint64) { r.ident, r.identVoters = ident, voters }

// Identity is a named group's identity as SetIdentity set it.
func (r *Shard) Identity() (ident string, voters []uint64) { return r.ident, r.identVoters }

// Start starts the group's shard on the host's NodeHost nh, and the
// replica's background work.
func (r *Shard) Start(nh *dragonboat.NodeHost) error {
	r.nh = nh
	members := make(map[uint64]dragonboat.Target, len(r.bootstrap))
	for id, addr := range r.host.RestoredMembers(r.Name(), r.bootstrap) {
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
	r.Spawn(func() { r.monitor(r.Done()) })
	return nil
}

// Stop ends the replica's own work before its shard stops or the NodeHost
// closes: calls in flight fail with ErrClosed (or why the group stopped
// here), and when Stop returns none is inside Dragonboat any more.
func (r *Shard) Stop() {
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
func (r *Shard) Close() { r.host.Close() }

// nodeHostInfo is Dragonboat's local view of the membership, or nil once
// Close has begun.
func (r *Shard) nodeHostInfo() *dragonboat.NodeHostInfo { return r.host.NodeHostInfo() }

// Status returns the replica's local view, without I/O.
func (r *Shard) Status() groupcore.Status {
	st := groupcore.Status{
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
		if id != r.cfg.ReplicaID && !r.host.Reached(id, r.reachWindow()) {
			st.Unreached = append(st.Unreached, id)
		}
	}
	return st
}

// RestoredIndex returns the index of the last snapshot the state was
// restored from (at restart or catching up); 0 if none.
func (r *Shard) RestoredIndex() uint64 { return r.restoredIndex.Load() }

// Group returns the default group's bootstrap identity (a digest of its
// DeploymentID and bootstrap Members, kept in Dir); empty on a joining
// replica until a peer told it. A named group's identity is its name and
// voters (see internal/replica's groups.go).
func (r *Shard) Group() string { return r.host.DefaultIdentity() }

// Go runs f in the background unless the replica is closing; Close waits
// for it. The root's background work (keep-alives, withdrawals) runs here
// too, so that one Close waits for everything.
func (r *Shard) Go(f func()) bool {
	if r.Name() != "" {
		// A named group's shard may stop while the group goes on here
		// through a mirror, or the other way round: the sessions' work on
		// it is the host's.
		return r.host.GoBackground(f)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closing {
		return false
	}
	r.Spawn(f)
	return true
}

// LeaderUpdated takes in Dragonboat's leader update for this shard (the
// host's listener hears it for every shard, on a Dragonboat goroutine: it
// must not block), and reports whether the known leader changed.
func (r *Shard) LeaderUpdated(info raftio.LeaderInfo) bool {
	old := r.LeaderID.Swap(info.LeaderID)
	if info.LeaderID != 0 {
		r.leaderlessSince.Store(0)
	} else {
		r.leaderlessSince.CompareAndSwap(0, time.Now().UnixNano())
	}
	r.term.Store(info.Term)
	r.tracker.SetLeader(info.LeaderID == r.cfg.ReplicaID, info.Term)
	if old == info.LeaderID {
		return false
	}
	r.prop.LeaderChanged()
	r.leaderChanged(old, info)
	if info.LeaderID != 0 {
		r.leaderMu.Lock()
		close(r.leaderUp)
		r.leaderUp = make(chan struct{})
		r.leaderMu.Unlock()
	}
	return true
}

// LeaderlessSince is when the group was last seen to lose its leader (or
// the shard started), in unix nanoseconds; 0 while a leader is known.
func (r *Shard) LeaderlessSince() int64 { return r.leaderlessSince.Load() }

// Subscribers are the mirrors this replica feeds (package serve).
func (r *Shard) Subscribers() *serve.Subscribers { return &r.subs }

// leaderKnown returns a channel closed when a leader next becomes known.
func (r *Shard) leaderKnown() <-chan struct{} {
	r.leaderMu.Lock()
	defer r.leaderMu.Unlock()
	return r.leaderUp
}
