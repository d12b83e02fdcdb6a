// Command critpath reads a Go execution trace of a W1 run and tells what
// each call waited on:
//
//	go run ./bench -workload W1-leader -trace w1.trace
//	cd bench/critpath && go run . ../../w1.trace
//
// For every wait of the worker in the proposer (a command in flight), it
// walks back from the worker's wake-up along the chain of goroutines that
// readied each other (the last waker each time; a wake-up by the network
// poller is followed to the socket write that ended last before it) until
// the wait's start, and adds up where the time went: fdatasync, other
// system calls, loopback (a write's end to its reader's wake-up), waiting
// for a processor once readied, and running, by goroutine. It also counts
// the wake-ups on that path and prints how long the trace's fdatasyncs took
// alone and while another was in flight (the replicas share one disk).
//
// It is a module of its own so that fencelock's go.mod does not pull the
// trace parser (golang.org/x/exp/trace).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"golang.org/x/exp/trace"
)

func main() {
	worker := flag.String("worker", "lockbench.Uncontended", "a function on the worker goroutine's stack when it waits")
	wait := flag.String("wait", "proposer.", "a function on its stack when it waits for a command")
	skip := flag.Int("skip", 40, "waits to leave out at the start (warm-up)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: critpath [flags] TRACE")
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "critpath:", err)
		os.Exit(1)
	}
	defer f.Close()
	rep, err := Analyze(f, Options{Worker: *worker, Wait: *wait, Skip: *skip})
	if err != nil {
		fmt.Fprintln(os.Stderr, "critpath:", err)
		os.Exit(1)
	}
	rep.Print(os.Stdout)
}

// Options name the waits to analyse.
type Options struct {
	Worker string // a function on the worker's stack when it blocks
	Wait   string // a function on its stack when the block is a wait to analyse
	Skip   int    // waits to leave out at the start
}

// Report is the time of the analysed waits, by where it went.
type Report struct {
	Waits      int
	P50, Mean  float64            // µs, of the waits
	Links      float64            // wake-ups on the path, per wait
	Time       map[string]float64 // µs per wait, by category
	Counts     map[string]float64 // events per wait, by kind
	SyncsAlone []float64          // µs, fdatasyncs with no other in flight, sorted
	SyncsOver  []float64          // µs, fdatasyncs overlapping another, sorted
}

type transition struct {
	t        trace.Time
	from, to trace.GoState
	waker    trace.GoID // for a wake-up: who readied it (NoGoroutine: the poller)
	stack    string     // the event's stack: the goroutine's own for a block or a system call
}

type goroutine struct {
	name  string
	named bool
	trs   []transition
}

type interval struct {
	g          trace.GoID
	start, end trace.Time
}

// Analyze reads a trace and analyses the worker's waits.
func Analyze(r io.Reader, o Options) (Report, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return Report{}, err
	}
	gs := map[trace.GoID]*goroutine{}
	get := func(id trace.GoID) *goroutine {
		g := gs[id]
		if g == nil {
			g = &goroutine{}
			gs[id] = g
		}
		return g
	}
	var writes, syncs []interval
	openWrite, openSync := map[trace.GoID]trace.Time{}, map[trace.GoID]trace.Time{}
	for {
		ev, err := tr.ReadEvent()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Report{}, err
		}
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		from, to := st.Goroutine()
		g := get(id)
		x := transition{t: ev.Time(), from: from, to: to, waker: ev.Goroutine(), stack: stackString(ev.Stack())}
		if g.name == "" && (from == trace.GoNotExist || from == trace.GoUndetermined) {
			g.name = startFunc(st.Stack)
		}
		if to == trace.GoWaiting && ev.Goroutine() == id && !g.named {
			g.named = true // a wrapper's goroutine is named by what the wrapper runs
			if n := wrapped(x.stack); n != "" {
				g.name = n
			}
		}
		g.trs = append(g.trs, x)
		if to == trace.GoSyscall {
			if isSocketWrite(x.stack) {
				openWrite[id] = x.t
			}
			if isSync(syscallKind(x.stack)) {
				openSync[id] = x.t
			}
		}
		if from == trace.GoSyscall {
			if s, ok := openWrite[id]; ok {
				writes = append(writes, interval{id, s, x.t})
				delete(openWrite, id)
			}
			if s, ok := openSync[id]; ok {
				syncs = append(syncs, interval{id, s, x.t})
				delete(openSync, id)
			}
		}
	}
	sort.Slice(writes, func(i, j int) bool { return writes[i].start < writes[j].start })
	a := &analysis{gs: gs, writes: writes}

	var workerID trace.GoID = trace.NoGoroutine
	for id, g := range gs {
		for _, x := range g.trs {
			if x.to == trace.GoWaiting && x.waker == id && strings.Contains(x.stack, o.Worker) && strings.Contains(x.stack, o.Wait) {
				workerID = id
				break
			}
		}
		if workerID != trace.NoGoroutine {
			break
		}
	}
	if workerID == trace.NoGoroutine {
		return Report{}, fmt.Errorf("no goroutine waits with %q and %q on its stack", o.Worker, o.Wait)
	}
	rep := Report{Time: map[string]float64{}, Counts: map[string]float64{}}
	var totals []float64
	links := 0
	trs := gs[workerID].trs
	seen := 0
	for i := 0; i < len(trs); i++ {
		x := trs[i]
		if !(x.to == trace.GoWaiting && strings.Contains(x.stack, o.Wait)) {
			continue
		}
		j := i + 1
		for j < len(trs) && trs[j].to != trace.GoRunning {
			j++
		}
		if j >= len(trs) {
			break
		}
		seen++
		if seen > o.Skip {
			a.time, a.counts, a.links = rep.Time, rep.Counts, 0
			a.walk(workerID, trs[j].t, x.t, 0)
			totals = append(totals, float64(trs[j].t-x.t)/1e3)
			links += a.links
		}
		i = j
	}
	if len(totals) == 0 {
		return Report{}, fmt.Errorf("no wait after the first %d", o.Skip)
	}
	n := float64(len(totals))
	for k := range rep.Time {
		rep.Time[k] /= n
	}
	for k := range rep.Counts {
		rep.Counts[k] /= n
	}
	slices.Sort(totals)
	rep.Waits, rep.P50, rep.Links = len(totals), totals[len(totals)/2], float64(links)/n
	for _, t := range totals {
		rep.Mean += t / n
	}
	rep.SyncsAlone, rep.SyncsOver = overlaps(syncs)
	return rep, nil
}

type analysis struct {
	gs     map[trace.GoID]*goroutine
	writes []interval // by start
	time   map[string]float64
	counts map[string]float64
	links  int
}

// walk attributes goroutine id's states from t back to stop, and at the
// wake-up that made it runnable goes on with whoever readied it.
func (a *analysis) walk(id trace.GoID, t, stop trace.Time, depth int) {
	g := a.gs[id]
	if g == nil || depth > 500 {
		a.time["unknown"] += float64(t-stop) / 1e3
		return
	}
	k := sort.Search(len(g.trs), func(i int) bool { return g.trs[i].t > t }) - 1
	for cur := t; k >= 0; k-- {
		x := g.trs[k]
		d := float64(cur-max(x.t, stop)) / 1e3
		switch x.to { // the state during [x.t, cur]
		case trace.GoRunning:
			a.time["run: "+label(g.name)] += d
		case trace.GoSyscall:
			a.time["syscall: "+syscallKind(x.stack)] += d
			a.counts["syscall: "+syscallKind(x.stack)]++
		case trace.GoRunnable:
			a.time["wait for a processor"] += d
			a.time["  wait for a processor: "+label(g.name)] += d
		default:
			a.time["other state"] += d
		}
		if x.t <= stop {
			return
		}
		cur = x.t
		if k == 0 {
			a.time["before the trace knew the goroutine"] += float64(cur-stop) / 1e3
			return
		}
		if x.to != trace.GoRunnable || (x.from != trace.GoWaiting && x.from != trace.GoNotExist) {
			continue
		}
		if x.waker != trace.NoGoroutine && x.waker != id {
			a.links++
			from := "?"
			if w := a.gs[x.waker]; w != nil {
				from = label(w.name)
			}
			a.counts["wake-up: "+from+" -> "+label(g.name)]++
			a.walk(x.waker, x.t, stop, depth+1)
			return
		}
		// Readied by the network poller: follow the last socket write that
		// started before it, on another goroutine (on loopback the reader
		// may be woken before the writer's system call returns).
		i := sort.Search(len(a.writes), func(i int) bool { return a.writes[i].start > x.t }) - 1
		for i >= 0 && a.writes[i].g == id {
			i--
		}
		if i < 0 {
			a.time["readied by the poller, no write found"] += float64(x.t-stop) / 1e3
			return
		}
		w := a.writes[i]
		a.time["loopback: a write's start to its reader's wake-up"] += float64(x.t-max(w.start, stop)) / 1e3
		a.counts["loopback hop"]++
		a.links++
		a.walk(w.g, w.start, stop, depth+1)
		return
	}
}

// overlaps splits the fdatasyncs' durations (µs) into those with no other
// fdatasync in flight and those overlapping one.
func overlaps(syncs []interval) (alone, over []float64) {
	sort.Slice(syncs, func(i, j int) bool { return syncs[i].start < syncs[j].start })
	for i, s := range syncs {
		o := false
		for j := i - 1; j >= 0 && !o; j-- { // earlier starts that end after s starts
			o = syncs[j].end > s.start
			if s.start-syncs[j].start > 1e9 {
				break
			}
		}
		for j := i + 1; j < len(syncs) && !o && syncs[j].start < s.end; j++ {
			o = true
		}
		d := float64(s.end-s.start) / 1e3
		if o {
			over = append(over, d)
		} else {
			alone = append(alone, d)
		}
	}
	slices.Sort(alone)
	slices.Sort(over)
	return alone, over
}

// Print writes the report: the waits, then the time by category (shares of
// the path), then the events per wait.
func (r Report) Print(w io.Writer) {
	fmt.Fprintf(w, "waits %d: p50 %.0f us, mean %.0f us; %.1f wake-ups on the path per wait\n", r.Waits, r.P50, r.Mean, r.Links)
	fmt.Fprintf(w, "fsyncs in the trace: %d alone, p50 %.0f us; %d overlapping another, p50 %.0f us\n",
		len(r.SyncsAlone), median(r.SyncsAlone), len(r.SyncsOver), median(r.SyncsOver))
	keys := sortedKeys(r.Time)
	total := 0.0
	for _, k := range keys {
		if !strings.HasPrefix(k, " ") {
			total += r.Time[k]
		}
	}
	for _, sub := range []bool{false, true} {
		for _, k := range keys {
			if strings.HasPrefix(k, " ") == sub && r.Time[k] >= 0.5 {
				fmt.Fprintf(w, "  %-72s %7.1f us  %5.1f%%\n", k, r.Time[k], 100*r.Time[k]/total)
			}
		}
	}
	for _, k := range sortedKeys(r.Counts) {
		if r.Counts[k] >= 0.05 {
			fmt.Fprintf(w, "  per wait: %-70s %5.2f\n", k, r.Counts[k])
		}
	}
}

func sortedKeys(m map[string]float64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	return keys
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)/2]
}

func stackString(s trace.Stack) string {
	var b strings.Builder
	for f := range s.Frames() {
		b.WriteString(f.Func)
		b.WriteByte('\n')
	}
	return b.String()
}

// startFunc is a goroutine's start function: the outermost frame.
func startFunc(s trace.Stack) string {
	last := ""
	for f := range s.Frames() {
		last = f.Func
	}
	return last
}

// wrapped names a goroutine started through a wrapper (Dragonboat's
// Stopper, sync.WaitGroup.Go) by the function the wrapper called.
func wrapped(stack string) string {
	frames := strings.Split(strings.TrimSpace(stack), "\n")
	for i, f := range frames {
		if i > 0 && (strings.Contains(f, "runWorker.func1") || strings.Contains(f, "WaitGroup).Go.func1")) {
			return frames[i-1]
		}
	}
	return ""
}

// label shortens a goroutine's name for the report.
func label(name string) string {
	if name == "" {
		return "(unnamed: the worker)"
	}
	for _, known := range []struct{ in, is string }{
		{"newExecEngine.func1", "Dragonboat step worker"},
		{"newExecEngine.func3", "Dragonboat apply worker"},
		{"Transport).send.func2", "Dragonboat send queue"},
		{"tcpTransport).accept.func1", "fencelock transport receiver"},
		{"record.NewLogWriter.func2", "pebble WAL flusher"},
	} {
		if strings.Contains(name, known.in) {
			return known.is
		}
	}
	return strings.TrimPrefix(name, "github.com/")
}

func isSync(kind string) bool { return kind == "fsync" || strings.HasPrefix(kind, "fdatasync") }

func isSocketWrite(s string) bool {
	return !strings.Contains(s, "pebble") && (strings.Contains(s, "netFD).Write") ||
		strings.Contains(s, "netFD).writev") || strings.Contains(s, "net.(*conn).Write") ||
		strings.Contains(s, "Buffers).WriteTo"))
}

func syscallKind(s string) string {
	switch {
	case strings.Contains(s, "Fdatasync") || strings.Contains(s, "Fsync") || strings.Contains(s, "SyncData"):
		if strings.Contains(s, "pebble") {
			return "fdatasync (pebble WAL)"
		}
		return "fsync"
	case isSocketWrite(s):
		return "socket write"
	case strings.Contains(s, "Read"):
		return "read"
	}
	if lines := strings.SplitN(s, "\n", 3); len(lines) > 1 {
		return "other: " + lines[1]
	}
	return "other"
}
