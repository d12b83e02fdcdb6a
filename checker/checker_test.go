package checker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/replica"
)

// shortSchedule is what CI runs: every fault at least once, on small
// clusters. FENCELOCK_SOAK=10m runs the soak instead: all faults drawn at
// random on 5 replicas for that long.
var shortSchedule = []Scenario{
	{Name: "leader-crash", Replicas: 3, Faults: []Fault{LeaderCrash, LeaderCrash}},
	{Name: "follower-crash", Replicas: 3, Faults: []Fault{FollowerCrash}},
	{Name: "leader-isolated", Replicas: 3, Faults: []Fault{LeaderIsolated}},
	{Name: "holder-isolated", Replicas: 3, Faults: []Fault{HolderIsolated, HolderIsolated}},
	{Name: "partitions", Replicas: 5, Faults: []Fault{PartitionLeaderInMinority, PartitionLeaderInMajority}},
	{Name: "lossy-slow-links", Replicas: 3, Faults: []Fault{LossyLinks, SlowLinks}},
	{Name: "client-freeze", Replicas: 3, Faults: []Fault{ClientFreeze, ClientFreeze}},
	{Name: "full-restart", Replicas: 3, Faults: []Fault{FullRestart}},
	{Name: "snapshot-catch-up", Replicas: 3, Faults: []Fault{SnapshotCatchUp}},
	{Name: "clock-jump", Replicas: 3, Faults: []Fault{ClockJump}},
	{Name: "misconfigured-replica", Replicas: 3, Faults: []Fault{MisconfiguredReplica}},
	{Name: "one-group-quorum", Replicas: 5, Faults: []Fault{OneGroupQuorum}},
	{Name: "lagging-replica", Replicas: 3, Faults: []Fault{LaggingReplica}},
	{Name: "group-voters", Replicas: 5, Faults: []Fault{GroupVoters, OneGroupQuorum}},
	// Replicas that run only the groups they vote in: clients on the others
	// reach a group through mirrors, across a leader's isolation (which
	// cuts the mirrors it feeds) and a move of a group onto every replica.
	{Name: "own-groups", Replicas: 5, Placement: fencelock.PlaceOwnGroups, Faults: []Fault{LeaderIsolated, GroupVoters, FollowerCrash}},
	// Clocks whose rates differ by 14% (holder 7% slow, leader 7% fast),
	// within the default margin's promise (TTL/5: 20%): the holder whose
	// replica is cut off still stops first. A TTL of 3s leaves 220ms
	// between the holder's stop and the group's expiry, and puts the
	// holder's stop 420ms after it with the margin dropped.
	clockRates,
	// Operator commands through a follower that hears nothing back: their
	// retries reach the log beside the first attempt.
	{Name: "operator-retries", Replicas: 3, Faults: []Fault{OperatorLostReplies}},
	// A mirror's voter cut off from its group but reachable from the
	// mirror's host (mirrors.go): the mirror must move to another voter.
	mirrorVoterCut,
	// The group table under load (table.go): a group moved onto and off
	// replicas that reach it through mirrors, one of its voters removed
	// while down.
	{Name: "group-moves", Replicas: 5, Placement: fencelock.PlaceOwnGroups, Faults: []Fault{GroupMoves}},
	// A group dropped and created again under one name, twice, under
	// load: three incarnations, each a new group ID.
	// The same under PlaceEveryGroup: a replica removed while down must
	// learn it from a voter, as nothing else tells it.
	{Name: "removed-while-down", Replicas: 5, Faults: []Fault{GroupMoves}},
	{Name: "drop-create", Replicas: 5, Placement: fencelock.PlaceOwnGroups, Faults: []Fault{DropCreate}},
}

var mirrorVoterCut = Scenario{Name: "mirror-voter-cut", Replicas: 5, Placement: fencelock.PlaceOwnGroups,
	Faults: []Fault{MirrorVoterCut, MirrorVoterCut}}

var clockRates = Scenario{Name: "clock-rates", Replicas: 3, Rates: skewWithin, TTL: 3 * time.Second,
	Faults: []Fault{SkewedHolderIsolated, SkewedHolderIsolated}}

// skewWithin and skewBeyond are replica clock rates: replicas 1 and 2
// (where the slow clients live, moving between them as they restart) slow,
// replica 3 fast, 14% apart and 60%, inside and beyond the default
// margin's promise (margin/TTL = 20%).
var (
	skewWithin = map[uint64]float64{1: 0.93, 2: 0.93, 3: 1.07}
	skewBeyond = map[uint64]float64{1: 0.7, 2: 0.7, 3: 1.3}
)

var allFaults = []Fault{LeaderCrash, FollowerCrash, LeaderIsolated, HolderIsolated, PartitionLeaderInMinority,
	PartitionLeaderInMajority, LossyLinks, SlowLinks, ClientFreeze, FullRestart, SnapshotCatchUp, ClockJump, MisconfiguredReplica,
	OneGroupQuorum, LaggingReplica, GroupVoters, OperatorLostReplies}

// Beyond the margin's promise (the holder's clock 30% slow, the leader's
// 30% fast: a holder deadline of (TTL − TTL/5)/0.7 = 1.14 TTL by real time
// against an expiry at TTL/1.3 = 0.77 TTL), the holder cut off does not
// stop first, and the checker says so: the fault is real, and check 2
// sees it. The next holder's grant must reach it inside that gap (the
// expiry proposed, committed without the cut replica, the queue's next
// grant applied on its replica and returned): at 20% each way the gap was
// TTL/6, 250 ms, and under -race on a loaded box the grant missed it in
// some runs (no violation: 3 of 7 failed), at 30% it is 560 ms. It failed
// again in CI: a holder found restarting (resuming its session on another
// replica) moved while the fault waited for its keep-alive, and the fault
// cut off the replica it had left; a pin now waits for a restart under
// way, and the fault looks again if its holder moved (3 of 6 runs failed
// three at a time before, 12 of 12 passed after).
func TestClockRatesBeyondTheMargin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := Run(ctx, Scenario{Name: "clock-rates-beyond", Replicas: 3, Rates: skewBeyond, Seed: 1,
		Faults: []Fault{SkewedHolderIsolated}}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(r.Line())
	caught := 0
	for _, v := range r.Violations {
		if strings.Contains(v, "does not stop first") {
			caught++
		}
	}
	if caught == 0 {
		t.Errorf("clocks 60%% apart: no holder found not to stop first; violations: %q", r.Violations)
		for _, n := range r.Notes {
			t.Log(n)
		}
	}
}

func TestScenarios(t *testing.T) {
	if soak := os.Getenv("FENCELOCK_SOAK"); soak != "" {
		d, err := time.ParseDuration(soak)
		if err != nil {
			t.Fatalf("FENCELOCK_SOAK=%q: %v", soak, err)
		}
		run(t, Scenario{Name: "soak", Replicas: 5, Clients: 6, Faults: allFaults, Soak: d, Seed: uint64(time.Now().UnixNano())})
		return
	}
	crashTotals.crashes, crashTotals.lost = 0, 0
	for i, sc := range shortSchedule {
		sc.Seed = uint64(i + 1)
		t.Run(sc.Name, func(t *testing.T) {
			if sc.Placement == fencelock.PlaceOwnGroups {
				// The mirrors take their group's state in parts, as a
				// state over one call message goes: a stream that breaks
				// midway is among the faults.
				t.Cleanup(replica.TestingStateParts(64, 48))
			}
			run(t, sc)
		})
	}
	// A restore rolls the groups back to a backup, so it runs apart, with
	// checks of its own (restore.go).
	t.Run("restore", func(t *testing.T) { runRestore(t, uint64(len(shortSchedule)+1)) })
	// The service's clients hold sessions that move between replicas, so
	// it runs apart too, with checks of its own (service.go).
	t.Run("service", func(t *testing.T) { runService(t, uint64(len(shortSchedule)+2)) })
	// The crash faults must have lost what a crash loses, or the schedule
	// checked restarts as clean as a Close.
	if crashTotals.crashes > 0 && crashTotals.lost == 0 {
		t.Errorf("%d crashes lost no deferred commit index", crashTotals.crashes)
	}
}

// crashTotals adds up the crashes of TestScenarios' schedule (its
// scenarios run one after another).
var crashTotals struct {
	crashes int
	lost    uint64
}

func run(t *testing.T, sc Scenario) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+2*sc.Soak)
	defer cancel()
	r, err := Run(ctx, sc, t.TempDir())
	if err != nil {
		r.Name, r.Seed = sc.Name, sc.Seed
	}
	publishRun(t, r, err)
	if err != nil {
		t.Fatalf("%s: %v", sc.Name, err)
	}
	fmt.Println(r.Line())
	t.Logf("%s: %d grants (%d terms of leadership), %d late writes refused, %d values observed, %d sessions resumed, %d revocations",
		sc.Name, r.Grants, r.Terms, r.Refused, r.Observed, r.Resumed, r.Revoked)
	for _, note := range r.Notes {
		t.Logf("%s: %s", sc.Name, note)
	}
	t.Logf("%s: grants by group: %v", sc.Name, r.ByGroup)
	if sc.Placement == fencelock.PlaceOwnGroups && r.Mirrors == 0 {
		t.Errorf("%s: no client reached a group through a mirror: the scenario did not exercise placement", sc.Name)
	}
	for _, g := range []string{"", "a", "b"} {
		if r.ByGroup[g] == 0 {
			t.Errorf("%s: no lock of group %q was ever granted: the workload did not run in every group", sc.Name, g)
		}
	}
	for _, v := range r.Violations {
		t.Errorf("%s: %s", sc.Name, v)
	}
	// A check that timed out proved nothing: it fails the run as what it
	// is, not as a violation, and never passes.
	for _, to := range r.TimedOut {
		t.Errorf("%s: %s", sc.Name, to)
	}
	for _, d := range r.Dumps {
		t.Logf("%s: for the reader: %s", sc.Name, d)
	}
	if r.Crashes > 0 {
		// A crash dies when its replica defers a commit index, but what it
		// does in the instant before the NodeHost closes (a snapshot, a
		// leader's own entry) may write it after all; TestScenarios checks
		// that the crashes of the schedule lost some.
		t.Logf("%s: %d replicas crashed, losing %d deferred commit indexes", sc.Name, r.Crashes, r.Lost)
		crashTotals.crashes += r.Crashes
		crashTotals.lost += r.Lost
	}
	if r.Grants == 0 {
		t.Errorf("%s: no lock was ever granted: the workload did not run", sc.Name)
	}
	rc := r.Recipes
	t.Logf("%s: recipes: %d exclusive, %d shared and %d semaphore grants, %d certain sections, at most %d readers and %d permits held at once",
		sc.Name, rc.Exclusive, rc.Shared, rc.Permits, rc.Certain, rc.MaxReaders, rc.MaxPermits)
	if !rc.Covered() {
		t.Errorf("%s: %+v: the recipe workload did not run (or never held a shared lock or semaphore twice at once)", sc.Name, rc)
	}
	if r.Terms == 0 || r.Observed == 0 {
		t.Errorf("%s: %d terms, %d values observed: the election workload did not run", sc.Name, r.Terms, r.Observed)
	}
}
