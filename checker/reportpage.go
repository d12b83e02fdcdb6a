package checker

import (
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Page is the published report: the runs of one test process, the
// seeded bugs it planted, and the command that produced it. WritePage
// renders it as one self-contained HTML file (inline CSS and SVG, no
// script, font or image from elsewhere); only the files a failing run
// wrote for its reader (porcupine's visualisation, the applied log) are
// copied beside it and linked.
type Page struct {
	Command   string
	Generated time.Time
	Runs      []PageRun
	Seeded    []SeededRow
}

// PageRun is one run on the page: its Report, or the error that stopped
// it before it could check anything.
type PageRun struct {
	Report
	Err string
	ID  string // its section's anchor, unique on the page (WritePage)
}

// SeededRow is one planted defect: the scenario run against it, the
// checks that must name it, and the run that first did (0: none of Runs).
type SeededRow struct {
	Bug, Scenario, Checks string
	Runs, CaughtIn        int
	First                 string   // the first violation that named it
	Dumps                 []string // what the catching run wrote for its reader
	ID                    string   // its dumps' prefix, unique on the page (WritePage)
}

// Failed reports whether the run found a violation, timed out a check, or
// did not run.
func (r PageRun) Failed() bool { return r.Err != "" || len(r.Violations) > 0 || len(r.TimedOut) > 0 }

// WritePage writes p to dir/index.html, with the runs' dump files copied
// to dir/files, and returns the page's path.
func WritePage(dir string, p Page) (string, error) {
	files := filepath.Join(dir, "files")
	if err := os.MkdirAll(files, 0o755); err != nil {
		return "", err
	}
	links := map[string]string{} // prefix and a dump's path (dumpKey) -> its copy, relative to the page
	p.Runs = slices.Clone(p.Runs)
	// Copies are named by their run, as two runs of one scenario write
	// dumps of the same names.
	keep := func(prefix string, dumps []string) {
		for _, d := range dumps {
			rel := filepath.Join("files", prefix+"-"+filepath.Base(d))
			if copyFile(d, filepath.Join(dir, rel)) == nil {
				links[dumpKey(prefix, d)] = filepath.ToSlash(rel)
			}
		}
	}
	for i, r := range p.Runs {
		p.Runs[i].ID = "run-" + slug(fmt.Sprintf("%d-%s", i+1, r.Name))
		keep(p.Runs[i].ID, r.Dumps)
	}
	p.Seeded = slices.Clone(p.Seeded)
	for i, s := range p.Seeded {
		p.Seeded[i].ID = "seeded-" + slug(fmt.Sprintf("%d-%s", i+1, s.Bug))
		keep(p.Seeded[i].ID, s.Dumps)
	}
	path := filepath.Join(dir, "index.html")
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	err = renderPage(f, p, links)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	// Renamed into place, so a reader never sees half a page while a
	// later run rewrites it.
	return path, os.Rename(tmp, path)
}

func dumpKey(prefix, path string) string { return prefix + "\x00" + path }

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// The timeline's geometry, in SVG user units.
const (
	svgWidth, svgLeft, svgRight = 960.0, 150.0, 24.0
	laneHeight, laneGap         = 18.0, 6.0
	stripHeight                 = 40.0
)

type svgRect struct {
	X, Y, W, H float64
	Class, Tip string
	Label      string
}

type svgTick struct {
	X     float64
	Label string
}

type timeline struct {
	Height, Width, Left, AxisY, TickY float64
	Lanes                             []svgLane
	Rects                             []svgRect
	Ticks                             []svgTick
}

type svgLane struct {
	Y     float64
	Label string
}

// timelineOf lays out r's faults, its partitions' windows and its
// operations' returns per Width on one time axis.
func timelineOf(r PageRun) timeline {
	d := r.Duration
	for _, s := range append(append([]Span(nil), r.Timeline...), r.Cuts...) {
		d = max(d, s.End)
	}
	d = max(d, time.Second)
	span := svgWidth - svgLeft - svgRight
	x := func(t time.Duration) float64 { return svgLeft + span*float64(t)/float64(d) }
	tl := timeline{Width: svgWidth, Left: svgLeft}
	y := 4.0
	lane := func(label string, spans []Span, class string) {
		if len(spans) == 0 {
			return
		}
		tl.Lanes = append(tl.Lanes, svgLane{Y: y + laneHeight*0.7, Label: label})
		for _, s := range spans {
			w := max(x(s.End)-x(s.Start), 2)
			tl.Rects = append(tl.Rects, svgRect{X: x(s.Start), Y: y, W: w, H: laneHeight, Class: class,
				Tip: fmt.Sprintf("%s: %s to %s", s.Name, secs(s.Start), secs(s.End)), Label: fit(s.Name, w)})
		}
		y += laneHeight + laneGap
	}
	lane("faults", r.Timeline, "fault")
	lane("partitions", r.Cuts, "cut")
	if len(r.Buckets) > 0 && r.Width > 0 {
		most := 1
		for _, b := range r.Buckets {
			most = max(most, b.Granted+b.Other+b.Failed)
		}
		tl.Lanes = append(tl.Lanes, svgLane{Y: y + stripHeight*0.6, Label: "ops returned / " + fmt.Sprint(r.Width)})
		w := max(span*float64(r.Width)/float64(d)-0.5, 0.5)
		base := y + stripHeight
		for i, b := range r.Buckets {
			at := x(time.Duration(i) * r.Width)
			for _, part := range []struct {
				n     int
				class string
			}{{b.Granted, "granted"}, {b.Other, "other"}, {b.Failed, "failed"}} {
				if part.n == 0 {
					continue
				}
				h := stripHeight * float64(part.n) / float64(most)
				base -= h
				tl.Rects = append(tl.Rects, svgRect{X: at, Y: base, W: w, H: h, Class: part.class,
					Tip: fmt.Sprintf("%s to %s: %d %s", secs(time.Duration(i)*r.Width), secs(time.Duration(i+1)*r.Width), part.n, part.class)})
			}
			base = y + stripHeight
		}
		y += stripHeight + laneGap
	}
	tl.AxisY, tl.TickY = y, y+4
	step := niceStep(d)
	for t := time.Duration(0); t <= d; t += step {
		tl.Ticks = append(tl.Ticks, svgTick{X: x(t), Label: secs(t)})
	}
	tl.Height = y + 20
	return tl
}

// niceStep is a tick interval giving at most about twelve ticks over d.
func niceStep(d time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		if d/s <= 12 {
			return s
		}
	}
	return 30 * time.Minute
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

// fit returns label if it fits a box w wide at the timeline's font, else
// nothing (the box's tooltip and the faults' table name it).
func fit(label string, w float64) string {
	if float64(len(label))*6.2+6 > w {
		return ""
	}
	return label
}

func ms(d time.Duration) string {
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond))
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"secs": secs,
	"ms":   ms,
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "–"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"timeline": timelineOf,
	"link":     func(links map[string]string, prefix, path string) string { return links[dumpKey(prefix, path)] },
	"head": func(v []string) struct {
		Shown []string
		More  int
	} {
		n := min(len(v), shownViolations)
		return struct {
			Shown []string
			More  int
		}{v[:n], len(v) - n}
	},
	"base": filepath.Base,
	"sub":  func(from, to time.Duration) time.Duration { return to - from },
}).Parse(pageHTML))

// slug is name made fit for an id and a file name.
func slug(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '-'
	}, strings.ToLower(name))
}

// Total is one scenario's runs on the page, added up.
type Total struct {
	Name                                          string
	Runs, Passed, Ops, Grants, Faults, Violations int
	TimedOut, Unknown, Open                       int
	Shortest, Longest                             time.Duration
}

// totals adds up runs by scenario, in the order each first ran.
func totals(runs []PageRun) []Total {
	var out []Total
	at := map[string]int{}
	for _, r := range runs {
		i, ok := at[r.Name]
		if !ok {
			i = len(out)
			at[r.Name] = i
			out = append(out, Total{Name: r.Name, Shortest: r.Duration})
		}
		t := &out[i]
		t.Runs++
		if !r.Failed() {
			t.Passed++
		}
		t.Ops += r.Ops
		t.Grants += r.Grants
		t.Faults += r.Faults
		t.Violations += len(r.Violations)
		t.TimedOut += len(r.TimedOut)
		t.Unknown += r.Unknown
		t.Open += r.Open
		t.Shortest, t.Longest = min(t.Shortest, r.Duration), max(t.Longest, r.Duration)
	}
	return out
}

// SeededTotal is one seeded bug's trials on the page (a process run with
// -count=N plants each N times): the first trial that caught it (else the
// first), how many did, and at which run of each.
type SeededTotal struct {
	SeededRow
	Trials, Caught int
	At             string // "1, 1, 2"; "–" for a trial that missed
}

func seededTotals(rows []SeededRow) []SeededTotal {
	var out []SeededTotal
	at := map[string]int{}
	for _, r := range rows {
		i, ok := at[r.Bug]
		if !ok {
			i = len(out)
			at[r.Bug] = i
			out = append(out, SeededTotal{SeededRow: r})
		}
		t := &out[i]
		t.Trials++
		run := "–"
		if r.CaughtIn > 0 {
			t.Caught++
			run = fmt.Sprint(r.CaughtIn)
			if t.CaughtIn == 0 {
				t.SeededRow = r
			}
		}
		t.At = strings.TrimPrefix(t.At+", "+run, ", ")
	}
	return out
}

// shownViolations bounds the violations a check lists on the page: a
// broken invariant can yield thousands, and the test log has them all.
const shownViolations = 20

func renderPage(w io.Writer, p Page, links map[string]string) error {
	failed := 0
	for _, r := range p.Runs {
		if r.Failed() {
			failed++
		}
	}
	seeded, missed := seededTotals(p.Seeded), 0
	for _, s := range seeded {
		if s.Caught < s.Trials {
			missed++
		}
	}
	return pageTemplate.Execute(w, struct {
		Page
		Failed       int
		Totals       []Total
		SeededTotals []SeededTotal
		Missed       int
		Links        map[string]string
	}{p, failed, totals(p.Runs), seeded, missed, links})
}

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>fencelock checker report</title>
<style>
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px auto; max-width: 1000px; color: #1d1d1f; padding: 0 12px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 18px; margin-top: 36px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
.meta { color: #555; }
code, pre { font: 12px/1.4 ui-monospace, "SFMono-Regular", Menlo, monospace; }
pre { background: #f6f6f6; padding: 8px; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #0a6b2d; font-weight: 600; }
.bad { color: #b00020; font-weight: 600; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: 12px; font-weight: 600; color: #fff; vertical-align: middle; }
.badge.ok { background: #1f8a4c; } .badge.bad { background: #c62828; }
ul.v { margin: 2px 0; padding-left: 18px; color: #b00020; }
svg { display: block; margin: 6px 0; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg .fault { fill: #f4a259; } svg .cut { fill: #8e7cc3; }
svg .granted { fill: #3c9d5d; } svg .other { fill: #9bb7d4; } svg .failed { fill: #d64545; }
svg .axis { stroke: #999; stroke-width: 1; }
svg .box text, svg text.in { fill: #222; }
.legend span { display: inline-block; width: 10px; height: 10px; margin: 0 4px 0 12px; vertical-align: middle; }
details { margin: 6px 0; }
ul.checks { list-style: none; padding: 0; margin: 4px 0; display: flex; flex-wrap: wrap; gap: 4px 6px; }
ul.checks li { border: 1px solid #ddd; border-radius: 4px; padding: 1px 7px; font-size: 13px; }
ul.checks li.pass { color: #0a6b2d; background: #f1f9f3; } ul.checks li.fail { color: #b00020; background: #fdf0f1; font-weight: 600; }
.failure { margin: 6px 0; }
.cols { display: flex; flex-wrap: wrap; gap: 0 28px; align-items: flex-start; }
td code { white-space: nowrap; }
</style>
</head>
<body>
<h1>fencelock checker report</h1>
<p class="meta">Generated {{time .Generated}}. {{len .Runs}} runs, {{if .Failed}}<span class="bad">{{.Failed}} failed</span>{{else}}<span class="ok">all passed</span>{{end}}{{if .Seeded}}; {{len .SeededTotals}} seeded bugs planted, {{if .Missed}}<span class="bad">{{.Missed}} missed in some trial</span>{{else}}<span class="ok">every one caught</span>{{end}}{{end}}.</p>
{{if .Command}}<p>Reproduce with:</p><pre>{{.Command}}</pre>{{end}}

<h2>Totals by scenario</h2>
<table>
<tr><th>scenario</th><th class="num">runs</th><th class="num">passed</th><th class="num">ops</th><th class="num">grants</th><th class="num">faults</th><th class="num">violations</th><th class="num">timed out</th><th class="num">unknown / open</th><th class="num">duration</th></tr>
{{range .Totals}}<tr><td>{{.Name}}</td><td class="num">{{.Runs}}</td><td class="num">{{if eq .Passed .Runs}}<span class="ok">{{.Passed}}</span>{{else}}<span class="bad">{{.Passed}}</span>{{end}}</td><td class="num">{{.Ops}}</td><td class="num">{{.Grants}}</td><td class="num">{{.Faults}}</td><td class="num">{{.Violations}}</td><td class="num">{{.TimedOut}}</td><td class="num">{{.Unknown}} / {{.Open}}</td><td class="num">{{secs .Shortest}}{{if ne .Shortest .Longest}} – {{secs .Longest}}{{end}}</td></tr>
{{end}}</table>

<h2>Runs</h2>
<p class="legend meta">Each run's timeline:<span style="background:#f4a259"></span>a fault, from the nemesis starting it (it may wait for its moment, such as a fresh holder) to its heal and recovery probe<span style="background:#8e7cc3"></span>replicas cut off<span style="background:#3c9d5d"></span>operations returned granted<span style="background:#9bb7d4"></span>other outcomes<span style="background:#d64545"></span>ended in an error (unknown, counted at its call), per sixtieth or so of the run. Hover a bar for its numbers.</p>
<table>
<tr><th>run</th><th>result</th><th class="num">seed</th><th class="num">duration</th><th class="num">ops</th><th class="num">grants</th><th class="num">faults</th><th class="num">checks</th><th class="num">violations</th><th class="num">timed out</th><th class="num">unknown / open</th></tr>
{{range .Runs}}<tr><td><a href="#{{.ID}}">{{.Name}}</a></td><td>{{if .Failed}}<span class="bad">FAIL</span>{{else}}<span class="ok">pass</span>{{end}}</td><td class="num">{{.Seed}}</td><td class="num">{{secs .Duration}}</td><td class="num">{{.Ops}}</td><td class="num">{{.Grants}}</td><td class="num">{{.Faults}}</td><td class="num">{{len .Checks}}</td><td class="num">{{len .Violations}}</td><td class="num">{{len .TimedOut}}</td><td class="num">{{.Unknown}} / {{.Open}}</td></tr>
{{end}}</table>

{{$links := .Links}}
{{if .Seeded}}
<h2 id="seeded">Seeded bugs</h2>
<p>Each defect planted alone (internal/seeded); its scenario runs until a check names it. A bug caught only by a panic or by another check counts as missed.</p>
<table>
<tr><th>seeded bug</th><th>scenario</th><th>check that must name it</th><th>result</th><th>first violation naming it</th></tr>
{{range .SeededTotals}}<tr><td><code>{{.Bug}}</code></td><td>{{.Scenario}}</td><td>{{.Checks}}</td><td>{{if eq .Trials 1}}{{if .CaughtIn}}<span class="ok">caught in run {{.CaughtIn}} of {{.Runs}}</span>{{else}}<span class="bad">missed in {{.Runs}} runs</span>{{end}}{{else}}<span class="{{if eq .Caught .Trials}}ok{{else}}bad{{end}}">caught in {{.Caught}} of {{.Trials}} trials</span> (at run {{.At}} of {{.Runs}}){{end}}</td><td>{{.First}}{{if .Dumps}}<br>{{$prefix := .ID}}{{range .Dumps}}{{with link $links $prefix .}}<a href="{{.}}">{{base .}}</a> {{end}}{{end}}{{end}}</td></tr>
{{end}}</table>
{{end}}

{{range .Runs}}
<h2 id="{{.ID}}">{{.Name}} {{if .Failed}}<span class="badge bad">FAIL</span>{{else}}<span class="badge ok">pass</span>{{end}}</h2>
<p class="meta">seed {{.Seed}} · started {{time .Started}} · {{secs .Duration}} · {{.Ops}} operations, {{.Grants}} grants ({{.Terms}} terms), {{.Refused}} late writes refused, {{.Revoked}} revocations, {{.Resumed}} sessions resumed{{if .Crashes}} · {{.Crashes}} crashes losing {{.Lost}} deferred commit indexes{{end}}</p>
{{if .Err}}<p class="bad">The run did not complete: {{.Err}}</p>{{end}}
{{with timeline .}}
<svg xmlns="http://www.w3.org/2000/svg" width="{{.Width}}" height="{{.Height}}" viewBox="0 0 {{.Width}} {{.Height}}" role="img" aria-label="timeline">
{{range .Lanes}}<text x="4" y="{{.Y}}">{{.Label}}</text>
{{end}}{{range .Rects}}<g class="box"><rect class="{{.Class}}" x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}"><title>{{.Tip}}</title></rect>{{if .Label}}<text class="in" x="{{.X}}" dx="3" y="{{.Y}}" dy="13">{{.Label}}</text>{{end}}</g>
{{end}}<line class="axis" x1="{{.Left}}" y1="{{.AxisY}}" x2="{{.Width}}" y2="{{.AxisY}}"/>
{{$y := .AxisY}}{{$y2 := .TickY}}{{range .Ticks}}<line class="axis" x1="{{.X}}" y1="{{$y}}" x2="{{.X}}" y2="{{$y2}}"/><text x="{{.X}}" y="{{$y}}" dy="15" text-anchor="middle">{{.Label}}</text>
{{end}}</svg>
{{end}}

<h3>Checks</h3>
<ul class="checks">{{range .Checks}}<li class="{{if .Passed}}pass{{else}}fail{{end}}">{{if .Passed}}✓{{else}}✗{{end}} {{.Name}}{{if not .Passed}}: {{len .Violations}} violations{{if .TimedOut}}, {{len .TimedOut}} timed out{{end}}{{end}}</li>{{end}}</ul>
{{range .Checks}}{{if not .Passed}}<div class="failure"><b>{{.Name}}</b><ul class="v">{{with head .Violations}}{{range .Shown}}<li>{{.}}</li>{{end}}{{if .More}}<li>… and {{.More}} more (the test log has them all)</li>{{end}}{{end}}{{range .TimedOut}}<li>{{.}}</li>{{end}}</ul></div>{{end}}{{end}}
{{if .Dumps}}<h3>For the reader of a failure</h3>
{{$prefix := .ID}}<ul>{{range .Dumps}}<li>{{with link $links $prefix .}}<a href="{{.}}">{{base .}}</a>{{else}}<code>{{.}}</code> (not copied){{end}}</li>{{end}}</ul>
<p class="meta">The .html files are porcupine's visualisation of the history that is not linearizable; the .txt files the history in call order and the group's applied commands around the grants a violation names.</p>{{end}}

<div class="cols">
{{if .Timeline}}<div><h3>Faults</h3>
<table><tr><th>fault</th><th class="num">start</th><th class="num">healed</th><th class="num">length</th></tr>
{{range .Timeline}}<tr><td>{{.Name}}</td><td class="num">{{secs .Start}}</td><td class="num">{{secs .End}}</td><td class="num">{{secs (.End | sub .Start)}}</td></tr>
{{end}}{{range .Cuts}}<tr><td>{{.Name}}</td><td class="num">{{secs .Start}}</td><td class="num">{{secs .End}}</td><td class="num">{{secs (.End | sub .Start)}}</td></tr>
{{end}}</table></div>{{end}}
{{if .Latency}}<div><h3>Operations, as their callers saw them</h3>
<table><tr><th>kind</th><th class="num">count</th><th>outcomes</th><th class="num">p50 ms</th><th class="num">p90 ms</th><th class="num">p99 ms</th><th class="num">max ms</th></tr>
{{range .Latency}}<tr><td>{{.Kind}}</td><td class="num">{{.Count}}</td><td>{{.Outcomes}}</td><td class="num">{{ms .P50}}</td><td class="num">{{ms .P90}}</td><td class="num">{{ms .P99}}</td><td class="num">{{ms .Max}}</td></tr>
{{end}}</table></div>{{end}}
</div>



{{if .Notes}}<details><summary>What the faults saw ({{len .Notes}} notes)</summary><pre>{{range .Notes}}{{.}}
{{end}}</pre></details>{{end}}
{{end}}
</body>
</html>
`
