//go:build fencelock_seeded

package checker

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/seeded"
)

// seededCatches names, for each defect internal/seeded can plant, the
// scenario that catches it fastest and the check that must name it (a
// substring of its violation): a scenario that never sees its bug passes
// the same way as one that checks nothing, so each row shows one that
// does. docs/testing.md has the table.
var seededCatches = []struct {
	bug   seeded.Bug
	sc    Scenario
	check []string // any of these, in a violation
	// apart runs a scenario that runs apart from Run (restore, service)
	// in sc's place; nil: Run(sc).
	apart func(ctx context.Context, seed uint64, dir string) (seededRun, error)
}{
	{seeded.MarginDropped, Scenario{Name: "clock-rates", Replicas: 3, Rates: skewWithin, TTL: clockRates.TTL, Faults: []Fault{SkewedHolderIsolated}},
		[]string{"does not stop first"}, nil},
	{seeded.LeasePlusMargin, Scenario{Name: "clock-rates", Replicas: 3, Rates: skewWithin, TTL: clockRates.TTL, Faults: []Fault{SkewedHolderIsolated}},
		[]string{"does not stop first"}, nil},
	{seeded.LeaderTimersAtOnce, Scenario{Name: "leader-isolated", Replicas: 3, Faults: []Fault{LeaderIsolated}},
		[]string{"does not stop first", "not linearizable"}, nil},
	{seeded.SharedBesideExclusive, Scenario{Name: "leader-crash", Replicas: 3, Faults: []Fault{LeaderCrash}},
		[]string{"granted while token", "not linearizable"}, nil},
	// A reused token leaves a state its snapshot's decoder refuses (a
	// panic in the replica that restores it), so its scenario restarts no
	// replica and cuts none off long enough to need a snapshot.
	{seeded.PromotionReusesToken, Scenario{Name: "slow-links", Replicas: 3, Faults: []Fault{SlowLinks}},
		[]string{"granted twice", "critical sections interleave", "not linearizable"}, nil},
	{seeded.LeaderStaleRead, Scenario{Name: "lagging-replica", Replicas: 3, Faults: []Fault{LaggingReplica}},
		[]string{"Leader read returned epoch", "not linearizable"}, nil},
	{seeded.KeepAliveDefaultOnly, Scenario{Name: "one-group-quorum", Replicas: 5, Faults: []Fault{OneGroupQuorum}},
		[]string{"keep-alive: KeepAlive"}, nil},
	{seeded.RevokeTwice, Scenario{Name: "operator-retries", Replicas: 3, Faults: []Fault{OperatorLostReplies}},
		[]string{"operator command applied twice"}, nil},
	{seeded.ExpiryIgnoresDelay, Scenario{Name: "holder-isolated", Replicas: 3, Faults: []Fault{HolderIsolated, HolderIsolated, HolderIsolated}},
		[]string{"lock-delay:"}, nil},
	{seeded.MirrorNeverFailsOver, mirrorVoterCut, []string{"it never failed over"}, nil},
	{seeded.GrantFromLocalState, Scenario{Name: "service"}, []string{"stale grant answered"},
		func(ctx context.Context, seed uint64, dir string) (seededRun, error) {
			r, err := RunService(ctx, seed, dir)
			return seededRun{r.Line(), r.Violations, r.Notes, nil}, err
		}},
	{seeded.RestoreKeepsTokenBase, Scenario{Name: "restore"}, []string{"late-write admitted", "fence granted twice", "restored fence not above"},
		func(ctx context.Context, seed uint64, dir string) (seededRun, error) {
			r, err := RunRestore(ctx, seed, dir)
			return seededRun{r.Line(), r.Violations, r.Notes, r.Dumps}, err
		}},
}

// seededRun is what TestSeededBugs reads of a run.
type seededRun struct {
	line                     string
	violations, notes, dumps []string
}

func init() { seededBuild = true }

// seededRuns bounds the runs of a row's scenario (seeds 1, 2, ...) until
// its bug is caught.
const seededRuns = 3

// seededRunsFor raises the bound for a row whose scenario meets its bug
// by chance: leader-isolated catches leader-timers-at-once only when a
// session holds a contended lock as the new leader starts, and one trial
// of six missed it in 3 runs (each run about 10s).
var seededRunsFor = map[seeded.Bug]int{seeded.LeaderTimersAtOnce: 8}

// runsOf is the bound of bug's row.
func runsOf(bug seeded.Bug) int { return max(seededRuns, seededRunsFor[bug]) }

// TestSeededBugs plants each defect in turn and runs its scenario until a
// check names it: caught by a violation of that check, not by a panic,
// an error of the run, or another check alone. Run it with the
// fencelock_seeded tag (.ci/run does): go test -race -tags
// fencelock_seeded -run TestSeededBugs ./checker/. FENCELOCK_SEEDED_ONLY
// picks rows by their bugs' names, separated by commas.
func TestSeededBugs(t *testing.T) {
	only := seededOnly()
	for _, row := range seededCatches {
		if only != "" && !slices.Contains(strings.Split(only, ","), string(row.bug)) {
			continue
		}
		t.Run(string(row.bug), func(t *testing.T) {
			undo := seeded.Plant(row.bug)
			defer undo()
			page := SeededRow{Bug: string(row.bug), Scenario: row.sc.Name, Checks: strings.Join(row.check, " | "), Runs: runsOf(row.bug)}
			for run := 1; run <= runsOf(row.bug); run++ {
				sc := row.sc
				sc.Seed = uint64(run)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
				var r seededRun
				var err error
				if row.apart != nil {
					r, err = row.apart(ctx, sc.Seed, t.TempDir())
				} else {
					var rep Report
					rep, err = Run(ctx, sc, t.TempDir())
					r = seededRun{rep.Line(), rep.Violations, rep.Notes, rep.Dumps}
				}
				cancel()
				if err != nil {
					t.Logf("run %d: %v", run, err)
					continue
				}
				fmt.Printf("seeded=%s %s\n", row.bug, r.line)
				var named []string
				for _, v := range r.violations {
					for _, c := range row.check {
						if strings.Contains(v, c) {
							named = append(named, v)
							break
						}
					}
				}
				if len(named) > 0 {
					t.Logf("seeded %s: caught by %s in run %d of %d (%d violations, %d by the check); first: %s",
						row.bug, sc.Name, run, runsOf(row.bug), len(r.violations), len(named), named[0])
					page.CaughtIn, page.First, page.Dumps = run, named[0], r.dumps
					publishSeeded(t, page)
					return
				}
				t.Logf("run %d: not caught by %q; violations: %q; notes: %q", run, row.check, r.violations, r.notes)
			}
			publishSeeded(t, page)
			t.Errorf("seeded %s: %s did not catch it in %d runs", row.bug, row.sc.Name, runsOf(row.bug))
		})
	}
}

// seededOnly is FENCELOCK_SEEDED_ONLY: the seeded bugs TestSeededBugs
// runs, separated by commas, or "" for all.
func seededOnly() string { return os.Getenv("FENCELOCK_SEEDED_ONLY") }
