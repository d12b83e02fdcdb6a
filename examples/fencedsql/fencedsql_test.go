//go:build unix

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
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

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencehttp"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/fencesql"
)

const (
	ttl = time.Second
	// slack covers what follows a TTL before a successor is elected: a raft
	// election if the stopped or killed process led the raft group (the new
	// raft leader then gives every session a full TTL), the expiry proposal,
	// and a loaded CI machine.
	slack = 8 * time.Second
	// stops is how many times a primary is stopped past its TTL and woken
	// the moment its successor is elected.
	stops = 3
)

// database is where one test's processes keep the table: a fresh SQLite
// file, or a fresh PostgreSQL database on the server the CI provides.
type database struct {
	flag    []string // the example's flags that select it
	driver  string
	dsn     string
	dialect fencesql.Dialect
}

func sqliteDatabase(t *testing.T) database {
	path := filepath.Join(t.TempDir(), "app.db")
	return database{flag: []string{"-db", path}, driver: "sqlite", dialect: fencesql.SQLite,
		dsn: "file:" + path + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate"}
}

// postgresDatabase creates a database of its own on the server that
// FENCELOCK_TEST_POSTGRES_DSN names (.ci/postgres.sh starts one), since the
// example's table names are fixed; it skips without a server, except in CI.
func postgresDatabase(t *testing.T) database {
	const env = "FENCELOCK_TEST_POSTGRES_DSN"
	dsn := os.Getenv(env)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal(env + " not set in CI")
		}
		t.Skip(env + " not set; .ci/postgres.sh starts a server and sets it")
	}
	admin, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close() })
	name := fmt.Sprintf("fencedsql_%08x", rand.Uint32())
	_, err = admin.Exec("CREATE DATABASE " + name)
	require.NoError(t, err)
	t.Cleanup(func() { // after the group's cleanup, registered later, has killed the processes
		if _, err := admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("dropping database %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Path = "/" + name
	return database{flag: []string{"-postgres", u.String()}, driver: "pgx", dsn: u.String(), dialect: fencesql.Postgres}
}

// forEachDatabase runs test once on each database, each run given two
// minutes (ctx).
func forEachDatabase(t *testing.T, test func(t *testing.T, ctx context.Context, db database)) {
	run := func(t *testing.T, db database) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		test(t, ctx, db)
	}
	t.Run("sqlite", func(t *testing.T) { run(t, sqliteDatabase(t)) })
	t.Run("postgres", func(t *testing.T) { run(t, postgresDatabase(t)) })
}

// Three OS processes elect a primary that writes rows through the fence. The
// primary is stopped with SIGSTOP past its TTL and woken with SIGCONT the
// moment its successor is elected, several times; then the primary is
// killed with SIGKILL. No row of a deposed primary was admitted after its
// successor was elected: in commit order epochs never go back, and no row
// carries a write time later than the election of a higher epoch. Every
// woken primary stepped down, and any write it attempted was refused.
func TestPrimaryStoppedOrKilledWritesNothingLate(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, ctx context.Context, db database) {
		g := startGroup(t, db, "-every", "50ms")
		p := g.wait(ctx, func(e event) bool { return e.kind == "primary" })
		g.waitRows(ctx, p.epoch, 3)

		for range stops {
			victim := g.latest("primary")
			g.waitRows(ctx, victim.epoch, 3)
			g.signal(victim.id, syscall.SIGSTOP)
			stopped := time.Now()
			deadline, stop := context.WithTimeout(ctx, ttl+slack)
			next := g.wait(deadline, func(e event) bool { return e.kind == "elected" && e.epoch > victim.epoch })
			stop()
			g.signal(victim.id, syscall.SIGCONT)
			woke := g.wait(ctx, func(e event) bool {
				return e.id == victim.id && e.epoch == victim.epoch && (e.kind == "stepped down" || e.kind == "write refused")
			})
			t.Logf("replica %d (epoch %d) stopped; replica %d elected with epoch %d after %v; woken, it said %q",
				victim.id, victim.epoch, next.id, next.epoch, time.Since(stopped).Round(time.Millisecond), woke.text)
			g.wait(ctx, func(e event) bool { return e.kind == "primary" && e.epoch == next.epoch })
			g.waitRows(ctx, next.epoch, 3)
		}

		victim := g.latest("primary")
		g.kill(victim.id)
		killed := time.Now()
		deadline, stop := context.WithTimeout(ctx, ttl+slack)
		next := g.wait(deadline, func(e event) bool { return e.kind == "primary" && e.epoch > victim.epoch })
		stop()
		t.Logf("replica %d (epoch %d) killed; replica %d claimed epoch %d after %v",
			victim.id, victim.epoch, next.id, next.epoch, time.Since(killed).Round(time.Millisecond))
		g.waitRows(ctx, next.epoch, 3)
		g.terminateAll(ctx)

		rows := g.rows(ctx)
		elected := g.events("elected")
		byEpoch := map[uint64]event{}
		for _, e := range elected {
			byEpoch[e.epoch] = e
		}
		for i, r := range rows {
			if i > 0 {
				require.GreaterOrEqual(t, r.epoch, rows[i-1].epoch, "row %d (%+v) goes back in epoch after %+v", i, r, rows[i-1])
			}
			e, ok := byEpoch[r.epoch]
			require.True(t, ok, "row %+v under an epoch no process was elected with", r)
			require.Equal(t, e.id, r.replica, "row %+v not written by its epoch's primary", r)
			for _, later := range elected {
				if later.epoch > r.epoch {
					require.Less(t, r.writtenAt, later.at,
						"row %+v of epoch %d was written after epoch %d was elected", r, r.epoch, later.epoch)
				}
			}
		}
		var rechecked, fenced, idle int
		for _, e := range g.events("write refused") {
			if strings.Contains(e.text, "stale fencing token") {
				fenced++
			} else {
				rechecked++
			}
		}
		idle = len(g.events("stepped down"))
		t.Logf("%d rows from %d terms; deposed primaries: %d stepped down at Done, %d writes refused by their own re-check, %d by the table's fence",
			len(rows), len(elected), idle, rechecked, fenced)
	})
}

// Claim at grant: the successor of a killed primary claims its epoch as soon
// as it is elected, and from then on the dead primary's epoch is refused, on
// SQL (ErrStaleToken) and over HTTP (409 Conflict), though the successor has
// not written a row. The processes' own job is slowed down to never write,
// so the only rows are the test's.
func TestClaimAtGrantRefusesDeposedPrimaryBeforeSuccessorWrites(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, ctx context.Context, db database) {
		g := startGroup(t, db, "-every", "1h")
		p := g.wait(ctx, func(e event) bool { return e.kind == "primary" })
		other := p.id%3 + 1
		code, _ := g.post(ctx, other, p.epoch, 1) // the primary's write, made over HTTP
		require.Equal(t, http.StatusOK, code)

		g.kill(p.id)
		next := g.wait(ctx, func(e event) bool { return e.kind == "primary" && e.epoch > p.epoch })
		t.Logf("replica %d (epoch %d) killed; replica %d claimed epoch %d", p.id, p.epoch, next.id, next.epoch)

		// The dead primary's late writes, as one that paused after its last
		// check would make them.
		code, body := g.post(ctx, next.id, p.epoch, 2)
		require.Equal(t, http.StatusConflict, code)
		require.Equal(t, map[string]string{"error": "stale fencing token", "code": "stale_token", "resource": table,
			"token": strconv.FormatUint(p.epoch, 10), "highest": strconv.FormatUint(next.epoch, 10)}, body)
		conn, err := sql.Open(db.driver, db.dsn)
		require.NoError(t, err)
		defer conn.Close()
		fences, err := fencesql.Open(ctx, conn, db.dialect, "fencing_tokens")
		require.NoError(t, err)
		ran := false
		err = fences.DoFence(ctx, table, g.fence(ctx, p.epoch), func(tx *sql.Tx) error { ran = true; return nil })
		require.ErrorIs(t, err, fencelock.ErrStaleToken)
		require.False(t, ran)

		rows := g.rows(ctx)
		require.Len(t, rows, 1, "only the first primary's write landed; its successor has not written")
		require.Equal(t, p.epoch, rows[0].epoch)
		g.terminateAll(ctx)
	})
}

// The example's output lines the tests follow.
var (
	lineRE    = regexp.MustCompile(`^(elected|primary|stepped down|write refused|write failed|claim failed): replica (\d+), epoch (\d+)`)
	atRE      = regexp.MustCompile(`, at (\d+)$`)
	startedRE = regexp.MustCompile(`^replica (\d+): started, http on (\S+)$`)
)

type event struct {
	id    int
	kind  string
	epoch uint64
	at    int64 // elected: when, in Unix nanoseconds
	text  string
}

type row struct {
	id, replica int
	epoch       uint64
	seq         int
	writtenAt   int64
}

// group runs the example's three processes and collects their output.
type group struct {
	t       *testing.T
	db      database
	mu      sync.Mutex
	procs   map[int]*fencelocktest.Proc
	http    map[int]string
	lines   []string // stdout of every process, "N| line"
	evs     []event
	changed chan struct{} // closed and replaced on every event
	sql     *sql.DB
}

func startGroup(t *testing.T, db database, args ...string) *group {
	t.Helper()
	bin := buildExample(t)
	g := &group{t: t, db: db, procs: map[int]*fencelocktest.Proc{}, http: map[int]string{}, changed: make(chan struct{})}
	t.Cleanup(g.cleanup)
	var err error
	g.sql, err = sql.Open(db.driver, db.dsn)
	require.NoError(t, err)
	peers := fencelocktest.Peers(t, 3)
	for id := 1; id <= 3; id++ {
		g.procs[id] = fencelocktest.StartProc(t, func(text string) { g.line(id, text) }, bin, append(append([]string{"-id", strconv.Itoa(id), "-peers", peers,
			"-dir", t.TempDir(), "-http", "127.0.0.1:0", "-ttl", ttl.String()}, db.flag...), args...)...)
	}
	return g
}

func (g *group) line(id int, text string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lines = append(g.lines, fmt.Sprintf("%d| %s", id, text))
	if m := startedRE.FindStringSubmatch(text); m != nil {
		g.http[id] = m[2]
		m = []string{text, "started", m[1], "0"}
		g.event(id, m, text)
		return
	}
	if m := lineRE.FindStringSubmatch(text); m != nil {
		g.event(id, m, text)
	}
}

// event records an event of process id (g.mu held); m is its line's match.
func (g *group) event(id int, m []string, text string) {
	n, _ := strconv.Atoi(m[2])
	if n != id {
		g.t.Errorf("process %d said %q", id, text)
	}
	e := event{id: id, kind: m[1], text: text}
	e.epoch, _ = strconv.ParseUint(m[3], 10, 64)
	if a := atRE.FindStringSubmatch(text); a != nil {
		e.at, _ = strconv.ParseInt(a[1], 10, 64)
	}
	g.evs = append(g.evs, e)
	close(g.changed)
	g.changed = make(chan struct{})
}

// wait waits for an event that satisfies ok, among those so far or to come.
func (g *group) wait(ctx context.Context, ok func(event) bool) event {
	g.t.Helper()
	seen := 0
	for {
		g.mu.Lock()
		found, changed := g.evs[seen:], g.changed
		seen = len(g.evs)
		g.mu.Unlock()
		for _, e := range found {
			if ok(e) {
				return e
			}
		}
		select {
		case <-changed:
		case <-ctx.Done():
			g.t.Fatalf("no event as expected: %v", ctx.Err())
		}
	}
}

func (g *group) events(kind string) []event {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []event
	for _, e := range g.evs {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// latest returns the event of kind with the highest epoch.
func (g *group) latest(kind string) event {
	var latest event
	for _, e := range g.events(kind) {
		if e.epoch > latest.epoch {
			latest = e
		}
	}
	return latest
}

func (g *group) signal(id int, sig syscall.Signal) {
	require.NoError(g.t, g.procs[id].Cmd.Process.Signal(sig))
}

// kill sends SIGKILL to process id and waits for it to die.
func (g *group) kill(id int) {
	require.NoError(g.t, g.procs[id].Kill())
}

// terminateAll sends SIGTERM to the live processes and requires clean exits.
func (g *group) terminateAll(ctx context.Context) {
	g.t.Helper()
	for id, p := range g.procs {
		select {
		case <-p.Exited():
			continue // killed
		default:
		}
		p.Terminate(g.t, ctx, fmt.Sprintf("replica %d", id))
	}
}

// post sends a row under epoch to process id's HTTP endpoint.
func (g *group) post(ctx context.Context, id int, epoch uint64, seq int) (int, map[string]string) {
	g.t.Helper()
	g.wait(ctx, func(e event) bool { return e.kind == "started" && e.id == id })
	g.mu.Lock()
	addr := g.http[id]
	g.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, "POST", fmt.Sprintf("http://%s/job_runs?seq=%d", addr, seq), nil)
	require.NoError(g.t, err)
	if f := g.fence(ctx, epoch); f.Group != 0 {
		req.Header.Set(fencehttp.Header, f.String())
	} else {
		req.Header.Set(fencehttp.Header, strconv.FormatUint(epoch, 10))
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	require.NoError(g.t, err)
	defer resp.Body.Close()
	var body map[string]string
	if resp.Header.Get("Content-Type") == "application/json" {
		require.NoError(g.t, json.NewDecoder(resp.Body).Decode(&body))
	}
	return resp.StatusCode, body
}

// fence returns epoch as a fence of the group the table's mark is keyed to
// (by the primaries' claims; 0 while unkeyed): a keyed resource refuses a
// bare token as of no group, and the group's holders send their fence.
func (g *group) fence(ctx context.Context, epoch uint64) fencelock.Fence {
	g.t.Helper()
	var grp int64
	err := g.sql.QueryRowContext(ctx, `SELECT grp FROM fencing_tokens WHERE resource = '`+table+`'`).Scan(&grp)
	if !errors.Is(err, sql.ErrNoRows) {
		require.NoError(g.t, err)
	}
	return fencelock.Fence{Group: uint64(grp), Token: epoch}
}

// rows returns the table in commit order: every write goes through the
// fence, which orders a resource's transactions, so ids rise with commits.
func (g *group) rows(ctx context.Context) []row {
	g.t.Helper()
	rs, err := g.sql.QueryContext(ctx, `SELECT id, epoch, replica, seq, written_at FROM job_runs ORDER BY id`)
	require.NoError(g.t, err)
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var epoch int64
		require.NoError(g.t, rs.Scan(&r.id, &epoch, &r.replica, &r.seq, &r.writtenAt))
		r.epoch = uint64(epoch)
		out = append(out, r)
	}
	require.NoError(g.t, rs.Err())
	return out
}

// waitRows polls the table, for which no channel exists, until it holds n
// rows under epoch.
func (g *group) waitRows(ctx context.Context, epoch uint64, n int) {
	g.t.Helper()
	for {
		var count int
		err := g.sql.QueryRowContext(ctx, `SELECT COUNT(*) FROM job_runs WHERE epoch = `+strconv.FormatInt(int64(epoch), 10)).Scan(&count)
		if err == nil && count >= n {
			return
		}
		select {
		case <-ctx.Done():
			g.t.Fatalf("the table has %d rows under epoch %d, want %d (%v)", count, epoch, n, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cleanup kills whatever still runs, and shows the output of a failed run.
func (g *group) cleanup() {
	for _, p := range g.procs {
		p.Cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot die of SIGKILL until it runs
		_ = p.Kill()
	}
	if g.sql != nil {
		g.sql.Close()
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

var built struct {
	once sync.Once
	bin  string
	err  error
	out  []byte
}

// buildExample builds this package once into a temporary binary, with -race
// when the test runs with it (its packages are then already compiled).
func buildExample(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		afterTests = append(afterTests, func() {
			if built.bin != "" {
				os.RemoveAll(filepath.Dir(built.bin))
			}
		})
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		dir, err := os.MkdirTemp("", "fencedsql-test")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "fencedsql")
		args := []string{"build", "-o", built.bin}
		if raceEnabled {
			args = append(args, "-race")
		}
		built.out, built.err = exec.Command(goTool, append(args, ".")...).CombinedOutput()
	})
	require.NoError(t, built.err, "go build: %s", built.out)
	return built.bin
}
