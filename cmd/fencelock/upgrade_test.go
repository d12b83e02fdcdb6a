package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	apiclient "github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fencelocktest"
)

// releasedRevision is the last released revision of this repository: log
// version 8, snapshot version 6, and no version gate. Its replicas
// announce nothing of what they read, and skip an entry of a newer log
// version as corrupt.
const releasedRevision = "b096aa6"

// handoverBound is the longest the group may go without granting a lock
// while one replica restarts: a leader's handover, or an election, with
// room for a loaded machine. A longer stall is a failure.
const handoverBound = 10 * time.Second

// TestRollingUpgradeAcrossLogVersions upgrades a three-replica deployment
// (the default group and a named one, every replica a voter of both) from
// the released build to this one, one replica at a time as
// docs/operations.md says (SIGTERM, then the new binary on the same Dir and
// flags, ready before the next), while clients acquire and release locks
// through every replica. It checks that:
//
//   - no lock is ever held by two clients, every grant's fencing token is
//     above every earlier one of its lock, and no held lock or session is
//     lost;
//   - the group never goes longer than handoverBound without a grant;
//   - no replica of the old build exits but when stopped, and each exits 0;
//   - every group writes log version 8 (snapshots 6) while any replica runs
//     the old build, and 10 (8, what this build reads) once the last one is upgraded;
//   - the old build started on a copy of an upgraded replica's Dir refuses
//     it at its start, before it replays a log it cannot read (it checks no
//     versions: the Dir's identity file, version 2 once the gate rose,
//     refuses it; TestReleasedBuildRefusesAnUpgradedDir shows what it
//     would do otherwise).
//
// A command that needs version 9 fails with ErrVersionGated while the
// group writes 8: no public call needs version 9 yet, so the root's
// TestVersionGate checks that in process.
func TestRollingUpgradeAcrossLogVersions(t *testing.T) {
	oldBin := buildRevision(t, releasedRevision)
	newBin := binary(t)
	c := fencelocktest.StartServeBinary(t, oldBin, "--group", "jobs=1,2,3")
	ids := []uint64{1, 2, 3}
	urls := make([]string, len(ids))
	for i, id := range ids {
		urls[i] = c.URLs[id]
	}
	for _, id := range ids {
		st := status(t, c.URLs[id])
		require.Equal(t, 8, st.Version.Codec, "replica %d runs the released build", id)
		require.Zero(t, st.Writes, "a build before the gate reports none")
	}

	// Every exit of a replica's process must be one the test asked for.
	var crashes []string
	var crashMu sync.Mutex
	watch := func(id uint64, build string) {
		done, byStop := c.Exited(id)
		go func() {
			<-done
			if !byStop() {
				crashMu.Lock()
				crashes = append(crashes, fmt.Sprintf("replica %d (%s build) exited on its own:\n%s", id, build, c.Logs(id)))
				crashMu.Unlock()
			}
		}()
	}
	for _, id := range ids {
		watch(id, "old")
	}

	// What the upgraded replicas say each group writes, polled all along:
	// 8 as long as an old replica runs.
	var (
		newBuild sync.Map    // replica ID -> true once it runs the new build
		allNew   atomic.Bool // set before the last new process starts
		gateMu   sync.Mutex
		gateErrs []string
		seen     = map[string]int{} // "replica/group" -> log version last reported
	)
	pollCtx, stopPoll := context.WithCancel(context.Background())
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		hc := &http.Client{Timeout: 2 * time.Second}
		for pollCtx.Err() == nil {
			for _, id := range ids {
				if _, ok := newBuild.Load(id); !ok {
					continue
				}
				mixed := !allNew.Load()
				st, err := statusOf(hc, c.URLs[id])
				if err != nil {
					continue // stopping, starting
				}
				gateMu.Lock()
				for _, g := range append([]apiclient.GroupStatus{{Name: "", Writes: st.Writes}}, st.Groups...) {
					seen[fmt.Sprintf("%d/%s", id, g.Name)] = g.Writes.Codec
					if mixed && g.Writes != (apiclient.Formats{Codec: 8, Snapshot: 6}) {
						gateErrs = append(gateErrs, fmt.Sprintf("replica %d: group %q writes %+v while an old replica runs", id, g.Name, g.Writes))
					}
				}
				gateMu.Unlock()
			}
			select {
			case <-pollCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() { stopPoll(); <-polled }()

	load := startLoad(t, urls, []string{"upgrade/a", "upgrade/b", "upgrade/c@jobs", "upgrade/d@jobs"}, 6)
	defer load.stop()
	load.waitGrants(t, 30)

	for k, id := range ids {
		last := k == len(ids)-1
		t.Logf("upgrading replica %d (leader %d)", id, status(t, c.URLs[ids[(k+1)%len(ids)]]).LeaderID)
		require.Equal(t, 0, c.Stop(id, syscall.SIGTERM), "replica %d exits 0 on SIGTERM:\n%s", id, c.Logs(id))
		load.waitGrants(t, 10) // served by the others meanwhile
		c.SetBinary(id, newBin)
		if last {
			allNew.Store(true)
		}
		c.Run(id)
		watch(id, "new")
		c.WaitReady(id)
		newBuild.Store(id, true)
		load.waitGrants(t, 20)
		sameState(t, load, c.URLs, []string{"", "jobs"})
		if !last {
			for _, u := range ids[:k+1] {
				st := status(t, c.URLs[u])
				require.Equal(t, apiclient.Formats{Codec: 8, Snapshot: 6}, st.Writes, "replica %d, with an old replica running", u)
			}
		}
	}
	// Every replica reads version 11 (snapshots 9): each group's leader
	// raises its gate, from 8 straight to 11.
	require.Eventually(t, func() bool {
		for _, id := range ids {
			st := status(t, c.URLs[id])
			for _, g := range append([]apiclient.GroupStatus{{Writes: st.Writes}}, st.Groups...) {
				if g.Writes != (apiclient.Formats{Codec: 11, Snapshot: 9}) {
					return false
				}
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "every group writes version 11 once every replica reads it")
	load.waitGrants(t, 20) // and goes on at version 11
	sameState(t, load, c.URLs, []string{"", "jobs"})

	// The old build on a copy of replica 3's Dir (the Dir itself stays
	// this build's) refuses it at once: it exits with an error naming the
	// identity file, and the others go on.
	require.Equal(t, 0, c.Stop(3, syscall.SIGTERM))
	args := c.Args(3)
	dirAt := slices.Index(args, "--dir") + 1
	copyDir := filepath.Join(t.TempDir(), "3-copy")
	require.NoError(t, os.CopyFS(copyDir, os.DirFS(args[dirAt])))
	args[dirAt] = copyDir
	downgraded := exec.Command(oldBin, args...)
	var oldLog fencelocktest.LockedBuffer
	downgraded.Stdout, downgraded.Stderr = &oldLog, &oldLog
	require.NoError(t, downgraded.Start())
	downDone := make(chan error, 1)
	go func() { downDone <- downgraded.Wait() }()
	select {
	case err := <-downDone:
		require.Error(t, err, "the downgraded replica exits with an error:\n%s", &oldLog)
		require.Contains(t, oldLog.String(), "fencelock-group.json", "naming the file that refused it")
	case <-time.After(30 * time.Second):
		_ = downgraded.Process.Signal(syscall.SIGKILL)
		<-downDone
		t.Fatalf("the old build runs on an upgraded Dir:\n%s", &oldLog)
	}
	load.waitGrants(t, 10) // the others go on
	c.Run(3)
	watch(3, "new")
	c.WaitReady(3)
	load.waitGrants(t, 10)

	grants, gap, failures := load.stop()
	stopPoll()
	<-polled
	t.Logf("%d grants; longest time without one: %v; versions last reported: %v", grants, gap.Round(time.Millisecond), seen)
	for _, f := range failures {
		t.Error(f)
	}
	require.Less(t, gap, handoverBound, "the longest stall")
	gateMu.Lock()
	for _, e := range gateErrs {
		t.Error(e)
	}
	gateMu.Unlock()
	crashMu.Lock()
	for _, e := range crashes {
		t.Error(e)
	}
	crashMu.Unlock()
}

// buildRevision builds ./cmd/fencelock of revision rev of this repository
// (from git: the test needs the repository's history, as CI's full clone
// has it) and returns the binary's path.
func buildRevision(t *testing.T, rev string) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed to build revision %s of this repository: %v", rev, err)
	}
	top, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("not in a git checkout of this repository (git rev-parse: %v): the test builds revision %s from its history", err, rev)
	}
	src := t.TempDir()
	archive := exec.Command(git, "-C", strings.TrimSpace(string(top)), "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	require.NoError(t, err)
	untar.Stdin = pipe
	var errs strings.Builder
	archive.Stderr, untar.Stderr = &errs, &errs
	require.NoError(t, untar.Start())
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s (a shallow clone lacks it: fetch the history): %v\n%s", rev, err, &errs)
	}
	require.NoError(t, untar.Wait(), errs.String())
	bin := filepath.Join(t.TempDir(), "fencelock-"+rev)
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "./cmd/fencelock")
	build.Dir = src
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of revision %s: %v\n%s", rev, err, out)
	}
	return bin
}

// sameState pauses the load, has each replica take a probe lock in every
// group (through that replica alone, so that it writes the entry), and
// requires every replica to show the same state of each group: the probe
// locks held with their tokens and no other lock of the load's (every
// worker released its own), and the same sessions, each holding and
// waiting for as many locks. Each replica answers from its own copy of
// the state (a linearizable read through it): one that skipped an entry of
// a version it cannot read shows another state.
func sameState(t *testing.T, l *lockLoad, urls map[uint64]string, groups []string) {
	t.Helper()
	l.pause(t)
	defer l.resume()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := []uint64{1, 2, 3}
	clients := map[uint64]*apiclient.Client{}
	for _, id := range ids {
		c, err := apiclient.New(ctx, apiclient.Config{Endpoints: []string{urls[id]}})
		require.NoError(t, err)
		defer c.Close()
		clients[id] = c
	}
	want := map[string][]string{} // group -> "name token" of its probes
	var probes []*apiclient.Lock
	for _, id := range ids {
		s, err := clients[id].NewSession(ctx, fencelock.WithTTL(10*time.Second), fencelock.WithSessionName(fmt.Sprintf("probe-%d", id)))
		require.NoError(t, err, "a session through replica %d", id)
		defer s.Close(ctx)
		for _, g := range groups {
			name := fmt.Sprintf("upgrade/probe-%d", id)
			if g != "" {
				name += "@" + g
			}
			lk, err := s.TryAcquire(ctx, name)
			require.NoError(t, err, "%s through replica %d", name, id)
			probes = append(probes, lk)
			want[g] = append(want[g], fmt.Sprintf("%s %d", name, lk.Token()))
		}
	}
	for _, g := range groups {
		var first string
		for _, id := range ids {
			locks, err := clients[id].Locks(ctx, "upgrade/", g)
			require.NoError(t, err, "replica %d, group %q", id, g)
			var held []string
			for _, lk := range locks.Locks {
				if lk.Group == g { // the default group's listing lists every group's
					held = append(held, fmt.Sprintf("%s %d", lk.Name, lk.FencingToken))
				}
			}
			require.Equal(t, want[g], held, "replica %d, group %q: the probes, and no other lock", id, g)
			sessions, err := clients[id].Sessions(ctx, g)
			require.NoError(t, err, "replica %d, group %q", id, g)
			var view []string
			for _, s := range sessions.Sessions {
				// Each by its part's ID in g: the old build shows it as
				// session_id (it had no part_id), this one as part_id, with
				// session_id 0 for a part opened before the group wrote
				// log version 10 (the root's TestGroupsViewsAcrossTheGate
				// checks what each shows).
				part := s.PartID
				if part == 0 {
					part = s.SessionID
				}
				view = append(view, fmt.Sprintf("%v %q owner %d held %d waiting %d", part, s.Name, s.Owner, s.Held, s.Waiting))
			}
			if first == "" {
				first = strings.Join(view, "\n")
				continue
			}
			require.Equal(t, first, strings.Join(view, "\n"), "group %q: replica %d's sessions and replica 1's", g, id)
		}
	}
	for _, lk := range probes {
		require.NoError(t, lk.Release(ctx))
	}
}

func status(t *testing.T, url string) apiclient.ReplicaStatus {
	t.Helper()
	st, err := statusOf(hc, url)
	require.NoError(t, err)
	return st
}

func statusOf(hc *http.Client, url string) (apiclient.ReplicaStatus, error) {
	var st apiclient.ReplicaStatus
	resp, err := hc.Get(url + "/v1/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s/v1/status: %s", url, resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// lockLoad is clients acquiring and releasing locks through a deployment's
// replicas, each through its own Go client (which fails over between
// them), checking every grant against what the others hold.
type lockLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	paused   chan struct{}     // closed by resume; nil while running
	active   int               // workers between an acquire and its release
	holder   map[string]int    // lock -> worker holding it by the clients' account; absent: none
	token    map[string]uint64 // lock -> the highest token granted
	grants   int
	last     time.Time
	gap      time.Duration // the longest time without a grant
	failures []string
	grew     chan struct{} // closed and replaced at each grant
}

// startLoad starts workers clients, each with every endpoint (in its own
// order), a session of 10 s and a loop: acquire one of names, hold it a
// few milliseconds, release it.
func startLoad(t *testing.T, endpoints, names []string, workers int) *lockLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &lockLoad{cancel: cancel, holder: map[string]int{}, token: map[string]uint64{}, last: time.Now(), grew: make(chan struct{})}
	for w := range workers {
		order := append(slices.Clone(endpoints[w%len(endpoints):]), endpoints[:w%len(endpoints)]...)
		c, err := apiclient.New(ctx, apiclient.Config{Endpoints: order, AttemptTimeout: 2 * time.Second})
		require.NoError(t, err)
		s, err := c.NewSession(ctx, fencelock.WithTTL(10*time.Second), fencelock.WithSessionName(fmt.Sprintf("upgrade-worker-%d", w)))
		require.NoError(t, err)
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer c.Close()
			l.work(ctx, w, s, names)
		}()
	}
	return l
}

func (l *lockLoad) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failures = append(l.failures, fmt.Sprintf(format, args...))
}

func (l *lockLoad) work(ctx context.Context, w int, s *apiclient.Session, names []string) {
	rng := rand.New(rand.NewPCG(uint64(w), 37))
	for ctx.Err() == nil {
		if !l.begin(ctx) {
			return
		}
		l.once(ctx, w, s, names[rng.IntN(len(names))], time.Duration(2+rng.IntN(10))*time.Millisecond)
		l.mu.Lock()
		l.active--
		l.mu.Unlock()
	}
}

// begin waits while the load is paused, then counts the worker active.
func (l *lockLoad) begin(ctx context.Context) bool {
	for {
		l.mu.Lock()
		p := l.paused
		if p == nil {
			l.active++
			l.mu.Unlock()
			return true
		}
		l.mu.Unlock()
		select {
		case <-p:
		case <-ctx.Done():
			return false
		}
	}
}

// pause stops the workers from acquiring, and returns once none holds or
// waits for a lock.
func (l *lockLoad) pause(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	l.paused = make(chan struct{})
	l.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		l.mu.Lock()
		active, failures := l.active, slices.Clone(l.failures)
		l.mu.Unlock()
		switch {
		case len(failures) > 0:
			t.Fatalf("the load failed: %s", strings.Join(failures, "; "))
		case active == 0:
			return
		case time.Now().After(deadline):
			t.Fatalf("%d workers' calls still in flight after a minute", active)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// resume lets the workers go on; the pause does not count as a stall.
func (l *lockLoad) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.paused)
	l.paused, l.last = nil, time.Now()
}

// once acquires name, holds it for hold and releases it; a failure ends
// the worker (the test fails with it).
func (l *lockLoad) once(ctx context.Context, w int, s *apiclient.Session, name string, hold time.Duration) {
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	lk, err := s.Acquire(actx, name)
	cancel()
	if err != nil {
		if serr := s.Err(); serr != nil && ctx.Err() == nil {
			l.fail("worker %d: its session ended: %v", w, serr)
			<-ctx.Done()
		}
		return // a call that gave up (a restart in its way): the next one goes
	}
	l.granted(w, name, lk.Token())
	select {
	case <-time.After(hold):
	case <-lk.Done():
	}
	if err := lk.Err(); err != nil {
		l.fail("worker %d: lock %s (token %d) lost while held: %v", w, name, lk.Token(), err)
		<-ctx.Done()
		return
	}
	l.released(w, name)
	rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	err = lk.Release(rctx)
	cancel()
	if err != nil {
		l.fail("worker %d: release of %s (token %d): %v", w, name, lk.Token(), err)
		<-ctx.Done()
	}
}

// granted checks a grant: nobody else holds the lock, and its token is
// above every earlier one.
func (l *lockLoad) granted(w int, name string, token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if other, held := l.holder[name]; held {
		l.failures = append(l.failures, fmt.Sprintf("lock %s granted to worker %d (token %d) while worker %d holds it", name, w, token, other))
	}
	if token <= l.token[name] {
		l.failures = append(l.failures, fmt.Sprintf("lock %s granted with token %d after token %d", name, token, l.token[name]))
	}
	l.holder[name], l.token[name] = w, max(token, l.token[name])
	now := time.Now()
	l.gap = max(l.gap, now.Sub(l.last))
	l.last = now
	l.grants++
	close(l.grew)
	l.grew = make(chan struct{})
}

// released notes a holder about to release: from then on the lock may be
// granted to another.
func (l *lockLoad) released(w int, name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.holder[name] != w {
		l.failures = append(l.failures, fmt.Sprintf("worker %d releases %s, which worker %d holds", w, name, l.holder[name]))
	}
	delete(l.holder, name)
}

// waitGrants waits for n more grants, failing the test after a minute.
func (l *lockLoad) waitGrants(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	want := l.grants + n
	l.mu.Unlock()
	deadline := time.After(time.Minute)
	for {
		l.mu.Lock()
		got, grew, failures := l.grants, l.grew, slices.Clone(l.failures)
		l.mu.Unlock()
		if len(failures) > 0 {
			t.Fatalf("the load failed: %s", strings.Join(failures, "; "))
		}
		if got >= want {
			return
		}
		select {
		case <-grew:
		case <-deadline:
			t.Fatalf("%d grants in a minute, want %d", got-(want-n), n)
		}
	}
}

// stop ends the load and returns the grants made, the longest time the
// group went without one (up to now), and what failed.
func (l *lockLoad) stop() (grants int, gap time.Duration, failures []string) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grants, l.gap, l.failures
}
