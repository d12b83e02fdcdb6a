package checker

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// Scenario is one run: a cluster, clients working on a few locks, and a
// nemesis applying Faults in order (or, with Soak, drawn at random until
// Soak has passed).
type Scenario struct {
	Name     string
	Replicas int     // 3 or 5
	Clients  int     // default 6
	Faults   []Fault // applied in order, with Quiet between them
	Soak     time.Duration
	Seed     uint64
	// Placement is every replica's (fencelock.Config.Placement): with
	// PlaceOwnGroups the clients at replicas that do not vote in a group
	// reach it through a replica that runs it.
	Placement fencelock.Placement
	// Rates are the replicas' clock rates against the real clock, by
	// replica ID (1 where none is given): a replica's leader timers and its
	// sessions' deadlines run on its clock, as on a host whose clock is
	// fast or slow (SkewedHolderIsolated).
	Rates map[uint64]float64
	// TTL is the clients' session TTL; 0 is ttl (1.5s).
	TTL time.Duration
}

// Report is the outcome of a scenario.
type Report struct {
	Name       string
	Ops        int // client operations recorded
	Grants     int // acquires and campaigns that returned a grant
	Terms      int // campaigns that returned a grant
	Observed   int // values delivered to observers
	Faults     int // faults applied
	Refused    int // late writes the Fencer refused
	Resumed    int // sessions restarted clients resumed
	Revoked    int // operator revocations and session ends that took effect
	Recipes    RecipeCounts
	Crashes    int            // replicas crashed (Cluster.Crash)
	Lost       uint64         // deferred commit indexes those crashes lost
	ByGroup    map[string]int // grants by group ("" the default)
	Mirrors    int            // groups reached through mirrors (Placement), over the replicas, at the end
	Notes      []string       // what the faults saw, for the test log
	Violations []string
	// TimedOut are the linearizability checks that ran out of time: they
	// proved nothing either way.
	TimedOut []string
	// Unknown counts the calls that ended in an error, and Open those of
	// them whose outcome the group's applied log could not tell (an
	// operator's revocation): they stay open in the history. (A resume's
	// Kept of unknown outcome is in Unknown, not Open: it changes nothing.)
	Unknown, Open int
	// Dumps are the files written for the reader of a violation or a
	// timed-out check (dump.go).
	Dumps    []string
	Duration time.Duration

	// For the published report (report.go): the seed and start of the
	// run, its faults and partition windows, its operations by kind and
	// second, and each check with its result.
	Seed     uint64
	Started  time.Time
	Timeline []Span
	Cuts     []Span
	Latency  []KindStats
	Buckets  []Bucket
	Width    time.Duration // each Bucket's
	Checks   []CheckResult
}

// Line is the scenario's one-line summary.
func (r Report) Line() string {
	return fmt.Sprintf("scenario=%s ops=%d faults=%d violations=%d timeouts=%d unknown=%d open=%d duration=%.1fs",
		r.Name, r.Ops, r.Faults, len(r.Violations), len(r.TimedOut), r.Unknown, r.Open, r.Duration.Seconds())
}

const (
	ttl       = 1500 * time.Millisecond // clients' session TTL
	opTimeout = 2 * time.Second         // one client call
	quiet     = 1 * time.Second         // normal operation before and between faults
)

// lockNames are the locks the clients contend for; two more slow clients
// contend for slowLock, each holding it for two TTLs; electionClients more
// campaign in electionNames (elect.go); and the recipe clients share
// recipeNames (recipe.go).
// Two of them live in the named groups beside the default one (groupsFor),
// so that every group has clients contending in it.
var lockNames = []string{"register/a", "register/b", "register/a@a", "register/b@b"}

const slowLock, slowClients = "register/slow", 2

// Run runs sc with its replicas' data in dir.
func Run(ctx context.Context, sc Scenario, dir string) (Report, error) {
	began := time.Now()
	if sc.Clients == 0 {
		sc.Clients = 6
	}
	sc.TTL = cmp.Or(sc.TTL, ttl)
	h := newHistory()
	applied := newAppliedLog(h.now)
	c, err := newCluster(sc.Replicas, dir, sc.Seed, sc.Rates, func(cfg *fencelock.Config) {
		cfg.SessionTTL = sc.TTL
		cfg.ProposalTimeout = 500 * time.Millisecond
		cfg.SnapshotEntries, cfg.CompactionOverhead = snapshotEntries, compactionOverhead
		cfg.Placement = sc.Placement
		testhook.ObserveApplied(cfg, applied.record)
	})
	if err != nil {
		return Report{}, err
	}
	defer c.StopAll()
	e := &env{c: c, h: h, applied: applied, dumps: &dumps{scenario: sc.Name, log: applied}, fencer: fencelock.NewFencer(), locks: append(lockNames, slowLock), recipes: recipeNames,
		elections: electionNames, ttl: sc.TTL,
		opTimeout: opTimeout, rng: rand.New(rand.NewPCG(sc.Seed, 1)),
		beliefs: beliefs{m: map[string]map[int]*belief{}}, sessions: map[uint64]*fencelock.Session{}, placement: sc.Placement}
	if _, err := leader(ctx, e); err != nil {
		return Report{}, err
	}

	// Observers follow the elections from the start until the final check,
	// after the clients have stopped.
	octx, stopObservers := context.WithCancel(ctx)
	var owg sync.WaitGroup
	defer owg.Wait()
	defer stopObservers()
	for i := range observers {
		o := newObserver(i, e, electionNames[i%len(electionNames)], c.IDs()[(i+1)%sc.Replicas])
		e.observers = append(e.observers, o)
		owg.Add(1)
		go func() {
			defer owg.Done()
			o.run(octx)
		}()
	}

	cctx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	roles := recipeRoles()
	for i := range sc.Clients + slowClients + electionClients + len(roles) {
		cl := &client{id: i, e: e, rng: rand.New(rand.NewPCG(sc.Seed, uint64(i)+2)),
			home: c.IDs()[i%sc.Replicas], slow: i >= sc.Clients && i < sc.Clients+slowClients, delay: i == sc.Clients+1,
			external: i < sc.Clients && i%3 == 2,
			elect:    i >= sc.Clients+slowClients && i < sc.Clients+slowClients+electionClients}
		if r := i - (sc.Clients + slowClients + electionClients); r >= 0 {
			cl.role = roles[r]
		}
		e.clients = append(e.clients, cl)
	}
	for _, cl := range e.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl.run(cctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		operator(cctx, e, sc.Seed)
	}()
	nemErr := nemesis(ctx, e, sc)
	stopClients()
	wg.Wait()
	if nemErr != nil {
		return Report{}, fmt.Errorf("nemesis: %w", nemErr)
	}

	// Heal everything, then check.
	c.Net.Heal()
	if err := c.StartAll(); err != nil {
		return Report{}, err
	}
	reads, err := settle(ctx, e)
	if err != nil {
		return Report{}, err
	}
	observersCatchUp(ctx, e, reads)
	stopObservers()
	owg.Wait()
	r := check(e, reads)
	r.Name, r.Faults, r.Duration = sc.Name, e.faults, time.Since(began)
	r.Seed, r.Started = sc.Seed, began
	ops, _, windows, _ := e.h.snapshot()
	r.Timeline, r.Cuts = spansOf(e, windows)
	r.Width = bucketWidth(r.Duration)
	r.Latency, r.Buckets = opStats(ops, r.Duration, r.Width)
	r.Resumed, r.Revoked = e.resumed, e.revokes
	r.Crashes, r.Lost = c.Crashes()
	r.ByGroup = e.h.grantsSince(-1)
	for _, id := range c.IDs() {
		if n := c.Node(id); n != nil {
			r.Mirrors += len(testhook.MirrorsApplied(n))
		}
	}
	for _, s := range e.h.suspectsSnapshot() {
		e.dumps.grants(s.name, s.tokens[:]...)
	}
	r.Dumps = e.dumps.files()
	e.h.mu.Lock()
	r.Notes = append([]string(nil), e.h.notes...)
	e.h.mu.Unlock()
	return r, nil
}

// warmUpBound bounds how long the nemesis waits, before its first fault,
// for the workload to be running (warmedUp).
const warmUpBound = 30 * time.Second

// nemesis applies the scenario's faults with quiet periods around them.
// The first fault waits until the workload runs in full (warmedUp), so that
// a slow start (three groups per replica to elect, under -race on a loaded
// machine) does not leave a short scenario without the coverage its test
// asks for.
func nemesis(ctx context.Context, e *env, sc Scenario) error {
	if err := wait(ctx, quiet); err != nil {
		return err
	}
	for deadline := time.Now().Add(warmUpBound); !warmedUp(e) && time.Now().Before(deadline); {
		if err := wait(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	// Each fault, then quiet for the cluster to settle before the next.
	run := func(f Fault) error {
		if err := applyFault(ctx, e, f); err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		e.fault()
		return wait(ctx, quiet)
	}
	if sc.Soak > 0 {
		for end := time.Now().Add(sc.Soak); time.Now().Before(end); {
			if err := run(sc.Faults[e.rng.IntN(len(sc.Faults))]); err != nil {
				return err
			}
		}
		return nil
	}
	for _, f := range sc.Faults {
		if err := run(f); err != nil {
			return err
		}
	}
	return nil
}

// warmedUp reports whether the workload has run in full so far: a lock
// granted in every group, a term of leadership, and the recipes' coverage
// (Covered).
func warmedUp(e *env) bool {
	ops, _, _, _ := e.h.snapshot()
	terms, groups := 0, map[string]bool{}
	for _, op := range ops {
		if op.Outcome == Granted {
			groups[groupOf(op.Lock)] = true
			if op.Kind.campaign() {
				terms++
			}
		}
	}
	for _, g := range e.c.groupNames() {
		if !groups[g] {
			return false
		}
	}
	_, recipeOps := splitRecipes(ops)
	return terms > 0 && recipeCounts(recipeOps).Covered()
}
