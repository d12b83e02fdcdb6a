package checker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"
)

// What a run records for its published report (reportpage.go): the faults
// on a timeline, operations and their latencies by kind, and each check
// with its result. Run and RunRestore fill these Report fields; nothing in
// the checks reads them.

// Span is a stretch of a run: a fault from the nemesis starting it to its
// heal, or a partition's window. Times are since the run began.
type Span struct {
	Name       string
	Start, End time.Duration
}

// CheckResult is one check a run made and what it found: no violations
// and no timed-out searches is a pass.
type CheckResult struct {
	Name       string
	Violations []string
	TimedOut   []string
}

// Passed reports whether the check found nothing and ran to its end.
func (c CheckResult) Passed() bool { return len(c.Violations) == 0 && len(c.TimedOut) == 0 }

// KindStats are the operations of one kind as their callers saw them:
// how many, their outcomes, and the latencies of those that returned (an
// Unknown outcome has no return).
type KindStats struct {
	Kind               string
	Count              int
	Outcomes           string // "granted 40, locked 3", by count
	P50, P90, P99, Max time.Duration
}

// Bucket counts the operations that returned in one stretch of a run
// (bucketWidth), by what they returned: the timeline's availability strip.
type Bucket struct {
	Granted, Other, Failed int // failed: ended in an error (Unknown)
}

// applyFault applies f and records its span, from the nemesis's call to
// its heal (Apply heals before it returns), for the report's timeline.
func applyFault(ctx context.Context, e *env, f Fault) error {
	start := e.h.now()
	err := f.Apply(ctx, e)
	end := e.h.now()
	e.mu.Lock()
	e.spans = append(e.spans, Span{Name: f.Name, Start: time.Duration(start), End: time.Duration(end)})
	e.mu.Unlock()
	return err
}

// spansOf returns the faults applied so far and the partitions' windows
// (replicas cut off), for the timeline.
func spansOf(e *env, windows []Window) (faults, cuts []Span) {
	e.mu.Lock()
	faults = slices.Clone(e.spans)
	e.mu.Unlock()
	for _, w := range windows {
		ids := slices.Sorted(maps.Keys(w.Minority))
		cuts = append(cuts, Span{Name: fmt.Sprintf("cut off: %v", ids), Start: time.Duration(w.Start), End: time.Duration(w.End)})
	}
	return faults, cuts
}

// bucketWidth is the stretch a Bucket covers in a run of length d: about
// a sixtieth of it, in tenths of a second, so that a short run's dips show.
func bucketWidth(d time.Duration) time.Duration {
	return max(d/60, 100*time.Millisecond).Round(100 * time.Millisecond)
}

// opStats summarises ops by kind (recipes' apart, as "rw/sem <kind>"),
// in the order of OpKind, and buckets their returns by width over a run
// of length d (an op that ended in an error by its call).
func opStats(ops []Op, d, width time.Duration) ([]KindStats, []Bucket) {
	type acc struct {
		lat      []time.Duration
		outcomes map[Outcome]int
		count    int
	}
	by := map[string]*acc{}
	var order []string
	buckets := make([]Bucket, int(d/width)+1)
	for _, op := range ops {
		kind := op.Kind.String()
		if isRecipe(op.Lock) {
			kind = "rw/sem " + kind
		}
		a := by[kind]
		if a == nil {
			a = &acc{outcomes: map[Outcome]int{}}
			by[kind] = a
			order = append(order, kind)
		}
		a.count++
		a.outcomes[op.Outcome]++
		at := op.Return
		if op.Outcome == Unknown || op.Return == never {
			at = op.Call
		} else {
			a.lat = append(a.lat, time.Duration(op.Return-op.Call))
		}
		if i := int(at / int64(width)); i >= 0 && i < len(buckets) {
			switch op.Outcome {
			case Granted:
				buckets[i].Granted++
			case Unknown:
				buckets[i].Failed++
			default:
				buckets[i].Other++
			}
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return kindRank(order[i]) < kindRank(order[j]) })
	var out []KindStats
	for _, kind := range order {
		a := by[kind]
		slices.Sort(a.lat)
		ks := KindStats{Kind: kind, Count: a.count}
		if n := len(a.lat); n > 0 {
			ks.P50, ks.P90, ks.P99, ks.Max = a.lat[(n-1)*50/100], a.lat[(n-1)*90/100], a.lat[(n-1)*99/100], a.lat[n-1]
		}
		outs := slices.Collect(maps.Keys(a.outcomes))
		sort.Slice(outs, func(i, j int) bool {
			if a.outcomes[outs[i]] != a.outcomes[outs[j]] {
				return a.outcomes[outs[i]] > a.outcomes[outs[j]]
			}
			return outs[i] < outs[j]
		})
		var parts []string
		for _, o := range outs {
			parts = append(parts, fmt.Sprintf("%v %d", o, a.outcomes[o]))
		}
		ks.Outcomes = strings.Join(parts, ", ")
		out = append(out, ks)
	}
	return out, buckets
}

// kindRank orders kinds as OpKind does, recipes' after the locks'.
func kindRank(kind string) int {
	rank := 0
	if rest, ok := strings.CutPrefix(kind, "rw/sem "); ok {
		kind, rank = rest, 100
	}
	for k := OpAcquire; k <= OpKept; k++ {
		if k.String() == kind {
			return rank + int(k)
		}
	}
	return rank + 99
}

// restoreChecks names the restore scenario's checks (restoreViolations,
// and the applied logs' "fence granted twice") with their violations, each
// of which starts with its check's name.
func restoreChecks(violations []string) []CheckResult {
	checks := []CheckResult{{Name: "late-write admitted"}, {Name: "restored holder refused"},
		{Name: "fence granted twice"}, {Name: "restored fence not above"}, {Name: "group ID changed"}}
	var other []string
	for _, v := range violations {
		i := slices.IndexFunc(checks, func(c CheckResult) bool { return strings.HasPrefix(v, c.Name) })
		if i < 0 {
			other = append(other, v)
			continue
		}
		checks[i].Violations = append(checks[i].Violations, v)
	}
	if len(other) > 0 {
		checks = append(checks, CheckResult{Name: "other", Violations: other})
	}
	return checks
}
