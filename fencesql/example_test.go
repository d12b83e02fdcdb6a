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

// A resource keyed to one group refuses the fences of a group bootstrapped
// again from empty Dirs, whose tokens restart low, until the operator
// re-keys it once every holder of the old group has stopped.
func ExampleFencer_Rekey() {
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
	fences, err := fencesql.Open(ctx, db, fencesql.SQLite, "fencing_tokens")
	if err != nil {
		panic(err)
	}

	// lock.Fence() of the old group's holder; Do with lock.Context(ctx)
	// takes the same group from the grant.
	old := fencelock.Fence{Group: 0x5ca1ab1e00c0ffee, Token: 1 << 40}
	fmt.Println(fences.ClaimFence(ctx, "jobs/reindex", old))
	// The group's Dirs were lost and it was bootstrapped again: a new ID,
	// and tokens that start low.
	reborn := fencelock.Fence{Group: 0x0ddba11c0dec0de5, Token: 65536}
	err = fences.ClaimFence(ctx, "jobs/reindex", reborn)
	fmt.Println(errors.Is(err, fencelock.ErrOtherGroup), err)

	// Every holder of the old group has stopped: the operator re-keys.
	fmt.Println(fences.Rekey(ctx, "jobs/reindex", reborn.Group))
	fmt.Println(fences.ClaimFence(ctx, "jobs/reindex", reborn))
	err = fences.ClaimFence(ctx, "jobs/reindex", old)
	fmt.Println(errors.Is(err, fencelock.ErrOtherGroup))
	// Output:
	// <nil>
	// true fencelock: fencing token 65536 for "jobs/reindex" is of group 0ddba11c0dec0de5, the resource is keyed to group 5ca1ab1e00c0ffee (if the group was replaced on purpose, re-key the resource once every holder of the old one has stopped)
	// <nil>
	// <nil>
	// true
}
