package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/bench/lockbench"
)

func TestMain(m *testing.M) {
	if runFloorChild() { // the -http-floor stubs are this binary too
		return
	}
	goleak.VerifyTestMain(m)
}

func w2Sweep() sweepFile {
	sw := sweepFile{Sweep: "W2", Param: "workers", Date: "2026-12-03T19:00:00Z", Host: "2 cpus"}
	for i, w := range []int{1, 2, 4} {
		pt := sweepPoint{X: w, Results: map[string]lockbench.Result{
			"fencelock": {System: "fencelock", Workload: "W2", Workers: w, OpsPerS: float64(100 * (i + 1)), P50: 1, P99: 2},
		}}
		if w != 2 { // etcd missing a point: its line skips it
			pt.Results["etcd"] = lockbench.Result{System: "etcd", Workload: "W2", Workers: w, OpsPerS: float64(50 * (i + 1)), P50: 2, P99: 4}
		}
		sw.Points = append(sw.Points, pt)
	}
	return sw
}

func TestW2SweepChartsHaveBothSystemsOnTheSameAxes(t *testing.T) {
	// Through JSON, as -charts reads a sweep written before.
	b, err := json.Marshal(w2Sweep())
	require.NoError(t, err)
	var sw sweepFile
	require.NoError(t, json.Unmarshal(b, &sw))

	cs := chartsFor(sw, "w2-sweep")
	require.Len(t, cs, 2)
	thr, lat := cs[0], cs[1]
	require.Equal(t, "w2-sweep.svg", thr.File)
	require.Equal(t, "w2-sweep-latency.svg", lat.File)
	require.True(t, thr.LogX)
	require.Len(t, thr.Series, 2)
	require.Equal(t, "fencelock", thr.Series[0].Name)
	require.Equal(t, []point{{1, 100}, {2, 200}, {4, 300}}, thr.Series[0].Points)
	require.Equal(t, "etcd", thr.Series[1].Name)
	require.Equal(t, []point{{1, 50}, {4, 150}}, thr.Series[1].Points)
	require.NotEqual(t, thr.Series[0].Color, thr.Series[1].Color)
	require.Equal(t, thr.Series[0].Color, lat.Series[0].Color, "a system keeps its colour")
	require.True(t, lat.Series[1].Dashed)
	var names []string
	for _, s := range lat.Series {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"fencelock p50", "fencelock p99 (dashed)", "etcd p50", "etcd p99 (dashed)"}, names)
}

func TestW6SweepChartsReadTheNotes(t *testing.T) {
	sw := sweepFile{Sweep: "W6", Param: "locks", Date: "2026-12-03", Host: "2 cpus"}
	for _, n := range []int{10_000, 100_000} {
		sw.Points = append(sw.Points, sweepPoint{X: n, Results: map[string]lockbench.Result{"fencelock": {
			Workload: "W6", P99: 3, Notes: "replica_rss_mb=40.5 replica_heap_mb=20.0 snapshot_mb=1.5 snapshot_save_ms=12.0 snapshot_restore_ms=9.0 catchup_ms=300.0"}}})
	}
	cs := chartsFor(sw, "w6-sweep")
	require.Len(t, cs, 2)
	require.Len(t, cs[0].Series, 3)
	require.Equal(t, []point{{10_000, 40.5}, {100_000, 40.5}}, cs[0].Series[0].Points)
	require.Len(t, cs[1].Series, 4)
	require.Equal(t, "acquire p99 (all locks held)", cs[1].Series[3].Name)

	// A sweep whose notes lack a figure draws the others only.
	sw.Points[0].Results["fencelock"] = lockbench.Result{Workload: "W6", P99: 3}
	sw.Points[1].Results["fencelock"] = lockbench.Result{Workload: "W6", P99: 4}
	cs = chartsFor(sw, "w6-sweep")
	require.Len(t, cs, 1)
	require.Len(t, cs[0].Series, 1)
}

func TestW9CheckLineReadsAsWritten(t *testing.T) {
	c := w9Check{Check: "W9", Target: "keepalive_entries_per_s <= 10 and expiries == 0", KeepAliveEntriesPerS: 3, Pass: true}
	require.Contains(t, c.JSON(), `"target":"keepalive_entries_per_s <= 10 and expiries == 0"`)
	var back w9Check
	require.NoError(t, json.Unmarshal([]byte(c.JSON()), &back))
	require.Equal(t, c, back)
}

// TestSweepWritesJSONAndCharts runs the whole path of a sweep's output: the
// JSON, then bench/chart (its own module, built by `go run`) drawing SVGs
// that parse and name both systems.
func TestSweepWritesJSONAndCharts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bench/chart with gonum")
	}
	out := t.TempDir()
	require.NoError(t, writeSweep(w2Sweep(), out, ""))
	b, err := os.ReadFile(filepath.Join(out, "w2-sweep.json"))
	require.NoError(t, err)
	var sw sweepFile
	require.NoError(t, json.Unmarshal(b, &sw))
	require.Equal(t, w2Sweep(), sw)
	for _, f := range []string{"w2-sweep.svg", "w2-sweep-latency.svg"} {
		svg, err := os.ReadFile(filepath.Join(out, f))
		require.NoError(t, err)
		d := xml.NewDecoder(bytes.NewReader(svg))
		var root string
		for {
			tok, err := d.Token()
			if err == io.EOF {
				break
			}
			require.NoError(t, err, f)
			if el, ok := tok.(xml.StartElement); ok && root == "" {
				root = el.Name.Local
			}
		}
		require.Equal(t, "svg", root, f)
		require.Contains(t, string(svg), ">fencelock")
		require.Contains(t, string(svg), ">etcd")
	}
	// -charts redraws from the JSON alone.
	require.NoError(t, os.Remove(filepath.Join(out, "w2-sweep.svg")))
	require.NoError(t, redraw(filepath.Join(out, "w2-sweep.json"), ""))
	_, err = os.Stat(filepath.Join(out, "w2-sweep.svg"))
	require.NoError(t, err)
}

func TestW10NamesSpreadWorkersOverTheGroups(t *testing.T) {
	require.Equal(t, "bench/W10/5", w10Name(5, 1), "one group: the default, no suffix")
	require.Equal(t, "bench/W10/8", w10Name(8, 4), "i%G == 0: the default group")
	require.Equal(t, "bench/W10/9@g1", w10Name(9, 4))
	require.Equal(t, "bench/W10/63@g7", w10Name(63, 8))
	per := map[string]int{}
	for i := range 64 {
		n := w10Name(i, 8)
		g := ""
		if at := bytes.LastIndexByte([]byte(n), '@'); at >= 0 {
			g = n[at+1:]
		}
		per[g]++
	}
	require.Len(t, per, 8)
	for g, n := range per {
		require.Equal(t, 8, n, "group %q", g)
	}
}

func w10Lines(g1, g8, alone99, down99 float64, balanced int) []lockbench.Result {
	return []lockbench.Result{
		{Workload: "W10a", OpsPerS: g1, Notes: fmt.Sprintf("groups=1 balanced=%d", 1)},
		{Workload: "W10a", OpsPerS: g8, Notes: fmt.Sprintf("groups=8 balanced=%d", balanced)},
		{Workload: "W10b-alone", P99: alone99, Notes: "balanced=1"},
		{Workload: "W10b-a-down", P99: down99},
	}
}

func TestW10CheckReadsTheTargetsOffTheLines(t *testing.T) {
	c := w10Checks(w10Lines(1000, 1100, 2, 2.5, 1))
	require.True(t, c.Pass, c.Why)
	require.Equal(t, 8, c.AggregateAt)
	require.InDelta(t, 1.1, c.AggregateRatio, 1e-9)
	require.InDelta(t, 1.25, c.BP99Ratio, 1e-9)

	c = w10Checks(w10Lines(1000, 900, 2, 2.5, 1))
	require.False(t, c.Pass)
	require.Contains(t, c.Why, "8 groups gave 0.90x")

	c = w10Checks(w10Lines(1000, 1000, 2, 3.2, 1))
	require.False(t, c.Pass)
	require.Contains(t, c.Why, "b's p99 with a down was 1.60x")

	c = w10Checks(w10Lines(1000, 1000, 2, 2, 0))
	require.False(t, c.Pass)
	require.False(t, c.LeadersWithinBound)

	ls := w10Lines(1000, 1000, 2, 2, 1)
	ls[2].Notes = "balanced=0"
	c = w10Checks(ls)
	require.False(t, c.Pass)
	require.Contains(t, c.Why, "in W10b the leaders")

	c = w10Checks(w10Lines(1000, 1000, 2, 2, 1)[:2])
	require.False(t, c.Pass, "without W10b the check cannot pass")
	var back w10Check
	require.NoError(t, json.Unmarshal([]byte(c.JSON()), &back))
	require.Equal(t, c, back)
}

func TestW10SweepChartsReadThePointsAndNotes(t *testing.T) {
	sw := sweepFile{Sweep: "W10", Param: "groups", Date: "2026-12-04T19:00:00Z", Host: "2 cpus"}
	for _, g := range []int{1, 2, 4, 8} {
		sw.Points = append(sw.Points, sweepPoint{X: g, Results: map[string]lockbench.Result{"fencelock": {
			Workload: "W10a", OpsPerS: float64(1000 * g), P50: 1, P99: float64(g),
			Notes: fmt.Sprintf("groups=%d idle_cpu_pct=%d.5 cluster_heap_mb=%d.0", g, 2*g, 10+5*g)}}})
	}
	cs := chartsFor(sw, "w10-sweep")
	require.Len(t, cs, 3)
	require.Equal(t, []string{"w10-sweep.svg", "w10-sweep-latency.svg", "w10-sweep-cost.svg"}, []string{cs[0].File, cs[1].File, cs[2].File})
	require.Equal(t, []point{{1, 1000}, {2, 2000}, {4, 4000}, {8, 8000}}, cs[0].Series[0].Points)
	require.Equal(t, []point{{1, 1}, {2, 2}, {4, 4}, {8, 8}}, cs[1].Series[1].Points)
	require.True(t, cs[1].Series[1].Dashed)
	require.Equal(t, []point{{1, 2.5}, {2, 4.5}, {4, 8.5}, {8, 16.5}}, cs[2].Series[0].Points)
	require.Equal(t, []point{{1, 15}, {2, 20}, {4, 30}, {8, 50}}, cs[2].Series[1].Points)
}

// TestW10RunsBothPartsOnRealGroups runs W10 end to end, short: real
// replicas with named groups, the balancer waited for, the workers routed
// by name, and in W10b two replicas really stopped (the run itself fails
// if group a still grants afterwards). Speed is not asserted: that is the
// benchmark's.
func TestW10RunsBothPartsOnRealGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 clusters")
	}
	f := flags{w10Groups: "1,2", w10Idle: 100 * time.Millisecond, w10Settle: time.Minute,
		duration: 300 * time.Millisecond, workers: 6, iterations: 20}
	rs, chk, err := w10(context.Background(), f, t.TempDir())
	require.NoError(t, err)
	require.Len(t, rs, 4)
	for i, g := range []float64{1, 2} {
		r := rs[i]
		require.Equal(t, "W10a", r.Workload)
		n, _ := r.Note("groups")
		require.Equal(t, g, n)
		require.Zero(t, r.Errors, r.Notes)
		require.Positive(t, r.Ops)
		ok, _ := r.Note("balanced")
		require.Equal(t, 1.0, ok, "leaders spread within a minute: %s", r.Notes)
		lead, _ := r.Note("max_leaders")
		require.Equal(t, 1.0, lead, "one group each at G=1 and G=2 on 3 replicas")
	}
	require.Equal(t, "W10b-alone", rs[2].Workload)
	require.Equal(t, "W10b-a-down", rs[3].Workload)
	for _, r := range rs[2:] {
		require.Equal(t, 20, r.Ops, r.Notes)
		require.Zero(t, r.Errors)
	}
	aLeader, ok := rs[3].Note("a_leader_seen_by_r3_at_end")
	require.True(t, ok)
	require.Zero(t, aLeader)
	require.True(t, chk.LeadersWithinBound)
	require.Equal(t, 2, chk.AggregateAt)
}

func TestHandoffDelaysAreMeasuredAndSorted(t *testing.T) {
	awake, blocking := handoffDelays(50, 200*time.Microsecond)
	require.Len(t, awake, 50)
	require.Len(t, blocking, 50)
	require.True(t, slices.IsSorted(awake) && slices.IsSorted(blocking))
	require.Positive(t, awake[0])
	// The waker's busy loop ends by 200µs plus the deadline's slack, so the
	// readied goroutine ran at the latest then; a far larger delay would
	// mean the measurement waited on something else.
	require.Less(t, quantile(awake, .5), time.Second)
	require.LessOrEqual(t, quantile(blocking, .5), quantile(blocking, .99))
}

func TestThreadWakeDelaysAreMeasuredAndSorted(t *testing.T) {
	threads := threadWakeDelays(50, 200*time.Microsecond)
	require.Len(t, threads, 50)
	require.True(t, slices.IsSorted(threads))
	require.Positive(t, threads[0])
	// The woken thread reports within the waker's busy loop or just after
	// it; a far larger delay would mean a wake was lost and only a later
	// round's woke it.
	require.Less(t, quantile(threads, .5), time.Second)
}
