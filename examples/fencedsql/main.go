// Command fencedsql is a replicated primary that writes to a SQL table
// through a fence: start it three times, the processes elect a primary, and
// the primary runs a periodic job that inserts rows into job_runs, each
// carrying the term's epoch (its fencing token).
//
//	go run ./examples/fencedsql -id 1 &
//	go run ./examples/fencedsql -id 2 &
//	go run ./examples/fencedsql -id 3 &
//
// The table lives in a SQLite file shared by the three processes (-db), or
// in PostgreSQL (-postgres DSN). Writes go through package fencesql, which
// checks and raises the table's highest admitted epoch in each write's own
// transaction, so a primary the group has deposed cannot commit once its
// successor's epoch has reached the table. The successor gets it there at
// once: as soon as it is elected it claims its epoch, before its first row.
//
// Every process also serves the table over HTTP (-http): POST /job_runs
// with a Fencing-Token header inserts a row under that epoch, and a stale
// epoch is answered with 409 Conflict (package fencehttp).
//
// kill -9 the primary, or kill -STOP it and kill -CONT it after the
// takeover: its successor's epoch is higher, and the old primary's writes
// are refused, by its own deadline check or by the table's fence.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	_ "modernc.org/sqlite"             // driver "sqlite", pure Go

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencehttp"
	"github.com/fencelock/fencelock/fencesql"
)

const (
	election = "fencedsql/primary"
	table    = "job_runs" // also the name of the fenced resource
)

func main() {
	id := flag.Uint64("id", 0, "this replica's ID, one of the -peers IDs (required)")
	peers := flag.String("peers", "1=127.0.0.1:7201,2=127.0.0.1:7202,3=127.0.0.1:7203", "the replicas: id=host:port,...")
	dir := flag.String("dir", "", "this replica's state directory (default <tmp>/fencelock-fencedsql/replica-<id>)")
	dbPath := flag.String("db", filepath.Join(os.TempDir(), "fencelock-fencedsql", "app.db"), "the shared SQLite file")
	postgres := flag.String("postgres", "", "a PostgreSQL DSN, used instead of -db")
	httpAddr := flag.String("http", "", "where to serve POST /job_runs (default 127.0.0.1:810<id>)")
	ttl := flag.Duration("ttl", 2*time.Second, "session TTL: how long a crashed primary keeps the role")
	every := flag.Duration("every", 250*time.Millisecond, "how often the primary's job writes a row")
	flag.Parse()
	members := map[uint64]string{}
	for _, p := range strings.Split(*peers, ",") {
		k, addr, _ := strings.Cut(p, "=")
		n, err := strconv.ParseUint(k, 10, 64)
		if err != nil || addr == "" {
			fail(fmt.Errorf("bad -peers entry %q: want id=host:port", p))
		}
		members[n] = addr
	}
	if *dir == "" {
		*dir = filepath.Join(os.TempDir(), "fencelock-fencedsql", fmt.Sprintf("replica-%d", *id))
	}
	if *httpAddr == "" {
		*httpAddr = fmt.Sprintf("127.0.0.1:%d", 8100+*id)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// The database: its driver, and the dialect fencesql writes it in.
	driver, dsn, dialect := "sqlite", "file:"+*dbPath+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate", fencesql.SQLite
	create := `CREATE TABLE IF NOT EXISTS job_runs (id INTEGER PRIMARY KEY AUTOINCREMENT,
		epoch BIGINT NOT NULL, replica BIGINT NOT NULL, seq BIGINT NOT NULL, written_at BIGINT NOT NULL)`
	insert := `INSERT INTO job_runs (epoch, replica, seq, written_at) VALUES (?, ?, ?, ?)`
	if *postgres != "" {
		driver, dsn, dialect = "pgx", *postgres, fencesql.Postgres
		create = strings.Replace(create, "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY", 1)
		insert = `INSERT INTO job_runs (epoch, replica, seq, written_at) VALUES ($1, $2, $3, $4)`
	} else if err := os.MkdirAll(filepath.Dir(*dbPath), 0o755); err != nil {
		fail(err)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		fail(err)
	}
	defer db.Close()
	// Processes starting together race to create the table: PostgreSQL then
	// fails all but one with a duplicate error, and a second try finds it.
	if _, err := db.ExecContext(ctx, create); err != nil {
		if _, err := db.ExecContext(ctx, create); err != nil {
			fail(err)
		}
	}
	fences, err := fencesql.Open(ctx, db, dialect, "fencing_tokens")
	if err != nil {
		fail(err)
	}
	// write inserts one row under epoch, in the same transaction that checks
	// and raises the table's mark. Epochs fit a BIGINT: they grow with the
	// raft log index (index × 2^16), far from 2^63.
	write := func(ctx context.Context, epoch, replica uint64, seq int) error {
		return fences.Do(ctx, table, epoch, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, insert, int64(epoch), int64(replica), seq, time.Now().UnixNano())
			return err
		})
	}

	// The table over HTTP: Middleware claims the request's fence (409 if
	// stale or of another group) and the handler writes with it, fenced
	// again in its transaction: a claim is not a barrier, so the write must
	// be checked where it lands. The fence keeps the request's group, which
	// the table (keyed to the group by the primary's claim) checks.
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		fail(err)
	}
	srv := &http.Server{Handler: fencehttp.Middleware(fences, func(*http.Request) string { return table },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fence, _ := fencehttp.Fence(r)
			seq, _ := strconv.Atoi(r.URL.Query().Get("seq"))
			err := fences.DoFence(r.Context(), table, fence, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(r.Context(), insert, int64(fence.Token), 0, seq, time.Now().UnixNano())
				return err
			})
			if errors.Is(err, fencelock.ErrStaleToken) || errors.Is(err, fencelock.ErrOtherGroup) {
				http.Error(w, err.Error(), http.StatusConflict)
			} else if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		}))}
	go srv.Serve(ln)
	defer srv.Close()

	node, err := fencelock.Start(ctx, fencelock.Config{ReplicaID: *id, Members: members, Dir: *dir, SessionTTL: *ttl,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		fail(err)
	}
	defer node.Close()
	say("replica %d: started, http on %s", *id, ln.Addr())

	for ctx.Err() == nil {
		session, err := node.NewSession(ctx, fencelock.WithTTL(*ttl))
		if err != nil {
			break // NewSession retries until ctx ends
		}
		for session.Err() == nil && ctx.Err() == nil {
			lead, err := session.Campaign(ctx, election, fmt.Sprintf("replica %d", *id))
			if err != nil {
				break
			}
			say("elected: replica %d, epoch %d, at %d", *id, lead.Token(), time.Now().UnixNano())
			serve(lead.Context(ctx), lead, *id, *every, fences, write)
			resigning, cancel := context.WithTimeout(context.Background(), *ttl)
			lead.Resign(resigning) // ErrNotLeader if the term is already over
			cancel()
		}
		closing, cancel := context.WithTimeout(context.Background(), *ttl)
		session.Close(closing)
		cancel()
	}
	say("replica %d: bye", *id)
}

// serve is the primary's job: claim the epoch at the table, then write a row
// every period until the term ends. lctx is the term's context: it ends
// with the term, and the fenced calls re-check the term's deadline just
// before they write, which a select waiting on Done cannot do for a process
// that wakes from a pause.
func serve(lctx context.Context, lead *fencelock.Leadership, id uint64, every time.Duration,
	fences *fencesql.Fencer, write func(context.Context, uint64, uint64, int) error) {
	epoch := lead.Token()
	// Claim at grant: from here on the table refuses every earlier epoch,
	// whether or not this primary ever writes.
	if err := fences.Claim(lctx, table, epoch); err != nil {
		say("claim failed: replica %d, epoch %d: %v", id, epoch, err)
		if errors.Is(err, fencelock.ErrStaleToken) || lead.Err() != nil {
			return
		}
	} else {
		say("primary: replica %d, epoch %d, claimed", id, epoch)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		select {
		case <-lctx.Done():
			say("stepped down: replica %d, epoch %d: %v", id, epoch, context.Cause(lctx))
			return
		case <-tick.C:
		}
		err := write(lctx, epoch, id, seq)
		switch {
		case err == nil:
		case errors.Is(err, fencelock.ErrStaleToken) || lead.Err() != nil:
			// The table or this process's own clock says the term is over,
			// whatever the select above believed.
			say("write refused: replica %d, epoch %d, seq %d: %v", id, epoch, seq, err)
			return
		default:
			say("write failed: replica %d, epoch %d, seq %d: %v", id, epoch, seq, err)
		}
	}
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fencedsql:", err)
	os.Exit(1)
}
