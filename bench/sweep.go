package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// sweepFile is what a sweep writes: its points, each with the result line
// of every system run at it, and the charts are drawn from this alone
// (-charts FILE redraws them).
type sweepFile struct {
	Sweep  string       `json:"sweep"` // W2 or W6
	Param  string       `json:"param"` // what x counts: workers, locks
	Date   string       `json:"date"`
	Host   string       `json:"host"`
	Notes  string       `json:"notes,omitempty"`
	Points []sweepPoint `json:"points"`
}

type sweepPoint struct {
	X       int                         `json:"x"`
	Results map[string]lockbench.Result `json:"results"` // by system
}

func host() string {
	return fmt.Sprintf("%d cpus %s/%s %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// sweepW2 runs W2 at each worker count, fencelock and (with a peer) the peer
// interleaved per point: at every other point the peer goes first, so
// neither system always runs on the box the other just warmed or loaded.
func sweepW2(ctx context.Context, f flags, root string, peer *peer) (sweepFile, error) {
	sw, points, err := newSweep("W2", "workers", "-sweep-workers", f.sweepWorkers,
		fmt.Sprintf("W2 at each worker count; %v measured per point and system after a 2s warm-up; a fresh cluster per point", f.sweepDuration))
	if err != nil {
		return sw, err
	}
	for i, workers := range points {
		pt := sweepPoint{X: workers, Results: map[string]lockbench.Result{}}
		pf := f
		pf.workers, pf.duration = workers, f.sweepDuration
		runPeer := func() error {
			if peer == nil {
				return nil
			}
			got := map[string][]lockbench.Result{}
			if err := peer.run(ctx, pf, "W2", 1000+i, got); err != nil {
				return err
			}
			if len(got["W2"]) != 1 {
				return fmt.Errorf("%s peer W2 at %d workers printed %d lines", peer.name, workers, len(got["W2"]))
			}
			pt.Results[got["W2"][0].System] = got["W2"][0]
			return nil
		}
		if i%2 == 1 {
			if err := runPeer(); err != nil {
				return sw, err
			}
		}
		dir := filepath.Join(root, fmt.Sprintf("sweep-W2-%d", workers))
		o := lockbench.Options{System: "fencelock", Duration: f.sweepDuration, Workers: workers}
		res, err := measure(f, dir, fmt.Sprintf("W2 at %d workers", workers), func() (lockbench.Result, error) {
			return lockbench.Run(ctx, o, "W2", starter(f.replicas, nil), dir)
		})
		if err != nil {
			return sw, err
		}
		pt.Results["fencelock"] = res
		if i%2 == 0 {
			if err := runPeer(); err != nil {
				return sw, err
			}
		}
		sw.Points = append(sw.Points, pt)
	}
	return sw, nil
}

// sweepW6 runs W6 at each count of locks held, fencelock only: the etcd
// peer has no W6 (its figures are fencelock's snapshot and catch-up), and
// 1M etcd mutexes at its W2 rate would take longer than the whole sweep.
// The sessions are min(-w6-sessions, locks).
func sweepW6(ctx context.Context, f flags, root string) (sweepFile, error) {
	sw, points, err := newSweep("W6", "locks", "-sweep-locks", f.sweepLocks,
		fmt.Sprintf("W6 at each count of locks held; sessions min(%d, locks); %d lock operations (at least) while a follower is down", f.w6Sessions, f.w6Extra))
	if err != nil {
		return sw, err
	}
	return sweepAlone(f, root, sw, points, "W6", func(locks int, dir string) (lockbench.Result, error) {
		pf := f
		pf.w6Locks, pf.w6Sessions = locks, min(f.w6Sessions, locks)
		return w6(ctx, pf, dir)
	})
}

// newSweep starts the sweep of workload w over param (what x counts) at
// the points of list, the value of the flag named flagName, which names
// it in the error of a bad list.
func newSweep(w, param, flagName, list, notes string) (sweepFile, []int, error) {
	points, err := lockbench.ParsePoints(list)
	if err != nil {
		return sweepFile{}, nil, fmt.Errorf("%s: %w", flagName, err)
	}
	return sweepFile{Sweep: w, Param: param, Date: time.Now().UTC().Format(time.RFC3339), Host: host(), Notes: notes}, points, nil
}

// sweepAlone measures fencelock alone at each of the points of sw, each in
// its own dir below root, with run; name (the workload run) and the point
// name a failed one in its error.
func sweepAlone(f flags, root string, sw sweepFile, points []int, name string,
	run func(x int, dir string) (lockbench.Result, error)) (sweepFile, error) {
	for _, x := range points {
		dir := filepath.Join(root, fmt.Sprintf("sweep-%s-%d", sw.Sweep, x))
		res, err := measure(f, dir, fmt.Sprintf("%s at %d %s", name, x, sw.Param), func() (lockbench.Result, error) { return run(x, dir) })
		if err != nil {
			return sw, err
		}
		sw.Points = append(sw.Points, sweepPoint{X: x, Results: map[string]lockbench.Result{"fencelock": res}})
	}
	return sw, nil
}

// measure runs one measurement, whose data is in dir, removes dir after
// (unless -keep) and prints the result's line; what names the measurement
// in its error.
func measure(f flags, dir, what string, run func() (lockbench.Result, error)) (lockbench.Result, error) {
	res, err := run()
	if err != nil {
		return res, fmt.Errorf("%s: %w", what, err)
	}
	if !f.keep {
		os.RemoveAll(dir)
	}
	fmt.Println(res.JSON())
	return res, nil
}

// writeSweep writes the sweep's JSON as out/<w>-sweep.json and draws its
// charts next to it.
func writeSweep(sw sweepFile, out, chartDir string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(sw, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(out, strings.ToLower(sw.Sweep)+"-sweep.json")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "bench: wrote", path)
	return drawCharts(chartsFor(sw, strings.ToLower(sw.Sweep)+"-sweep"), out, chartDir)
}

// redraw draws the charts of a sweep JSON written before, next to it.
func redraw(path, chartDir string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var sw sweepFile
	if err := json.Unmarshal(b, &sw); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	base := strings.TrimSuffix(filepath.Base(path), ".json")
	return drawCharts(chartsFor(sw, base), filepath.Dir(path), chartDir)
}

// The chart spec, as bench/chart reads it.
type chartSpec struct {
	Charts []chart `json:"charts"`
}

type chart struct {
	File   string   `json:"file"`
	Title  string   `json:"title"`
	XLabel string   `json:"x_label"`
	YLabel string   `json:"y_label"`
	LogX   bool     `json:"log_x"`
	LogY   bool     `json:"log_y"`
	Series []series `json:"series"`
}

type series struct {
	Name   string  `json:"name"`
	Color  string  `json:"color,omitempty"`
	Dashed bool    `json:"dashed,omitempty"`
	Points []point `json:"points"`
}

// colors are the systems' colours: fencelock blue, the peer red.
var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"}

type point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// systems are the systems a sweep has results of, fencelock first.
func systems(sw sweepFile) []string {
	seen := map[string]bool{}
	out := []string{"fencelock"}
	seen["fencelock"] = true
	for _, p := range sw.Points {
		for s := range p.Results {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// line is one series: fig of each point's result of system, points without
// it left out.
func line(sw sweepFile, name, system string, fig func(lockbench.Result) (float64, bool)) series {
	s := series{Name: name}
	for _, p := range sw.Points {
		if r, ok := p.Results[system]; ok {
			if y, ok := fig(r); ok {
				s.Points = append(s.Points, point{X: float64(p.X), Y: y})
			}
		}
	}
	return s
}

func note(key string) func(lockbench.Result) (float64, bool) {
	return func(r lockbench.Result) (float64, bool) { return r.Note(key) }
}

// chartsFor is the charts of a sweep, files named base.svg and base-*.svg.
func chartsFor(sw sweepFile, base string) []chart {
	title := func(s string) string { return fmt.Sprintf("%s (%s, %s)", s, sw.Host, sw.Date[:min(10, len(sw.Date))]) }
	switch sw.Sweep {
	case "W2":
		thr := chart{File: base + ".svg", Title: title("W2 throughput"), XLabel: "workers (one lock and session each)",
			YLabel: "acquire+release pairs/s", LogX: true}
		lat := chart{File: base + "-latency.svg", Title: title("W2 acquire latency"), XLabel: "workers",
			YLabel: "acquire ms", LogX: true, LogY: true}
		for i, sys := range systems(sw) {
			col := colors[i%len(colors)] // a system's colour is the same on both charts
			t := line(sw, sys, sys, func(r lockbench.Result) (float64, bool) { return r.OpsPerS, true })
			t.Color = col
			thr.Series = append(thr.Series, t)
			p50 := line(sw, sys+" p50", sys, func(r lockbench.Result) (float64, bool) { return r.P50, true })
			p99 := line(sw, sys+" p99 (dashed)", sys, func(r lockbench.Result) (float64, bool) { return r.P99, true })
			p50.Color, p99.Color, p99.Dashed = col, col, true
			lat.Series = append(lat.Series, p50, p99)
		}
		return nonEmpty(thr, lat)
	case "W6":
		mem := chart{File: base + ".svg", Title: title("W6 memory"), XLabel: "locks held", YLabel: "MB", LogX: true, LogY: true,
			Series: []series{
				line(sw, "restarted replica RSS", "fencelock", note("replica_rss_mb")),
				line(sw, "restarted replica Go heap", "fencelock", note("replica_heap_mb")),
				line(sw, "snapshot size", "fencelock", note("snapshot_mb")),
			}}
		ms := chart{File: base + "-ms.svg", Title: title("W6 snapshot and acquire"), XLabel: "locks held", YLabel: "ms",
			LogX: true, LogY: true,
			Series: []series{
				line(sw, "snapshot save", "fencelock", note("snapshot_save_ms")),
				line(sw, "snapshot restore", "fencelock", note("snapshot_restore_ms")),
				line(sw, "catch-up of restarted replica", "fencelock", note("catchup_ms")),
				line(sw, "acquire p99 (all locks held)", "fencelock", func(r lockbench.Result) (float64, bool) { return r.P99, true }),
			}}
		return nonEmpty(mem, ms)
	case "W10":
		col := colors[0]
		thr := chart{File: base + ".svg", Title: title("W10 aggregate throughput"), XLabel: "groups over 3 replicas (64 workers spread over them)",
			YLabel: "acquire+release pairs/s, all groups", LogX: true,
			Series: []series{line(sw, "fencelock", "fencelock", func(r lockbench.Result) (float64, bool) { return r.OpsPerS, true })}}
		thr.Series[0].Color = col
		lat := chart{File: base + "-latency.svg", Title: title("W10 acquire latency"), XLabel: "groups", YLabel: "acquire ms",
			LogX: true, LogY: true}
		p50 := line(sw, "fencelock p50", "fencelock", func(r lockbench.Result) (float64, bool) { return r.P50, true })
		p99 := line(sw, "fencelock p99 (dashed)", "fencelock", func(r lockbench.Result) (float64, bool) { return r.P99, true })
		p50.Color, p99.Color, p99.Dashed = col, col, true
		lat.Series = []series{p50, p99}
		cost := chart{File: base + "-cost.svg", Title: title("W10 idle cost of the groups"), XLabel: "groups over 3 replicas",
			YLabel: "% of one core; MB", LogX: true,
			Series: []series{
				line(sw, "idle CPU, % of one core (process: 3 replicas)", "fencelock", note("idle_cpu_pct")),
				line(sw, "live heap MB (3 replicas, idle)", "fencelock", note("cluster_heap_mb")),
			}}
		return nonEmpty(thr, lat, cost)
	}
	return nil
}

// nonEmpty drops the series without points, and the charts left with none.
func nonEmpty(cs ...chart) []chart {
	var out []chart
	for _, c := range cs {
		var keep []series
		for _, s := range c.Series {
			if len(s.Points) > 0 {
				keep = append(keep, s)
			}
		}
		if c.Series = keep; len(keep) > 0 {
			out = append(out, c)
		}
	}
	return out
}

// drawCharts runs bench/chart (a module of its own, so that gonum never
// enters the library's go.mod) on the charts, writing them under out.
func drawCharts(cs []chart, out, chartDir string) error {
	if len(cs) == 0 {
		return nil
	}
	dir, err := findModule(chartDir, "chart")
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	spec, err := json.Marshal(chartSpec{Charts: cs})
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "run", ".", "-dir", abs)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(spec)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("draw charts with %s: %w", dir, err)
	}
	for _, c := range cs {
		fmt.Fprintln(os.Stderr, "bench: wrote", filepath.Join(out, c.File))
	}
	return nil
}

// findModule finds bench/<name>, a module of its own, from the repository
// root, from bench/, or next to this source file.
func findModule(dir, name string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	_, self, _, _ := runtime.Caller(0)
	for _, d := range []string{filepath.Join("bench", name), name, filepath.Join(filepath.Dir(self), name)} {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("cannot find bench/%s: run from the repository root or pass its dir", name)
}
