//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencefile"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Three OS processes elect a primary; SIGKILL the primary and another
// process takes over with a larger epoch, and the shared resource holds
// only records with non-decreasing epochs.
func TestThreeProcessesFailOver(t *testing.T) {
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g, resource := startThree(t, ttl)

	g.waitPrimary(ctx, func(primary) bool { return true })
	victim := g.latestPrimary()
	waitRecords(t, ctx, resource, victim.epoch, 3)
	victim = g.latestPrimary() // still the same, unless the group changed its mind meanwhile
	g.kill(victim.id)
	killed := time.Now()

	// Another process takes over with a larger epoch (how soon is the
	// benchmarks' business; ctx bounds the wait).
	next := g.waitPrimary(ctx, func(p primary) bool { return p.id != victim.id && p.epoch > victim.epoch })
	took := time.Since(killed)
	t.Logf("primary: replica %d, epoch %d killed; replica %d took over with epoch %d after %v",
		victim.id, victim.epoch, next.id, next.epoch, took.Round(time.Millisecond))
	waitRecords(t, ctx, resource, next.epoch, 3)

	for id := 1; id <= 3; id++ {
		if id != victim.id {
			g.terminate(ctx, id) // SIGTERM: the example resigns and exits 0
		}
	}

	records, err := fencefile.Read(resource)
	require.NoError(t, err)
	epochs := g.epochs()
	for i, r := range records {
		if i > 0 {
			require.GreaterOrEqual(t, r.Token, records[i-1].Token, "record %d (%q) goes back in epoch", i, r.Text)
		}
		id, ok := epochs[r.Token]
		require.True(t, ok, "record %q under epoch %d, which no process announced", r.Text, r.Token)
		require.True(t, strings.HasPrefix(r.Text, fmt.Sprintf("replica %d epoch %d ", id, r.Token)),
			"record %q under epoch %d was not written by its primary, replica %d", r.Text, r.Token, id)
	}
}

// Every line starts with the time of day.
// A primary killed and restarted within its session's TTL resumes its
// session with the token it saved: it announces the same epoch again, no
// other process is primary meanwhile, and its records go on under that
// epoch.
func TestRestartedPrimaryKeepsItsEpoch(t *testing.T) {
	restartKeepsEpoch(t, "killed", func(ctx context.Context, g *group, id int) { g.kill(id) })
}

// With -keep-term, a primary stopped by SIGTERM (a rolling deploy) and
// started again within its TTL keeps its term: it exits cleanly without
// resigning, announces the same epoch again, nobody else is primary
// meanwhile, and its records go on under that epoch.
func TestGracefullyRestartedPrimaryKeepsItsEpoch(t *testing.T) {
	restartKeepsEpoch(t, "stopped by SIGTERM", func(ctx context.Context, g *group, id int) {
		g.terminate(ctx, id) // SIGTERM: a clean exit, the term kept
		g.waitLine(ctx, id, regexp.MustCompile(`stopped for a restart; the term is kept`))
	}, "-keep-term")
}

// restartKeepsEpoch stops the primary of three processes started with
// flags (stop, described as how), starts it again within its TTL, and
// requires that it resumes its term: the same epoch announced again,
// nobody else primary meanwhile, its records going on under that epoch.
func restartKeepsEpoch(t *testing.T, how string, stop func(ctx context.Context, g *group, id int), flags ...string) {
	const ttl = 20 * time.Second // far longer than a restart, even under -race
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g, resource, victim := startWithPrimary(t, ctx, ttl, flags...)
	announced := g.count()
	stop(ctx, g, victim.id)
	stopped := time.Now()
	g.restart(victim.id)

	back := g.waitPrimary(ctx, func(primary) bool { return true }, announced)
	require.Equal(t, victim, back, "the restarted primary resumed its term")
	t.Logf("replica %d %s and restarted: primary again with epoch %d after %v (TTL %v)",
		victim.id, how, back.epoch, time.Since(stopped).Round(time.Millisecond), ttl)
	records, err := fencefile.Read(resource)
	require.NoError(t, err)
	waitRecords(t, ctx, resource, victim.epoch, countEpoch(records, victim.epoch)+3)
	g.mu.Lock()
	require.Equal(t, []primary{victim, victim}, g.primary, "nobody else was primary")
	g.mu.Unlock()
	for id := 1; id <= 3; id++ {
		g.terminate(ctx, id)
	}
}

// A frozen primary (SIGSTOP) loses its term by its own clock: another
// process takes over, and once the frozen one thaws (SIGCONT) it reports
// stepping down, and its late write under the old epoch is refused.
func TestFrozenPrimaryStepsDown(t *testing.T) {
	const ttl, slack = 2 * time.Second, 8 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g, resource, victim := startWithPrimary(t, ctx, ttl)
	victim = g.latestPrimary()
	// Stopped inside a write, it would hold the file's lock, and its
	// successor could not write until it is continued.
	g.stopOutsideWrite(ctx, victim, resource)
	deadline, stop := context.WithTimeout(ctx, ttl+slack)
	defer stop()
	next := g.waitPrimary(deadline, func(p primary) bool { return p.id != victim.id && p.epoch > victim.epoch })
	waitRecords(t, ctx, resource, next.epoch, 3)
	require.NoError(t, g.procs[victim.id].Cmd.Process.Signal(syscall.SIGCONT))
	refused := regexp.MustCompile(fmt.Sprintf(`late write: replica %d, epoch %d: refused`, victim.id, victim.epoch))
	g.waitLine(ctx, victim.id, refused)
	g.waitLine(ctx, victim.id, regexp.MustCompile(fmt.Sprintf(`stepped down: replica %d, epoch %d`, victim.id, victim.epoch)))
	for id := 1; id <= 3; id++ {
		g.terminate(ctx, id)
	}
	records, err := fencefile.Read(resource)
	require.NoError(t, err)
	for i := 1; i < len(records); i++ {
		require.GreaterOrEqual(t, records[i].Token, records[i-1].Token, "record %d (%q) goes back in epoch", i, records[i].Text)
	}
}

// A primary frozen (SIGSTOP) past its TTL and thawed (SIGCONT) the moment
// its successor prints that it leads, before the successor's claim can have
// reached the file, has no record of its old epoch admitted after that
// election: not its serve loop's next tick (which the select may pick over
// the term's end) and not its late write. The test counts such records and
// prints the count.
func TestPrimaryWokenAtTakeoverWritesNothingMore(t *testing.T) {
	const ttl = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	g, resource, victim := startWithPrimary(t, ctx, ttl)
	victim = g.latestPrimary()
	before := g.stopOutsideWrite(ctx, victim, resource)
	next := g.waitPrimary(ctx, func(p primary) bool { return p.id != victim.id && p.epoch > victim.epoch })
	// The successor leads: continue the old primary at once, while the
	// successor's claim is still on its way to the file.
	require.NoError(t, g.procs[victim.id].Cmd.Process.Signal(syscall.SIGCONT))
	g.waitLine(ctx, victim.id, regexp.MustCompile(fmt.Sprintf(`stepped down: replica %d, epoch %d`, victim.id, victim.epoch)))
	g.waitLine(ctx, victim.id, regexp.MustCompile(fmt.Sprintf(`late write: replica %d, epoch %d: (refused|admitted)`, victim.id, victim.epoch)))
	waitRecords(t, ctx, resource, next.epoch, 3)
	for id := 1; id <= 3; id++ {
		g.terminate(ctx, id)
	}
	records, err := fencefile.Read(resource)
	require.NoError(t, err)
	late := countEpoch(records, victim.epoch) - before
	t.Logf("replica %d epoch %d woken at replica %d epoch %d's election: %d old-epoch records admitted after it",
		victim.id, victim.epoch, next.id, next.epoch, late)
	require.Zero(t, late, "records of the old epoch admitted after the successor's election")
	for i := 1; i < len(records); i++ {
		require.GreaterOrEqual(t, records[i].Token, records[i-1].Token, "record %d (%q) goes back in epoch", i, records[i].Text)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.lines {
		require.NotContains(t, l, "admitted (a bug", "a late write was admitted")
		if strings.HasPrefix(l, fmt.Sprintf("%d| ", victim.id)) && strings.Contains(l, "refused") {
			t.Logf("woken: %s", l) // which check refused it: the term's or the fence's
		}
	}
}

// stopOutsideWrite stops primary p's process (SIGSTOP) at a moment when it
// is not inside a write: it holds no lock on the fenced file, so every
// write it makes after it continues takes the lock, and re-checks its term,
// after that. If it stopped holding the lock, it is continued until its
// next record and stopped again. It returns how many records of p's epoch
// the file holds, which cannot change while p stays stopped.
func (g *group) stopOutsideWrite(ctx context.Context, p primary, resource string) int {
	g.t.Helper()
	proc := g.procs[p.id].Cmd.Process
	for {
		require.NoError(g.t, proc.Signal(syscall.SIGSTOP))
		fencelocktest.WaitStopped(g.t, proc.Pid)
		unlock, ok := tryLock(g.t, resource+".lock")
		if ok {
			// Not inside a write, and stopped: it cannot write until
			// continued. (Read takes the lock itself.)
			unlock()
			records, err := fencefile.Read(resource)
			require.NoError(g.t, err)
			return countEpoch(records, p.epoch)
		}
		// Stopped inside a write: let it finish (until the lock is free),
		// then try again.
		require.NoError(g.t, proc.Signal(syscall.SIGCONT))
		for {
			if unlock, ok := tryLock(g.t, resource+".lock"); ok {
				unlock()
				break
			}
			select {
			case <-ctx.Done():
				g.t.Fatalf("replica %d holds the file's lock for good", p.id)
			case <-time.After(time.Millisecond):
			}
		}
	}
}

// tryLock takes the fenced file's lock (fencefile's flock on path) if no
// one holds it.
func tryLock(t *testing.T, path string) (unlock func(), ok bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EWOULDBLOCK {
		f.Close()
		return nil, false
	}
	require.NoError(t, err)
	return func() { f.Close() }, true
}

func countEpoch(records []fencefile.Record, epoch uint64) int {
	n := 0
	for _, r := range records {
		if r.Token == epoch {
			n++
		}
	}
	return n
}

var primaryLine = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} primary: replica (\d+), epoch (\d+)$`)

type primary struct {
	id    int
	epoch uint64
}

// startThree builds the example and starts it three times, as one group
// with session TTL ttl writing to one resource, whose path it returns.
func startThree(t *testing.T, ttl time.Duration, flags ...string) (*group, string) {
	g := newGroup(t)
	g.bin = buildExample(t)
	dir := t.TempDir()
	peers := fencelocktest.Peers(t, 3)
	g.args = func(id int) []string {
		return append([]string{"-id", strconv.Itoa(id), "-peers", peers, "-dir", dir, "-ttl", ttl.String(), "-every", "100ms"}, flags...)
	}
	for id := 1; id <= 3; id++ {
		g.restart(id)
	}
	return g, filepath.Join(dir, "resource.log")
}

// startWithPrimary is startThree, and waits until a process announces it
// is primary and the resource holds three records under its epoch.
func startWithPrimary(t *testing.T, ctx context.Context, ttl time.Duration, flags ...string) (*group, string, primary) {
	g, resource := startThree(t, ttl, flags...)
	victim := g.waitPrimary(ctx, func(primary) bool { return true })
	waitRecords(t, ctx, resource, victim.epoch, 3)
	return g, resource, victim
}

// restart starts process id with the flags it was first started with.
func (g *group) restart(id int) { g.start(id, g.bin, g.args(id)...) }

// group runs the example's processes and collects their output.
type group struct {
	t       *testing.T
	bin     string             // the example, built
	args    func(int) []string // its flags, by replica ID
	mu      sync.Mutex
	procs   map[int]*fencelocktest.Proc
	lines   []string // stdout of every process, "N| line"
	primary []primary
	changed chan struct{} // closed and replaced on every line
}

func newGroup(t *testing.T) *group {
	g := &group{t: t, procs: map[int]*fencelocktest.Proc{}, changed: make(chan struct{})}
	t.Cleanup(g.cleanup)
	return g
}

func (g *group) start(id int, bin string, args ...string) {
	p := fencelocktest.StartProc(g.t, func(text string) { g.line(id, text) }, bin, args...)
	g.mu.Lock()
	g.procs[id] = p
	g.mu.Unlock()
}

func (g *group) line(id int, text string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lines = append(g.lines, fmt.Sprintf("%d| %s", id, text))
	defer func() { // every line wakes the waiters
		close(g.changed)
		g.changed = make(chan struct{})
	}()
	m := primaryLine.FindStringSubmatch(text)
	if m == nil {
		return
	}
	n, _ := strconv.Atoi(m[1])
	epoch, _ := strconv.ParseUint(m[2], 10, 64)
	if n != id {
		g.t.Errorf("process %d announced %q", id, text)
	}
	g.primary = append(g.primary, primary{n, epoch})
}

// waitPrimary waits for a primary announcement that satisfies ok, among
// those after the first skip[0] (if given).
func (g *group) waitPrimary(ctx context.Context, ok func(primary) bool, skip ...int) primary {
	g.t.Helper()
	seen := 0
	if len(skip) > 0 {
		seen = skip[0]
	}
	for {
		g.mu.Lock()
		found, changed := g.primary[seen:], g.changed
		seen = len(g.primary)
		g.mu.Unlock()
		for _, p := range found {
			if ok(p) {
				return p
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			g.t.Fatalf("no primary as expected: %v", ctx.Err())
		}
	}
}

// count is how many primaries were announced so far.
func (g *group) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.primary)
}

// waitLine waits until process id has printed a line matching re.
func (g *group) waitLine(ctx context.Context, id int, re *regexp.Regexp) {
	g.t.Helper()
	prefix := fmt.Sprintf("%d| ", id)
	for {
		g.mu.Lock()
		changed := g.changed
		for _, l := range g.lines {
			if strings.HasPrefix(l, prefix) && re.MatchString(l) {
				g.mu.Unlock()
				return
			}
		}
		g.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			g.t.Fatalf("replica %d never printed %q", id, re)
		}
	}
}

func (g *group) latestPrimary() primary {
	g.mu.Lock()
	defer g.mu.Unlock()
	latest := g.primary[0]
	for _, p := range g.primary {
		if p.epoch > latest.epoch {
			latest = p
		}
	}
	return latest
}

// epochs maps each announced epoch to its primary.
func (g *group) epochs() map[uint64]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := map[uint64]int{}
	for _, p := range g.primary {
		m[p.epoch] = p.id
	}
	return m
}

// kill sends SIGKILL to process id and waits for it to die.
func (g *group) kill(id int) {
	require.NoError(g.t, g.procs[id].Kill())
}

// terminate sends SIGTERM to process id and requires a clean exit.
func (g *group) terminate(ctx context.Context, id int) {
	g.t.Helper()
	g.procs[id].Terminate(g.t, ctx, fmt.Sprintf("replica %d", id))
}

// cleanup kills whatever still runs, and shows the output of a failed run.
func (g *group) cleanup() {
	for _, p := range g.procs {
		_ = p.Kill() // fails for one that has exited
	}
	if !g.t.Failed() {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.t.Logf("stdout:\n%s", strings.Join(g.lines, "\n"))
	for id, p := range g.procs {
		g.t.Logf("stderr of replica %d:\n%s", id, p.Stderr.String())
	}
}

// waitRecords polls the resource, for which no channel exists, until it
// holds n records under epoch.
func waitRecords(t *testing.T, ctx context.Context, path string, epoch uint64, n int) {
	t.Helper()
	for {
		records, err := fencefile.Read(path)
		require.NoError(t, err)
		count := 0
		for _, r := range records {
			if r.Token == epoch {
				count++
			}
		}
		if count >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the resource has %d records under epoch %d, want %d", count, epoch, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// buildExample builds this package into a temporary binary, with -race when
// the test runs with it (its packages are then already compiled).
func buildExample(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "election")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command(goTool, append(args, ".")...).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}
