package checker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// The nemesis records each fault it applies, from its start to its heal,
// for the report's timeline; a fault that fails is recorded too.
func TestFaultSpansAreRecorded(t *testing.T) {
	e := testEnv()
	step := make(chan struct{})
	f := Fault{Name: "stall", Apply: func(ctx context.Context, e *env) error {
		<-step
		return nil
	}}
	go close(step)
	require.NoError(t, applyFault(context.Background(), e, f))
	broken := Fault{Name: "broken", Apply: func(context.Context, *env) error { return errors.New("no leader") }}
	require.Error(t, applyFault(context.Background(), e, broken))

	e.h.window(Window{Start: int64(time.Second), End: int64(3 * time.Second), Minority: map[uint64]bool{2: true, 1: true}})
	_, _, windows, _ := e.h.snapshot()
	faults, cuts := spansOf(e, windows)
	require.Len(t, faults, 2)
	require.Equal(t, "stall", faults[0].Name)
	require.Equal(t, "broken", faults[1].Name)
	require.LessOrEqual(t, faults[0].Start, faults[0].End)
	require.LessOrEqual(t, faults[0].End, faults[1].Start)
	require.Equal(t, []Span{{Name: "cut off: [1 2]", Start: time.Second, End: 3 * time.Second}}, cuts)
}

// Operations are summed by kind as their callers saw them: outcomes
// counted, latencies of those that returned, and returns per second.
func TestOpStats(t *testing.T) {
	ms := int64(time.Millisecond)
	var ops []Op
	for i := range int64(100) { // acquires taking 1..100ms, returning in the first second
		ops = append(ops, Op{Kind: OpAcquire, Lock: "register/a", Outcome: Granted, Call: 0, Return: (i + 1) * ms})
	}
	ops = append(ops,
		Op{Kind: OpAcquire, Lock: "register/a", Outcome: Unknown, Call: 1500 * ms, Return: never},
		Op{Kind: OpRelease, Lock: "register/a", Outcome: NotHeld, Call: 2000 * ms, Return: 2010 * ms},
		Op{Kind: OpAcquire, Lock: "rw/a", Outcome: Granted, Call: 0, Return: 5 * ms})
	stats, buckets := opStats(ops, 3*time.Second, time.Second)
	require.Len(t, stats, 3)
	require.Equal(t, KindStats{Kind: "acquire", Count: 101, Outcomes: "granted 100, unknown 1",
		P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, Max: 100 * time.Millisecond}, stats[0])
	require.Equal(t, "release", stats[1].Kind)
	require.Equal(t, "not-held 1", stats[1].Outcomes)
	require.Equal(t, "rw/sem acquire", stats[2].Kind)
	require.Equal(t, []Bucket{{Granted: 101}, {Failed: 1}, {Other: 1}, {}}, buckets)
	require.Equal(t, 100*time.Millisecond, bucketWidth(3*time.Second), "at least a tenth of a second")
	require.Equal(t, 200*time.Millisecond, bucketWidth(12*time.Second))
	require.Equal(t, 10*time.Second, bucketWidth(10*time.Minute))
}

// The published page is one self-contained HTML file a person can read:
// every run with its faults on a timeline, its checks and their results,
// its operations, the seeded-bug table, and a link to a failure's
// porcupine visualisation copied beside the page. Everything a run
// recorded is escaped, and nothing is fetched from elsewhere.
func TestReportPage(t *testing.T) {
	dumpDir := t.TempDir()
	dump := filepath.Join(dumpDir, "holder-isolated-0-register_slow.html")
	require.NoError(t, os.WriteFile(dump, []byte("<html>porcupine</html>"), 0o644))
	ops := []Op{{Kind: OpAcquire, Lock: "register/a", Outcome: Granted, Call: 0, Return: int64(40 * time.Millisecond)}}
	latency, buckets := opStats(ops, 12*time.Second, time.Second)
	passed := PageRun{Report: Report{Name: "leader-crash", Seed: 1, Started: time.Date(2026, 12, 7, 4, 0, 0, 0, time.UTC),
		Duration: 12 * time.Second, Ops: 1, Grants: 1, Faults: 2,
		Timeline: []Span{{Name: "leader-crash", Start: 2 * time.Second, End: 5 * time.Second}, {Name: "follower-crash", Start: 6 * time.Second, End: 9 * time.Second}},
		Cuts:     []Span{{Name: "cut off: [3]", Start: 3 * time.Second, End: 4 * time.Second}},
		Latency:  latency, Buckets: buckets, Width: time.Second,
		Checks: []CheckResult{{Name: "2 fencing"}, {Name: "13 operator commands apply once"}}}}
	var many []string // more than a page shows
	for i := range shownViolations + 5 {
		many = append(many, fmt.Sprintf(`group "": token %d granted twice`, i+1))
	}
	failed := PageRun{Report: Report{Name: "holder-isolated", Seed: 4, Duration: 20 * time.Second, Faults: 1,
		Timeline:   []Span{{Name: "holder-isolated", Start: time.Second, End: 4 * time.Second}},
		Violations: []string{`holder does not stop first: client 7 granted "register/slow" <script>alert(1)</script>`},
		TimedOut:   []string{`linearizability check of "register/b" (900 operations) timed out after 2m0s`},
		Checks: []CheckResult{{Name: "while running: 2, 10 the holder stops first", Violations: []string{`holder does not stop first: client 7 granted "register/slow" <script>alert(1)</script>`}},
			{Name: "1 locks and elections linearizable", TimedOut: []string{`linearizability check of "register/b" (900 operations) timed out after 2m0s`}},
			{Name: "3 tokens unique and rising", Violations: many}},
		Dumps: []string{dump, filepath.Join(dumpDir, "gone.txt")}}}
	broken := PageRun{Report: Report{Name: "full-restart", Seed: 8}, Err: "nemesis: full-restart: context deadline exceeded"}
	dir := t.TempDir()
	path, err := WritePage(dir, Page{Command: "go test -race ./checker/ -run=TestScenarios -report " + dir, Generated: time.Now(),
		Runs: []PageRun{passed, failed, broken, passed},
		Seeded: []SeededRow{{Bug: "margin-dropped", Scenario: "clock-rates", Checks: "does not stop first", Runs: 3, CaughtIn: 1, First: "holder does not stop first: …"},
			{Bug: "revoke-twice", Scenario: "operator-retries", Checks: "operator command applied twice", Runs: 3},
			{Bug: "shared-beside-exclusive", Scenario: "leader-crash", Checks: "not linearizable", Runs: 3, CaughtIn: 2,
				First: `history of "rw/a" (402 operations) is not linearizable`, Dumps: []string{dump}},
			{Bug: "margin-dropped", Scenario: "clock-rates", Checks: "does not stop first", Runs: 3, CaughtIn: 2, First: "holder does not stop first: …"},
			{Bug: "revoke-twice", Scenario: "operator-retries", Checks: "operator command applied twice", Runs: 3, CaughtIn: 1, First: "operator command applied twice: …"}}})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "index.html"), path)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	page := string(b)

	strictlyNested(t, page)
	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(t, err)

	// One section per run, with its result.
	for _, want := range []struct{ id, result string }{{"run-1-leader-crash", "pass"}, {"run-2-holder-isolated", "FAIL"},
		{"run-3-full-restart", "FAIL"}, {"run-4-leader-crash", "pass"}} {
		h := find(doc, func(n *html.Node) bool { return n.DataAtom == atom.H2 && attr(n, "id") == want.id })
		require.NotNil(t, h, "no section %s", want.id)
		require.Contains(t, text(h), want.result, want.id)
	}
	// The faults on a timeline: a box per fault and per cut, named.
	svg := find(doc, func(n *html.Node) bool { return n.DataAtom == atom.Svg })
	require.NotNil(t, svg)
	for _, f := range []string{"leader-crash: 2.0s to 5.0s", "follower-crash: 6.0s to 9.0s", "cut off: [3]: 3.0s to 4.0s"} {
		require.NotNil(t, find(svg, func(n *html.Node) bool { return n.Data == "title" && text(n) == f }), "timeline has no %q", f)
	}
	cells := func(n *html.Node) []string {
		var out []string
		for _, td := range findAll(n, func(n *html.Node) bool { return n.DataAtom == atom.Td }) {
			out = append(out, strings.TrimSpace(text(td)))
		}
		return out
	}
	rows := findAll(doc, func(n *html.Node) bool { return n.DataAtom == atom.Tr })
	row := func(first string) []string {
		for _, r := range rows {
			if c := cells(r); len(c) > 0 && c[0] == first {
				return c
			}
		}
		return nil
	}
	// Totals by scenario first: runs, passed, ops, grants, faults, violations, timed out.
	require.Equal(t, []string{"leader-crash", "2", "2", "2", "2", "4", "0", "0", "0 / 0", "12.0s"}, row("leader-crash"))
	require.Equal(t, []string{"holder-isolated", "1", "0", "0", "0", "1", "1", "1", "0 / 0", "20.0s"}, row("holder-isolated"))
	require.Equal(t, []string{"follower-crash", "6.0s", "9.0s", "3.0s"}, row("follower-crash"))
	// Each check with its result, and a failed one's violations.
	check := func(result string) *html.Node {
		return find(doc, func(n *html.Node) bool { return n.DataAtom == atom.Li && text(n) == result })
	}
	require.NotNil(t, check("✓ 2 fencing"))
	require.NotNil(t, check("✓ 13 operator commands apply once"))
	require.NotNil(t, check("✗ 1 locks and elections linearizable: 0 violations, 1 timed out"))
	require.NotNil(t, check("✗ while running: 2, 10 the holder stops first: 1 violations"))
	require.NotNil(t, check(fmt.Sprintf(`group "": token %d granted twice`, shownViolations)))
	require.Nil(t, check(fmt.Sprintf(`group "": token %d granted twice`, shownViolations+1)))
	require.NotNil(t, check("… and 5 more (the test log has them all)"))
	require.NotNil(t, check(`linearizability check of "register/b" (900 operations) timed out after 2m0s`))
	require.NotNil(t, check(`holder does not stop first: client 7 granted "register/slow" <script>alert(1)</script>`), "the violation, as text")
	require.Equal(t, []string{"acquire", "1", "granted 1", "40", "40", "40", "40"}, row("acquire"))
	// A bug planted in several trials (-count) is one row.
	require.Equal(t, "caught in 2 of 2 trials (at run 1, 2 of 3)", row("margin-dropped")[3])
	require.Equal(t, "caught in 1 of 2 trials (at run –, 1 of 3)", row("revoke-twice")[3])
	require.Equal(t, "operator command applied twice: …", row("revoke-twice")[4], "the trial that caught it")
	require.Equal(t, "caught in run 2 of 3", row("shared-beside-exclusive")[3])
	require.NotNil(t, find(doc, func(n *html.Node) bool {
		return n.DataAtom == atom.A && attr(n, "href") == "files/seeded-3-shared-beside-exclusive-holder-isolated-0-register_slow.html"
	}), "the seeded run's visualisation")
	require.Contains(t, text(doc), "4 runs, 2 failed; 3 seeded bugs planted, 1 missed in some trial.")
	require.Contains(t, text(doc), "The run did not complete: nemesis: full-restart: context deadline exceeded")
	require.Contains(t, text(doc), "go test -race ./checker/ -run=TestScenarios -report "+dir)

	// Porcupine's visualisation, copied beside the page and linked; a
	// dump that is gone is named, not linked.
	link := find(doc, func(n *html.Node) bool {
		return n.DataAtom == atom.A && attr(n, "href") == "files/run-2-holder-isolated-holder-isolated-0-register_slow.html"
	})
	require.NotNil(t, link)
	copied, err := os.ReadFile(filepath.Join(dir, "files", "run-2-holder-isolated-holder-isolated-0-register_slow.html"))
	require.NoError(t, err)
	require.Equal(t, "<html>porcupine</html>", string(copied))
	require.Contains(t, text(doc), "gone.txt (not copied)")

	// Self-contained: no script, nothing fetched, links only within.
	require.Nil(t, find(doc, func(n *html.Node) bool { return n.DataAtom == atom.Script }), "a script element")
	for _, n := range findAll(doc, func(n *html.Node) bool { return n.Type == html.ElementNode }) {
		require.Empty(t, attr(n, "src"), "<%s src>", n.Data)
		if href := attr(n, "href"); href != "" {
			require.True(t, strings.HasPrefix(href, "#") || strings.HasPrefix(href, "files/"), "<%s href=%q>", n.Data, href)
			if id, ok := strings.CutPrefix(href, "#"); ok {
				require.NotNil(t, find(doc, func(n *html.Node) bool { return attr(n, "id") == id }), "no target for %s", href)
			}
		}
	}
	require.NotContains(t, page, "url(")
	require.NotContains(t, page, "@import")
}

// strictlyNested fails unless every element of page but the void ones is
// closed, in order: the page is what the template meant, not whatever a
// lenient parser makes of it.
func strictlyNested(t *testing.T, page string) {
	t.Helper()
	void := map[string]bool{"meta": true, "br": true, "img": true, "link": true, "input": true, "hr": true}
	var open []string
	z := html.NewTokenizer(strings.NewReader(page))
	for {
		switch z.Next() {
		case html.ErrorToken:
			require.ErrorIs(t, z.Err(), io.EOF)
			require.Empty(t, open, "elements left open")
			return
		case html.StartTagToken:
			if name, _ := z.TagName(); !void[string(name)] {
				open = append(open, string(name))
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			require.NotEmpty(t, open, "</%s> closes nothing", name)
			require.Equal(t, open[len(open)-1], string(name), "</%s> closes <%s>; open: %v", name, open[len(open)-1], open)
			open = open[:len(open)-1]
		}
	}
}

func find(n *html.Node, match func(*html.Node) bool) *html.Node {
	if all := findAll(n, match); len(all) > 0 {
		return all[0]
	}
	return nil
}

func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for d := range n.Descendants() {
		if match(d) {
			out = append(out, d)
		}
	}
	if match(n) {
		out = slices.Insert(out, 0, n)
	}
	return out
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

func text(n *html.Node) string {
	var b strings.Builder
	if n.Type == html.TextNode {
		b.WriteString(n.Data)
	}
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

// A scenario's run fills what its report shows: the fault it applied, in
// the run's time; each check by name with its result; its operations by
// kind with latencies; and the page shows them.
func TestReportOfARun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := Run(ctx, Scenario{Name: "follower-crash", Replicas: 3, Faults: []Fault{FollowerCrash}, Seed: 1}, t.TempDir())
	require.NoError(t, err)
	require.Len(t, r.Timeline, 1)
	f := r.Timeline[0]
	require.Equal(t, "follower-crash", f.Name)
	require.Greater(t, f.Start, time.Duration(0))
	require.Greater(t, f.End-f.Start, hold(&env{ttl: ttl})-time.Millisecond, "the crash is held for its hold, then healed")
	require.Less(t, f.End, r.Duration)

	var names []string
	for _, c := range r.Checks {
		names = append(names, c.Name)
	}
	for _, n := range []string{"1 ", "2 ", "3 ", "4 ", "5 ", "6 ", "7 ", "8 ", "9 ", "12 ", "13 "} {
		require.True(t, slices.ContainsFunc(names, func(name string) bool { return strings.HasPrefix(name, n) }), "no check %q in %q", n, names)
	}
	var found int
	for _, c := range r.Checks {
		found += len(c.Violations) + len(c.TimedOut)
	}
	require.Equal(t, len(r.Violations)+len(r.TimedOut), found, "every violation is under its check")

	i := slices.IndexFunc(r.Latency, func(k KindStats) bool { return k.Kind == "acquire" })
	require.GreaterOrEqual(t, i, 0, "%+v", r.Latency)
	acquire := r.Latency[i]
	require.Positive(t, acquire.Count)
	require.Positive(t, acquire.P50)
	require.LessOrEqual(t, acquire.P50, acquire.Max)
	returned := 0
	for _, b := range r.Buckets {
		returned += b.Granted + b.Other + b.Failed
	}
	require.Equal(t, r.Ops, returned, "every operation in a stretch of the run")
	require.Equal(t, bucketWidth(r.Duration), r.Width)

	dir := t.TempDir()
	path, err := WritePage(dir, Page{Runs: []PageRun{{Report: r}}})
	require.NoError(t, err)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	strictlyNested(t, string(b))
	doc, err := html.Parse(strings.NewReader(string(b)))
	require.NoError(t, err)
	require.NotNil(t, find(doc, func(n *html.Node) bool {
		return n.Data == "title" && strings.HasPrefix(text(n), "follower-crash: ")
	}), "the fault on the timeline")
	require.NotNil(t, find(doc, func(n *html.Node) bool { return n.DataAtom == atom.Li && text(n) == "✓ 2 fencing" }))
}
