package fencesql_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // driver "pgx"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/fencelock/fencelock/fencesql"
)

// DSNEnv names the PostgreSQL the tests use; .ci/postgres.sh sets it in CI.
const dsnEnv = "FENCELOCK_TEST_POSTGRES_DSN"

// testDB is one test's database: pools on it (stand-ins for processes), and
// names of tables that no other test or run uses.
type testDB struct {
	t       testing.TB
	dialect fencesql.Dialect
	pool    func() *sql.DB // a new pool, closed when the test ends
	admin   *sql.DB        // for the test's own setup and checks
	serial  string         // the column type of an id assigned in commit order
	ph      func(n int) string
}

// table returns a fresh table name (dropped at the end of the test on
// PostgreSQL; SQLite's file goes with the temp dir).
func (d *testDB) table(prefix string) string {
	name := fmt.Sprintf("%s_%08x", prefix, rand.Uint32())
	if d.dialect == fencesql.Postgres {
		d.t.Cleanup(func() {
			_, err := d.admin.Exec(`DROP TABLE IF EXISTS "` + name + `"`)
			if err != nil {
				d.t.Errorf("dropping %s: %v", name, err)
			}
		})
	}
	return name
}

// rebind rewrites ? placeholders for the dialect.
func (d *testDB) rebind(query string) string {
	n := 0
	return regexp.MustCompile(`\?`).ReplaceAllStringFunc(query, func(string) string {
		n++
		return d.ph(n)
	})
}

// dataTable creates a table of writes, its id assigned inside the writing
// transaction (so, for one resource, in commit order).
func (d *testDB) dataTable(ctx context.Context) string {
	name := d.table("fsdata")
	_, err := d.admin.ExecContext(ctx, `CREATE TABLE `+name+` (id `+d.serial+`, resource TEXT NOT NULL, token BIGINT NOT NULL, seq BIGINT NOT NULL)`)
	require.NoError(d.t, err)
	return name
}

type row struct {
	Resource string
	Token    uint64
	Seq      int64
}

// insert returns a write that adds a row to data.
func (d *testDB) insert(ctx context.Context, data string, r row) func(*sql.Tx) error {
	q := d.rebind(`INSERT INTO ` + data + ` (resource, token, seq) VALUES (?, ?, ?)`)
	return func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, r.Resource, int64(r.Token), r.Seq)
		return err
	}
}

// rows returns data's rows in commit order.
func (d *testDB) rows(ctx context.Context, data string) []row {
	rs, err := d.admin.QueryContext(ctx, `SELECT resource, token, seq FROM `+data+` ORDER BY id`)
	require.NoError(d.t, err)
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		var tok int64
		require.NoError(d.t, rs.Scan(&r.Resource, &tok, &r.Seq))
		r.Token = uint64(tok)
		out = append(out, r)
	}
	require.NoError(d.t, rs.Err())
	return out
}

func sqliteDB(t *testing.T) *testDB {
	// A file, not :memory:, so that pools share it as processes would; WAL
	// and a busy timeout as the package doc advises.
	dsn := "file:" + filepath.Join(t.TempDir(), "test.db") +
		"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate"
	open := func() *sql.DB {
		db, err := sql.Open("sqlite", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}
	return &testDB{t: t, dialect: fencesql.SQLite, pool: open, admin: open(),
		serial: "INTEGER PRIMARY KEY AUTOINCREMENT", ph: func(int) string { return "?" }}
}

func postgresDB(t *testing.T) *testDB {
	dsn := os.Getenv(dsnEnv)
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal(dsnEnv + " not set in CI")
		}
		t.Skip(dsnEnv + " not set; .ci/postgres.sh starts a server and sets it")
	}
	open := func() *sql.DB {
		db, err := sql.Open("pgx", dsn)
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}
	admin := open()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, admin.PingContext(ctx), "PostgreSQL at %s=%s", dsnEnv, dsn)
	return &testDB{t: t, dialect: fencesql.Postgres, pool: open, admin: admin,
		serial: "BIGSERIAL PRIMARY KEY", ph: func(n int) string { return fmt.Sprint("$", n) }}
}

// forEachDB runs test against SQLite and PostgreSQL.
func forEachDB(t *testing.T, test func(t *testing.T, ctx context.Context, d *testDB)) {
	for _, b := range []struct {
		name string
		open func(*testing.T) *testDB
	}{{"sqlite", sqliteDB}, {"postgres", postgresDB}} {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			test(t, ctx, b.open(t))
		})
	}
}

// open returns a Fencer on a fresh table, and the table's name.
func open(t *testing.T, ctx context.Context, d *testDB) (*fencesql.Fencer, string) {
	table := d.table("fsmarks")
	f, err := fencesql.Open(ctx, d.admin, d.dialect, table)
	require.NoError(t, err)
	return f, table
}

// spy wraps a write and counts its calls.
func spy(calls *atomic.Int32, write func(*sql.Tx) error) func(*sql.Tx) error {
	return func(tx *sql.Tx) error {
		calls.Add(1)
		return write(tx)
	}
}

func highest(t *testing.T, ctx context.Context, f *fencesql.Fencer, resource string) uint64 {
	h, err := f.Highest(ctx, resource)
	require.NoError(t, err)
	return h
}
