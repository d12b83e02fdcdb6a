package fencesql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencesql"
)

func ExampleFencer_Do() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "fencesql-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE jobs (name TEXT PRIMARY KEY, state TEXT)`); err != nil {
		panic(err)
	}
	fences, err := fencesql.Open(ctx, db, fencesql.SQLite, "fencing_tokens")
	if err != nil {
		panic(err)
	}

	// setState is a write fenced by the token of the lock its caller holds.
	setState := func(token uint64, state string) error {
		return fences.Do(ctx, "jobs/reindex", token, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO jobs (name, state) VALUES ('reindex', ?)
				ON CONFLICT (name) DO UPDATE SET state = excluded.state`, state)
			return err
		})
	}
	fmt.Println(setState(7, "running")) // the first holder, token 7
	// The lock passes on; the successor claims its token at grant.
	fmt.Println(fences.Claim(ctx, "jobs/reindex", 9))
	// The first holder wakes from a pause and tries to write.
	err = setState(7, "done")
	fmt.Println(errors.Is(err, fencelock.ErrStaleToken), err)

	var state string
	if err := db.QueryRowContext(ctx, `SELECT state FROM jobs WHERE name = 'reindex'`).Scan(&state); err != nil {
		panic(err)
	}
	highest, err := fences.Highest(ctx, "jobs/reindex")
	fmt.Println(state, highest, err)
	// Output:
	// <nil>
	// <nil>
	// true fencelock: stale fencing token 7 for "jobs/reindex": token 9 was already admitted
	// running 9 <nil>
}
