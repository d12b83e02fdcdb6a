package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencesql"
)

func TestDoRefusesLowerTokens(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, _ := open(t, ctx, d)
		data := d.dataTable(ctx)
		require.Zero(t, highest(t, ctx, f, "r"))

		require.NoError(t, f.Do(ctx, "r", 5, d.insert(ctx, data, row{"r", 5, 1})))
		require.NoError(t, f.Do(ctx, "r", 7, d.insert(ctx, data, row{"r", 7, 2})))
		require.NoError(t, f.Do(ctx, "r", 7, d.insert(ctx, data, row{"r", 7, 3})), "the same holder writes again")

		var calls atomic.Int32
		err := f.Do(ctx, "r", 6, spy(&calls, d.insert(ctx, data, row{"r", 6, 4})))
		require.ErrorIs(t, err, fencelock.ErrStaleToken)
		var stale *fencelock.StaleTokenError
		require.ErrorAs(t, err, &stale)
		require.Equal(t, fencelock.StaleTokenError{Resource: "r", Token: 6, Highest: 7}, *stale)
		require.Zero(t, calls.Load(), "write must not run for a stale token")

		require.Equal(t, []row{{"r", 5, 1}, {"r", 7, 2}, {"r", 7, 3}}, d.rows(ctx, data), "the refused write left nothing")
		require.Equal(t, uint64(7), highest(t, ctx, f, "r"))
	})
}

func TestWriteErrorRollsBack(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, _ := open(t, ctx, d)
		data := d.dataTable(ctx)
		require.NoError(t, f.Do(ctx, "r", 5, d.insert(ctx, data, row{"r", 5, 1})))

		boom := errors.New("boom")
		err := f.Do(ctx, "r", 9, func(tx *sql.Tx) error {
			require.NoError(t, d.insert(ctx, data, row{"r", 9, 2})(tx))
			return boom
		})
		require.Same(t, boom, err, "write's error is returned as is")
		require.Equal(t, uint64(5), highest(t, ctx, f, "r"), "the mark was not raised")
		require.Equal(t, []row{{"r", 5, 1}}, d.rows(ctx, data), "the write was rolled back")

		// A panicking write rolls back too, and leaves no transaction open.
		require.Panics(t, func() {
			_ = f.Do(ctx, "r", 10, func(tx *sql.Tx) error {
				require.NoError(t, d.insert(ctx, data, row{"r", 10, 3})(tx))
				panic("write panics")
			})
		})
		require.Equal(t, uint64(5), highest(t, ctx, f, "r"))

		require.NoError(t, f.Do(ctx, "r", 6, d.insert(ctx, data, row{"r", 6, 4})), "6 is above the unchanged mark")
		require.Equal(t, []row{{"r", 5, 1}, {"r", 6, 4}}, d.rows(ctx, data))
	})
}

// The claim at grant: a successor claims its token before its first write,
// and from then on its predecessor is refused.
func TestClaimThenLowerDoRefused(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, _ := open(t, ctx, d)
		data := d.dataTable(ctx)
		require.NoError(t, f.Do(ctx, "r", 9, d.insert(ctx, data, row{"r", 9, 1})), "the predecessor writes")
		require.NoError(t, f.Claim(ctx, "r", 10), "the successor claims at grant")

		var calls atomic.Int32
		err := f.Do(ctx, "r", 9, spy(&calls, d.insert(ctx, data, row{"r", 9, 2})))
		require.ErrorIs(t, err, fencelock.ErrStaleToken, "the predecessor wakes up")
		require.Zero(t, calls.Load())
		var stale *fencelock.StaleTokenError
		require.ErrorAs(t, f.Claim(ctx, "r", 8), &stale)
		require.Equal(t, uint64(10), stale.Highest)

		require.NoError(t, f.Claim(ctx, "r", 10), "claiming again is harmless")
		require.NoError(t, f.Do(ctx, "r", 10, d.insert(ctx, data, row{"r", 10, 3})))
		require.Equal(t, []row{{"r", 9, 1}, {"r", 10, 3}}, d.rows(ctx, data))
		require.Equal(t, uint64(10), highest(t, ctx, f, "r"))
	})
}

func TestHighest(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, table := open(t, ctx, d)
		require.Zero(t, highest(t, ctx, f, "a"), "never claimed")
		require.NoError(t, f.Claim(ctx, "a", 3))
		require.NoError(t, f.Do(ctx, "b", 8, nil), "a nil write is a claim")
		require.Equal(t, uint64(3), highest(t, ctx, f, "a"))
		require.Equal(t, uint64(8), highest(t, ctx, f, "b"))
		require.NoError(t, f.Claim(ctx, "a", 4), "resources have marks of their own")
		require.Equal(t, uint64(4), highest(t, ctx, f, "a"))
		require.Zero(t, highest(t, ctx, f, "A"), "resource names are case-sensitive")

		// Another Fencer (another process) on the same table sees the marks.
		other, err := fencesql.Open(ctx, d.pool(), d.dialect, table)
		require.NoError(t, err)
		require.Equal(t, uint64(8), highest(t, ctx, other, "b"))
		require.ErrorIs(t, other.Claim(ctx, "b", 7), fencelock.ErrStaleToken)
	})
}

func TestLargeTokensOrder(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, table := open(t, ctx, d)
		for _, tok := range []uint64{1, 1<<63 - 1, 1 << 63, 1<<63 + 1, math.MaxUint64} {
			require.NoError(t, f.Claim(ctx, "r", tok))
			require.Equal(t, tok, highest(t, ctx, f, "r"))
		}
		for _, tok := range []uint64{1, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1} {
			var stale *fencelock.StaleTokenError
			require.ErrorAs(t, f.Claim(ctx, "r", tok), &stale, "token %d", tok)
			require.Equal(t, uint64(math.MaxUint64), stale.Highest)
		}
		require.NoError(t, f.Claim(ctx, "r", math.MaxUint64))

		// Across the sign boundary of the stored int64, from a fresh resource.
		require.NoError(t, f.Claim(ctx, "s", 1<<63))
		require.ErrorIs(t, f.Claim(ctx, "s", 1<<63-1), fencelock.ErrStaleToken)
		require.Equal(t, uint64(1<<63), highest(t, ctx, f, "s"))

		// The stored form is documented: int64(token ^ 1<<63).
		var v int64
		require.NoError(t, d.admin.QueryRowContext(ctx,
			d.rebind(`SELECT highest FROM "`+table+`" WHERE resource = ?`), "s").Scan(&v))
		require.Equal(t, int64(0), v)
	})
}

func TestBadInput(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, _ := open(t, ctx, d)
		write := func(*sql.Tx) error { t.Error("write called"); return nil }

		require.ErrorIs(t, f.Do(ctx, "r", 0, write), fencesql.ErrInvalidToken)
		require.ErrorIs(t, f.Claim(ctx, "r", 0), fencesql.ErrInvalidToken)
		require.ErrorIs(t, f.Do(ctx, "", 1, write), fencesql.ErrInvalidResource)
		require.ErrorIs(t, f.Claim(ctx, "", 1), fencesql.ErrInvalidResource)
		_, err := f.Highest(ctx, "")
		require.ErrorIs(t, err, fencesql.ErrInvalidResource)
		require.Zero(t, highest(t, ctx, f, "r"), "nothing was claimed")

		for _, bad := range []string{"", "Fences", "1fences", "fen-ces", "fences;drop", `fen"ces`, "public.fences",
			"fencés", strings.Repeat("a", 64), "sqlite_fences"} {
			_, err := fencesql.Open(ctx, d.admin, d.dialect, bad)
			require.ErrorIs(t, err, fencesql.ErrBadTable, "table %q", bad)
		}
		long := d.table("fslong")
		long += strings.Repeat("x", 63-len(long))
		if d.dialect == fencesql.Postgres {
			d.t.Cleanup(func() { _, _ = d.admin.Exec(`DROP TABLE IF EXISTS "` + long + `"`) })
		}
		_, err = fencesql.Open(ctx, d.admin, d.dialect, long)
		require.NoError(t, err, "63 bytes is the limit")
		if d.dialect == fencesql.SQLite { // a fixed name would collide with other runs on a shared PostgreSQL
			_, err = fencesql.Open(ctx, d.admin, d.dialect, "order")
			require.NoError(t, err, "a keyword works: the name is quoted")
		}

		// A table of that name but another shape: no primary key on resource.
		wrong := d.table("fswrong")
		_, err = d.admin.ExecContext(ctx, `CREATE TABLE `+wrong+` (resource TEXT, highest BIGINT NOT NULL)`)
		require.NoError(t, err)
		_, err = fencesql.Open(ctx, d.admin, d.dialect, wrong)
		require.ErrorIs(t, err, fencesql.ErrBadTable)

		if d.dialect == fencesql.Postgres {
			// A type of that name makes CREATE TABLE fail as a lost race
			// would (42710); the probe then finds no table.
			lookalike := d.table("fstype")
			_, err = d.admin.ExecContext(ctx, `CREATE TYPE `+lookalike+` AS (a int)`)
			require.NoError(t, err)
			d.t.Cleanup(func() { _, _ = d.admin.Exec(`DROP TYPE IF EXISTS ` + lookalike) })
			_, err = fencesql.Open(ctx, d.admin, d.dialect, lookalike)
			require.ErrorIs(t, err, fencesql.ErrBadTable)
		}

		_, err = fencesql.Open(ctx, nil, d.dialect, "fences")
		require.Error(t, err)
		_, err = fencesql.Open(ctx, d.admin, fencesql.Dialect{}, "fences")
		require.Error(t, err)

		canceled, cancel := context.WithCancel(ctx)
		cancel()
		err = f.Claim(canceled, "r", 1)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, fencelock.ErrStaleToken)
	})
}

// A fleet starting at once, each process with its own pool, on a table that
// does not exist yet.
func TestOpenConcurrently(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		table := d.table("fsfleet")
		pools := make([]*sql.DB, 8)
		for i := range pools {
			pools[i] = d.pool()
		}
		fencers := make([]*fencesql.Fencer, len(pools))
		errs := make([]error, len(pools))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, db := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				fencers[i], errs[i] = fencesql.Open(ctx, db, d.dialect, table)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "Open %d", i)
		}
		for i, f := range fencers {
			require.NoError(t, f.Claim(ctx, "r", uint64(i+1)))
		}
		require.Equal(t, uint64(len(pools)), highest(t, ctx, fencers[0], "r"))
	})
}

// SQLite answers SQLITE_BUSY at once where the busy timeout does not apply
// (here: none is set) while another connection holds the write lock; Open
// waits it out instead of failing, and never calls it a bad table. (CI saw
// TestOpenConcurrently's fleet fail with "database is locked" although its
// DSN sets a busy timeout: the first connections to a new file switch it to
// WAL at once.)
func TestOpenWaitsOutABusySQLite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dsn := "file:" + filepath.Join(t.TempDir(), "busy.db") + "?_pragma=journal_mode(WAL)"
	holder, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	defer holder.Close()
	conn, err := holder.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)

	db, err := sql.Open("sqlite", dsn)
	require.NoError(t, err)
	defer db.Close()
	type opened struct {
		f   *fencesql.Fencer
		err error
	}
	done := make(chan opened, 1)
	go func() {
		f, err := fencesql.Open(ctx, db, fencesql.SQLite, "busy_marks")
		done <- opened{f, err}
	}()
	select {
	case o := <-done:
		t.Fatalf("Open returned while another connection held the write lock: %v", o.err)
	case <-time.After(300 * time.Millisecond):
		// Still trying, as it must while the lock is held.
	}
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	o := <-done
	require.NoError(t, o.err)
	require.NoError(t, o.f.Claim(ctx, "r", 1))

	// A lock that outlasts the caller's context: the busy error, not ErrBadTable.
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	defer stop()
	_, err = fencesql.Open(short, db, fencesql.SQLite, "busy_other")
	require.Error(t, err)
	require.NotErrorIs(t, err, fencesql.ErrBadTable)
	require.Contains(t, err.Error(), "locked")
	_, err = conn.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)
}

// Writers in several pools race random, interleaved tokens on two resources.
// Every call is either admitted and written, or refused as stale with nothing
// written; and in commit order, no row's token is lower than an earlier one
// of its resource.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		const pools, writers, calls = 4, 8, 40
		table := d.table("fsmarks")
		data := d.dataTable(ctx)
		fencers := make([]*fencesql.Fencer, pools)
		for i := range fencers {
			f, err := fencesql.Open(ctx, d.pool(), d.dialect, table)
			require.NoError(t, err)
			fencers[i] = f
		}

		var mu sync.Mutex
		admitted := map[int64]row{}
		maxAdmitted := map[string]uint64{}
		var stale atomic.Int32
		var clock atomic.Int64
		var wg sync.WaitGroup
		for w := range writers {
			f := fencers[w%pools]
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), 2))
				for i := range calls {
					// Tokens follow a shared clock, some a little behind it, so
					// that writers interleave however they are scheduled.
					tok := max(1, clock.Add(1)-rng.Int64N(8))
					r := row{Resource: []string{"a", "b"}[rng.IntN(2)], Token: uint64(tok), Seq: int64(w*calls + i)}
					var wrote atomic.Int32
					err := f.Do(ctx, r.Resource, r.Token, spy(&wrote, d.insert(ctx, data, r)))
					switch {
					case err == nil:
						mu.Lock()
						admitted[r.Seq] = r
						maxAdmitted[r.Resource] = max(maxAdmitted[r.Resource], r.Token)
						mu.Unlock()
					case errors.Is(err, fencelock.ErrStaleToken):
						stale.Add(1)
						if wrote.Load() != 0 {
							t.Errorf("write ran for stale token %d", r.Token)
						}
						var se *fencelock.StaleTokenError
						if !errors.As(err, &se) || se.Highest <= r.Token || se.Resource != r.Resource {
							t.Errorf("stale error %v for %+v", err, r)
						}
					default:
						t.Errorf("Do %+v: %v", r, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}

		rows := d.rows(ctx, data)
		require.Len(t, rows, len(admitted), "exactly the admitted calls wrote")
		require.Equal(t, writers*calls, len(admitted)+int(stale.Load()))
		require.Greater(t, len(admitted), writers*calls/10)
		require.Positive(t, stale.Load())
		last := map[string]uint64{}
		for i, r := range rows {
			require.Equal(t, admitted[r.Seq], r, "row %d was not admitted", i)
			require.GreaterOrEqual(t, r.Token, last[r.Resource], "row %d (%+v) committed after token %d", i, r, last[r.Resource])
			last[r.Resource] = r.Token
		}
		for res, tok := range maxAdmitted {
			require.Equal(t, tok, highest(t, ctx, fencers[0], res))
		}
		t.Logf("%d admitted, %d stale", len(admitted), stale.Load())
	})
}
