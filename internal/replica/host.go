package replica

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/dblog"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/logstore"
	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/datadir"
	"github.com/fencelock/fencelock/internal/replica/gate"
	"github.com/fencelock/fencelock/internal/replica/grouptable"
	"github.com/fencelock/fencelock/internal/replica/mirror"
	"github.com/fencelock/fencelock/internal/replica/serve"
	"github.com/fencelock/fencelock/internal/replica/shard"
	"github.com/fencelock/fencelock/internal/testhook"
	"github.com/fencelock/fencelock/transport"
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
	// Groups are the named groups beside the default one, validated by the
	// root: unique names, voters from Members.
	Groups []GroupConfig
	// OnApplied, if set (tests only: internal/testhook.ObserveApplied),
	// is called with every entry any group of the host applies.
	OnApplied func(testhook.Applied)
	// Reads, if set (tests only), is what this host announces it reads in
	// place of its build's (fsm.Reads): a host that announces
	// fsm.Baseline stands for a build from before the version gate.
	Reads fsm.Gate
	// Placement is which named groups this host runs (placement.go).
	Placement Placement
}

// GroupConfig is one named group (the root's GroupConfig documents it).
type GroupConfig struct {
	Name   string
	Voters []uint64
}

// Host is one process's replica of every group: one Dragonboat NodeHost,
// its transport, its Dir and its log store, with one shard per group. Its
// methods are safe for concurrent use.
type Host struct {
	cfg   Config
	log   *slog.Logger
	nh    *dragonboat.NodeHost
	peers *peers
	sinks func(group string) Sink
	calls transport.CallDialer // the transport's calls; nil without (placement.go)

	// mirrors are the groups this host reaches through a replica that runs
	// them (package mirror), by name; guarded by setMu, read without it.
	mirrors atomic.Pointer[map[string]*mirror.Mirror]
	// mirrorsRunning counts the mirrors started here whose stream loop
	// has not ended, in the map or not (tests: TestingMirrorsRunning).
	mirrorsRunning atomic.Int64
	// bg is the sessions' background work on named groups and mirrors
	// (Replica.Go): it outlives a group's shard or mirror that stops while
	// the group goes on elsewhere; Close waits for it.
	bgMu sync.Mutex
	bg   sync.WaitGroup

	// gset is the groups this host runs, replaced whole (under setMu)
	// when the group table starts or stops one, so that the listeners on
	// Dragonboat's goroutines read it without a lock.
	setMu  sync.Mutex
	gset   atomic.Pointer[groupSet]
	table  *grouptable.Table // the group table as last read, its watcher and its operations (package grouptable, through tableHost)
	starts startFailures     // the table's groups whose start failed here (table.go)

	releaseDir   func()                         // frees Dir for another Start in this process
	store        atomic.Pointer[logstore.Store] // the log store the NodeHost opened (TestingCrash)
	down         atomic.Bool                    // set by TestingCrash: the transport is cut off
	server       *serve.Server                  // answers other replicas' calls for the groups it runs (host_serve.go)
	streams      streamCount                    // message connections opened, by target (tests)
	tooNewWarned sync.Map                       // [peer, shard] -> when sendScreen last warned

	// nhMu orders the reads of the NodeHost's local view (nodeHostInfo)
	// before Close closes it: Dragonboat's Close and GetNodeHostInfo race.
	nhMu     sync.RWMutex
	nhClosed bool

	bal  balancer
	prog progress // the followers' logs as acknowledged, for the handover

	restored restoredFile // the groups a restore imported into Dir (backup.go)
	versions *gate.Record // the versions each group writes, kept in Dir (versions.go)

	wg sync.WaitGroup // the host's background work
	// tabWG is the group table's watcher, waited for apart: before the
	// NodeHost closes, as its reads must not be in flight then.
	tabWG     sync.WaitGroup
	closed    chan struct{}
	closeOnce sync.Once
}

// Start starts the host and a replica of every group on it, and returns
// once they run: each has recovered its state from Dir and joined its
// group's traffic. What a group applies goes to sinks(name) ("" is the
// default group), from the first entry replayed on. Every failure wraps
// ErrInvalidConfig: it is a matter of the Config, its Dir or its address.
func Start(cfg Config, sinks func(group string) Sink) (*Host, error) {
	releaseDir, err := datadir.Claim(cfg.Dir)
	if err != nil {
		return nil, err
	}
	before, err := datadir.Entries(cfg.Dir)
	if err != nil {
		releaseDir()
		return nil, fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
	}
	h, ran, err := start(cfg, sinks)
	if err != nil {
		if !ran {
			err = datadir.Undo(cfg.Dir, before, err)
		}
		releaseDir()
		return nil, err
	}
	h.releaseDir = releaseDir
	return h, nil
}

// start starts the host; ran reports, when it fails, whether a shard was
// started (and so may have taken part in its group: a vote, a log entry),
// which makes the Dir's contents the replica's raft state, not debris.
func start(cfg Config, sinks func(group string) Sink) (_ *Host, ran bool, _ error) {
	g, err := loadGroup(&cfg)
	if err != nil {
		return nil, false, err
	}
	named, retired, tableMode, err := loadNamed(cfg, g)
	if err != nil {
		return nil, false, err
	}
	dirs, err := datadir.LoadIDs(cfg.Dir, cfg.ReplicaID)
	if err != nil {
		return nil, false, err
	}
	restored, err := readRestored(cfg.Dir)
	if err != nil {
		return nil, false, fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err)
	}
	names := []string{""}
	for _, ng := range named {
		names = append(names, ng.Name)
	}
	versions, err := gate.Load(cfg.Dir, names)
	if err != nil {
		return nil, false, err
	}
	dblog.Use(cfg.Logger)
	h := &Host{
		cfg:    cfg,
		log:    cfg.Logger.With("replica", cfg.ReplicaID),
		sinks:  sinks,
		closed: make(chan struct{}),

		restored: restored,
		versions: versions,
	}
	h.table = grouptable.New(tableHost{h}, tableMode)
	h.starts.failed = make(map[uint64]time.Time)
	h.bal = newBalancer()
	h.server = newServer(h)
	def := newReplica(h, "", defaultShard, sinks(""))
	defMembers := g.Members
	if len(defMembers) == 0 {
		defMembers = cfg.Members
	}
	def.SetVoters(slices.Sorted(maps.Keys(defMembers)))
	// A restarted replica's group is the one in Dir: Members only matter
	// when a group bootstraps, and the membership changes only through
	// AddReplica and RemoveReplica. Dragonboat refuses a restart whose
	// members differ from the bootstrap's, so it is given those.
	bootstrap := cfg.Members
	if !cfg.Join && g.Group != "" && !maps.Equal(g.Members, cfg.Members) {
		h.log.Warn("fencelock: Members differ from the members this replica's group was bootstrapped with, kept in Dir; "+
			"the group's own membership is used, which only AddReplica and RemoveReplica change",
			"differences", peering.DiffMembers(cfg.Members, g.Members))
		bootstrap = g.Members
	}
	def.Bootstrap(bootstrap, cfg.Join)
	set := &groupSet{byName: map[string]*Replica{}, byShard: map[uint64]*Replica{}}
	set.add(def)
	for _, ng := range named {
		set.add(namedReplica(h, ng, sinks(ng.Name)))
	}
	// A group being removed runs until the removal check is done, with
	// nobody listening to what it applies.
	var leaving []*Replica
	for _, ng := range retired {
		r := namedReplica(h, ng, discard{})
		set.byShard[r.ShardID()] = r
		leaving = append(leaving, r)
	}
	set.sort()
	h.gset.Store(set)
	h.peers = newPeers(h, g, dirs)
	fail := func(err error) (*Host, bool, error) {
		for _, r := range h.gset.Load().byShard {
			r.Stop()
		}
		for _, r := range h.gset.Load().byShard {
			r.Wait()
		}
		return nil, ran, err
	}
	if versions.BeyondBaseline() {
		// A Dir upgraded by a build that kept the versions but did not
		// mark it against builds from before the gate.
		if err := h.peers.refuseOldBuilds(); err != nil {
			return fail(fmt.Errorf("%w: Dir: %v", ErrInvalidConfig, err))
		}
	}

	nhc, err := dirConfig(cfg)
	if err != nil {
		return fail(err)
	}
	nhc.RaftEventListener, nhc.SystemEventListener = leaderListener{h}, systemListener{h}
	nhc.MaxSendQueueSize, nhc.MaxReceiveQueueSize = maxQueue, maxQueue
	// The default log store, syncing only what a restart needs, telling the
	// host the store it opened (TestingCrash).
	nhc.Expert.LogDBFactory = logstore.Factory{Opened: h.store.Store}
	if b, ok := nhc.Expert.TransportFactory.(peering.Binder); ok {
		nhc.Expert.TransportFactory = b.Bind(h.peers)
		h.calls = callDialer(nhc.Expert.TransportFactory)
	}
	nhc.Expert.TransportFactory = gate.Screen{TransportFactory: nhc.Expert.TransportFactory, Host: screenHost{h}}
	nhc.Expert.TransportFactory = crashGate{nhc.Expert.TransportFactory, &h.down, &h.streams}
	nhc.Expert.TransportFactory = progressFactory{TransportFactory: nhc.Expert.TransportFactory, h: h}
	nh, err := dragonboat.NewNodeHost(nhc)
	if err != nil {
		return fail(startError(cfg, "", err))
	}
	h.nh = nh
	abort := func(err error) (*Host, bool, error) {
		h.closeNodeHost()
		return fail(err)
	}
	// From here on the replica may vote and acknowledge entries: its
	// peers learn its Dir ID, and refuse it should it come back without.
	if err := dirs.Keep(); err != nil {
		return abort(err)
	}
	for _, r := range append(slices.Clone(h.groups()), leaving...) {
		ran = true
		if err := r.Start(h.nh); err != nil {
			return abort(startError(cfg, r.Name(), err))
		}
	}
	if err := h.retire(leaving, named); err != nil {
		return abort(err)
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.run()
	}()
	h.tabWG.Add(1)
	go func() {
		defer h.tabWG.Done()
		h.table.Watch()
	}()
	h.log.Debug("fencelock replica started", "addr", cfg.Addr, "dir", cfg.Dir, "groups", len(h.groups()))
	return h, true, nil
}

// groupSet is the groups a host runs at one time; it is never changed once
// published, only replaced.
type groupSet struct {
	list    []*Replica // the default group first, then the named ones by name
	byName  map[string]*Replica
	byShard map[uint64]*Replica // list's, and a group's being retired at Start
}

func (s *groupSet) add(r *Replica) {
	s.list = append(s.list, r)
	s.byName[r.Name()] = r
	s.byShard[r.ShardID()] = r
}

// sort puts the named groups in name order, after the default group.
func (s *groupSet) sort() {
	slices.SortStableFunc(s.list[1:], func(a, b *Replica) int { return strings.Compare(a.Name(), b.Name()) })
}

// with returns a copy of s with r added, or, with add false, removed.
func (s *groupSet) with(r *Replica, add bool) *groupSet {
	out := &groupSet{byName: maps.Clone(s.byName), byShard: maps.Clone(s.byShard)}
	for _, x := range s.list {
		if x != r {
			out.list = append(out.list, x)
		}
	}
	if add {
		out.add(r)
		out.sort()
		return out
	}
	if out.byName[r.Name()] == r {
		delete(out.byName, r.Name())
	}
	if out.byShard[r.ShardID()] == r {
		delete(out.byShard, r.ShardID())
	}
	return out
}

// groups returns the replicas this host runs: the default group's first.
func (h *Host) groups() []*Replica { return h.gset.Load().list }

// byShard returns the replica of a shard this host runs, nil for another.
func (h *Host) byShard(shard uint64) *Replica { return h.gset.Load().byShard[shard] }

// startError says why Dragonboat refused to start a group's replica, in the
// library's words. Every such failure is a matter of configuration (or of
// the Dir and the address it names), so it wraps ErrInvalidConfig.
func startError(cfg Config, group string, err error) error {
	why := err.Error()
	switch {
	case errors.Is(err, dragonboat.ErrReplicaRemoved):
		return fmt.Errorf("%w: start replica %d%s: %w: start a new replica with a fresh ID and an empty Dir", ErrInvalidConfig, cfg.ReplicaID, inGroup(group), ErrIDRemoved)
	case errors.Is(err, dragonboat.ErrInvalidShardSettings):
		why = "Join does not match how this Dir's replica first started (a replica that joined restarts with Join, one that bootstrapped without it)"
		if group != "" {
			why = "the group's voters do not match how this Dir's replica of it first started"
		}
	case strings.Contains(why, "failed to lock data directory"): // Dragonboat's ErrLockDirectory, internal to it
		why = datadir.Locked(cfg.Dir)
	case strings.Contains(why, "not the owner of the data directory"): // Dragonboat's ErrNotOwner, internal to it
		why = changedAddress(cfg)
	case errors.Is(err, syscall.EADDRINUSE):
		why = fmt.Sprintf("the raft address %s is in use by another process", cmp.Or(cfg.ListenAddr, cfg.Addr))
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		why = fmt.Sprintf("the raft address %s is not an address of this host (set ListenAddr to bind another)", cmp.Or(cfg.ListenAddr, cfg.Addr))
	}
	return fmt.Errorf("%w: start replica %d%s: %s", ErrInvalidConfig, cfg.ReplicaID, inGroup(group), why)
}

// changedAddress says why a Dir refuses this start's raft address: the
// replica's address is fixed when its Dir is first used (Dragonboat keeps
// it in the Dir, and the group's members know the replica by it), and this
// start names another. The cure is in the words: the old address, or a new
// replica under a new ID.
func changedAddress(cfg Config) string {
	old, ok := recordedAddress(cfg.Dir)
	if !ok {
		old = "another address"
	}
	return fmt.Sprintf("this replica's Dir %s belongs to replica %d at raft address %s, and this start gives it %s: "+
		"a replica keeps the address its Dir was first used with, the one its group knows it by. "+
		"Start it with its old address (its entry in Members, or serve's --peers/--addr), or move it: "+
		"remove ID %d from the group and add the new host under a new ID with an empty Dir (docs/operations.md, \"Replacing a host\")",
		cfg.Dir, cfg.ReplicaID, old, cfg.Addr, cfg.ReplicaID)
}

func inGroup(group string) string { return shard.InGroup(group) }

// CheckHostPort refuses an address Dragonboat could not use, in our words
// rather than its own; callers wrap the error in their sentinel
// (shard.CheckHostPort).
func CheckHostPort(addr string) error { return shard.CheckHostPort(addr) }

func truncate(s string, n int) string { return shard.Truncate(s, n) }

// Group returns this host's shard of the named group ("" is the default
// group), or its mirror of it (placement.go) while it has one, or nil (a
// nil interface).
func (h *Host) Group(name string) Group {
	r := h.running(name)
	if r != nil && !waiting(r) {
		return r
	}
	if m := h.mirror(name); m != nil {
		return m // until the shard took over from it (mirror_swap.go)
	}
	if r == nil {
		return nil
	}
	return r
}

// Shard returns the replica of the named group whose shard this host runs
// ("" is the default group, which every host runs), or nil.
func (h *Host) Shard(name string) *Replica { return h.running(name) }

// running returns the replica of the named group whose shard this host
// runs, or nil.
func (h *Host) running(name string) *Replica { return h.gset.Load().byName[name] }

// Groups returns the names of the groups this host runs: "" (the default
// group) first, then the named groups in name order. A group the table
// creates or drops joins or leaves the list as this host starts or stops
// it.
func (h *Host) Groups() []string {
	rs := h.groups()
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Name()
	}
	return names
}

// Replicas returns the replicas this host runs, the default group's first,
// then the named groups' in name order.
func (h *Host) Replicas() []*Replica { return slices.Clone(h.groups()) }

// Close stops every group's replica and their background work, then the
// NodeHost. Calls in flight fail with ErrClosed. It is idempotent and
// returns nil.
func (h *Host) Close() error {
	h.closeOnce.Do(func() {
		close(h.closed)
		// The table's watcher ends first (its context ends with h.closed):
		// a read of its in flight while the NodeHost destroys the shard's
		// state machine is a data race inside Dragonboat (its Lookup reads
		// the flag that Close sets), which the race detector caught.
		h.tabWG.Wait()
		// No group starts or stops from here on: the table's watcher
		// takes setMu for every change and checks h.closed first.
		h.setMu.Lock()
		set := h.gset.Load()
		mirrors := h.mirrorList()
		h.setMu.Unlock()
		for _, m := range mirrors {
			m.Stop()
		}
		for _, r := range set.byShard {
			r.Stop()
		}
		h.closeNodeHost()
		h.wg.Wait()
		for _, r := range set.byShard {
			r.Wait()
		}
		for _, m := range mirrors {
			m.Wait()
		}
		h.bgMu.Lock()
		h.bgMu.Unlock() // no Go passes its check from here on: h.closed is closed
		h.bg.Wait()
		if h.releaseDir != nil {
			h.releaseDir()
		}
		h.log.Debug("fencelock replica closed")
	})
	return nil
}

// closing reports whether Close has begun (closed h.closed). Checked under
// setMu or bgMu, a false answer lets the caller change the groups or start
// background work: Close takes each lock after it closes h.closed, and
// waits for the caller to let it go.
func (h *Host) closing() bool {
	select {
	case <-h.closed:
	default:
		return false
	}
	return true
}

// closeNodeHost closes the NodeHost once no local view is being read.
func (h *Host) closeNodeHost() {
	h.nhMu.Lock()
	h.nhClosed = true
	h.nhMu.Unlock()
	h.nh.Close()
}

// nodeHostInfo is Dragonboat's local view of the membership, or nil once
// Close has begun.
func (h *Host) nodeHostInfo() *dragonboat.NodeHostInfo {
	h.nhMu.RLock()
	defer h.nhMu.RUnlock()
	if h.nhClosed {
		return nil
	}
	return h.nh.GetNodeHostInfo(dragonboat.NodeHostInfoOption{SkipLogInfo: true})
}

// dirConfig is the NodeHost configuration for cfg as far as Dragonboat
// records it in the Dir (address, DeploymentID, log store, its partitions
// and step workers) and the transport: Start adds its listeners, queues
// and the log store's hook to it, and Import uses it as is, since an
// import under any other is refused at the next start.
func dirConfig(cfg Config) (config.NodeHostConfig, error) {
	engine, logdb := engineConfigs(cfg.Dir)
	nhc := config.NodeHostConfig{
		NodeHostDir:    cfg.Dir,
		RTTMillisecond: uint64(cfg.RTT / time.Millisecond),
		RaftAddress:    cfg.Addr,
		ListenAddress:  cfg.ListenAddr,
		DeploymentID:   cfg.DeploymentID,
		Expert: config.ExpertConfig{
			// One step worker and one log partition for a new Dir: every
			// group's entries share one fsync (engine.go says why).
			Engine:       engine,
			LogDB:        logdb,
			LogDBFactory: logstore.Factory{},
		},
	}
	tr := cfg.Transport
	if tr == nil {
		tr = transport.TCP()
	}
	if err := tr.Configure(&nhc); err != nil {
		return config.NodeHostConfig{}, fmt.Errorf("%w: transport: %v", ErrInvalidConfig, err)
	}
	return nhc, nil
}
