// Package fencesql fences writes to a SQL database with fencing tokens. It
// keeps, in a table of its own, the highest token admitted per resource, and
// admits a write only inside the same transaction that checks and raises that
// mark: the write commits only if no higher token was admitted first, and once
// a token is committed no lower one can commit after it, from any process.
// This is the check a resource must make itself (see fencelock.Fencer): a
// deposed lock holder that wakes from a pause finds its transaction refused,
// once its successor has raised the mark, by claiming its token at grant
// time (Claim) or by its first write.
//
// It works on database/sql and imports no driver; the caller opens the
// *sql.DB with the driver of its choice and names its Dialect. Tested with
// modernc.org/sqlite (driver "sqlite") and github.com/jackc/pgx/v5/stdlib
// (driver "pgx"):
//
//	db, err := sql.Open("pgx", "postgres://app@db/app")
//	...
//	fences, err := fencesql.Open(ctx, db, fencesql.Postgres, "fencing_tokens")
//	...
//	lctx := lock.Context(ctx) // ends with the grant, and carries its group
//	err = fences.Do(lctx, "jobs/reindex", lock.Token(), func(tx *sql.Tx) error {
//		_, err := tx.ExecContext(lctx, "UPDATE jobs SET state = 'done' WHERE name = $1", "reindex")
//		return err
//	})
//	if errors.Is(err, fencelock.ErrStaleToken) {
//		// a later holder has written or claimed: this one must stop
//	}
//	if errors.Is(err, fencelock.ErrOtherGroup) {
//		// the resource is keyed to another group: see Rekey
//	}
//
// # Groups
//
// A token orders only the grants of the group that made it (see
// fencelock.Fence), so each resource's mark also keeps the group it is keyed
// to. The group of a call is the one of the grant its ctx carries
// (fencelock.FenceFrom; Do, Claim), or the fence's (DoFence, ClaimFence).
// In the same conditional statement that checks the token:
//
//   - a resource keyed to no group yet (0) is keyed to the first nonzero
//     group admitted;
//   - a resource keyed to a group refuses another nonzero group, whatever the
//     token, with a *fencelock.OtherGroupError (errors.Is(err,
//     fencelock.ErrOtherGroup)): its tokens are not comparable with the mark,
//     as those of a group bootstrapped again from empty Dirs, which restart
//     low;
//   - group 0 (no grant in ctx, or a fence without a group) is refused by a
//     resource keyed to a group, with a *fencelock.OtherGroupError whose
//     Fence.Group is 0, and never raises its mark: its token is not known
//     to be of the resource's group, and admitting it would let another
//     deployment's writer lift the mark over the group's next holder, who
//     would then be refused as stale, hiding that two groups write. On a
//     resource keyed to no group it is checked by its token alone and keys
//     nothing, so resources only ever written with bare tokens work as
//     before.
//
// Rekey is the operator's way out when the group was replaced on purpose.
//
// # The mark table
//
// Open creates the table (resource TEXT PRIMARY KEY, highest BIGINT NOT
// NULL, grp BIGINT NOT NULL DEFAULT 0) if it is missing. Tokens are uint64
// but SQL integers are signed 64-bit, so a token is stored as int64(token ^
// 1<<63): the mapping is one-to-one and keeps the order, token 1 being
// stored as -9223372036854775807 and 1<<63 as 0. Read the table through
// Highest, or decode a stored value v as uint64(v) ^ 1<<63. Groups are only
// compared for equality, so a group is stored as its bits, int64(group)
// (decode as uint64(v)); 0 means none yet.
//
// # Concurrency
//
// Do and Claim begin a transaction whose first statement is a conditional
// upsert of the mark. It takes the lock that orders all writers of a resource
// before anything else happens in the transaction, and keeps it until commit
// or rollback, so admitted transactions of one resource commit in token order
// and a lower token is refused, never admitted late:
//
//   - PostgreSQL: the upsert locks the resource's row (or waits for a
//     concurrent insert of it). A waiting transaction re-reads the row once
//     the holder commits, and is refused if the committed mark is higher.
//     This holds at the default READ COMMITTED isolation without retries. At
//     REPEATABLE READ or SERIALIZABLE (set as the server's or the role's
//     default) a transaction that waited is instead aborted with a
//     serialization failure (SQLSTATE 40001); Do returns it, nothing is
//     written, and the caller may retry.
//   - SQLite: the upsert takes the database's write lock, which serialises
//     every writer of the file. Set a busy timeout in the DSN, or concurrent
//     writers fail at once with SQLITE_BUSY (returned by Do, nothing
//     written); with modernc.org/sqlite, for example
//     "file:app.db?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate".
//     _txlock=immediate makes BEGIN take the write lock, which is what the
//     upsert does anyway; it matters for the caller's other transactions
//     that read before they write, which otherwise can fail with
//     SQLITE_BUSY regardless of the busy timeout.
//
// Other databases with this upsert syntax may work but are not tested.
package fencesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencelock/fencelock"
)

// The sentinel errors; test with errors.Is. A refused token is reported with
// fencelock's errors instead: a *fencelock.StaleTokenError, which satisfies
// errors.Is(err, fencelock.ErrStaleToken), or a *fencelock.OtherGroupError,
// which satisfies errors.Is(err, fencelock.ErrOtherGroup).
var (
	// ErrInvalidToken: token 0, which fencelock never grants. Refusing it
	// catches an unset token before it claims a resource.
	ErrInvalidToken = errors.New("fencesql: invalid fencing token")
	// ErrInvalidResource: an empty resource name.
	ErrInvalidResource = errors.New("fencesql: invalid resource name")
	// ErrBadTable: Open was given a table name that is not a lower-case SQL
	// identifier of at most 63 bytes, or the table exists but does not have
	// the columns and primary key fencesql needs.
	ErrBadTable = errors.New("fencesql: bad mark table")
)

// Dialect is the SQL flavour of a database: SQLite or Postgres. The zero
// Dialect is invalid.
type Dialect struct {
	name     string
	dollarN  bool // placeholders are $1, $2, ... rather than ?
	postgres bool
}

// The supported dialects.
var (
	// SQLite is SQLite 3.24 or later (the first with upsert).
	SQLite = Dialect{name: "sqlite"}
	// Postgres is PostgreSQL 9.5 or later (the first with ON CONFLICT).
	Postgres = Dialect{name: "postgres", dollarN: true, postgres: true}
)

// String returns the dialect's name.
func (d Dialect) String() string {
	if d.name == "" {
		return "invalid"
	}
	return d.name
}

// Fencer fences writes to the database it was opened on. It is safe for
// concurrent use, and any number of Fencers, in any number of processes, may
// share one mark table.
type Fencer struct {
	db     *sql.DB
	table  string
	q      queries
	sqlite bool
}

var _ fencelock.FenceClaimer = (*Fencer)(nil)

// queries holds all the SQL fencesql runs, built for one dialect and table.
type queries struct {
	create string // create the mark table if missing
	upsert string // args: resource, stored token, stored group; 1 row affected iff admitted
	mark   string // args: resource; returns highest, grp
	rekey  string // args: resource, stored token 0, stored group
	hasOld string // no args; fails iff the table lacks resource or highest
	hasGrp string // no args; fails iff the table has no grp column
}

// tableName is what Open accepts. Lower case only: PostgreSQL folds unquoted
// names to lower case and keeps quoted ones as they are, so a mixed-case name
// would be one table to fencesql (which quotes it) and another to a person
// typing it unquoted in psql. 63 bytes is PostgreSQL's identifier limit.
var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

func buildQueries(d Dialect, table string) queries {
	t := `"` + table + `"` // quoted, so that names like "order" work too
	q := queries{
		create: `CREATE TABLE IF NOT EXISTS ` + t + ` (resource TEXT PRIMARY KEY, highest BIGINT NOT NULL, grp BIGINT NOT NULL DEFAULT 0)`,
		// Equal tokens are admitted (<=): the same holder writing again.
		// Once the stored group is nonzero, any other presented group, 0
		// included, is refused whatever its token; a stored 0 takes the
		// presented group (a fresh row takes it as inserted), and a
		// presented 0 on a stored 0 is checked by its token alone.
		// When the WHERE fails, nothing is written and no row is affected;
		// on PostgreSQL the row stays locked until the transaction ends, so
		// the read that tells stale from other group sees the row that
		// refused.
		upsert: `INSERT INTO ` + t + ` (resource, highest, grp) VALUES (?, ?, ?) ` +
			`ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest, ` +
			`grp = CASE WHEN ` + t + `.grp = 0 THEN excluded.grp ELSE ` + t + `.grp END ` +
			`WHERE ` + t + `.highest <= excluded.highest ` +
			`AND (` + t + `.grp = 0 OR ` + t + `.grp = excluded.grp)`,
		mark: `SELECT highest, grp FROM ` + t + ` WHERE resource = ?`,
		// Unconditional: the operator's re-key overrides the mark.
		rekey: `INSERT INTO ` + t + ` (resource, highest, grp) VALUES (?, ?, ?) ` +
			`ON CONFLICT (resource) DO UPDATE SET highest = excluded.highest, grp = excluded.grp`,
		hasOld: `SELECT resource, highest FROM ` + t + ` WHERE 1 = 0`,
		hasGrp: `SELECT grp FROM ` + t + ` WHERE 1 = 0`,
	}
	if d.dollarN {
		q.upsert = dollarN(q.upsert)
		q.mark = dollarN(q.mark)
		q.rekey = dollarN(q.rekey)
	}
	return q
}

// dollarN rewrites ? placeholders as $1, $2, ...; the statements above have no
// string literals and the table name cannot contain '?'.
func dollarN(s string) string {
	var b strings.Builder
	n := 0
	for _, r := range s {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// encode maps a token to int64 keeping its order: flipping the top bit turns
// 0..2^64-1 into -2^63..2^63-1.
func encode(token uint64) int64 { return int64(token ^ 1<<63) }

func decode(v int64) uint64 { return uint64(v) ^ 1<<63 }

// Groups are compared for equality only: stored as their bits.
func encodeGroup(group uint64) int64 { return int64(group) }

func decodeGroup(v int64) uint64 { return uint64(v) }

// probeGroup has the top bit set, so the probe fails on a grp column that
// cannot keep 64 bits.
const probeGroup = 1<<63 | 0x5eed

// Open returns a Fencer that keeps its marks in table, creating the table if
// it is missing. It is safe for a whole fleet to call Open at once on a new
// table: on PostgreSQL, concurrent CREATE TABLE IF NOT EXISTS can fail with a
// duplicate error (SQLSTATE 23505, 42P07 or 42710) for all but one caller, and
// Open treats that as success; on SQLite, the first connections to a new file
// can meet SQLITE_BUSY that the busy timeout does not wait out, and Open
// tries again for up to 30 seconds (or until ctx ends). Either way it then checks that the table is usable,
// by running the upsert in a transaction it rolls back; a table of the same
// name but another shape fails with ErrBadTable. So does a mark table made
// before marks kept their group (no grp column); the error says how to add
// it.
//
// db must have been opened with a driver for d's database. Open does not
// change db's settings, and the Fencer does not close db.
func Open(ctx context.Context, db *sql.DB, d Dialect, table string) (*Fencer, error) {
	if db == nil {
		return nil, errors.New("fencesql: nil *sql.DB")
	}
	if d.name == "" {
		return nil, errors.New("fencesql: zero Dialect; use fencesql.SQLite or fencesql.Postgres")
	}
	if !tableName.MatchString(table) || strings.HasPrefix(table, "sqlite_") {
		// sqlite_ names are reserved by SQLite; refuse them on both, so a
		// table name works whichever database it is moved to.
		return nil, fmt.Errorf("%w: %q: want a lower-case letter or '_', then up to 62 lower-case letters, digits or '_', not starting with sqlite_",
			ErrBadTable, table)
	}
	f := &Fencer{db: db, table: table, q: buildQueries(d, table), sqlite: !d.postgres}
	wait := time.Millisecond
	for start := time.Now(); ; {
		err := f.setUp(ctx)
		if err == nil {
			return f, nil
		}
		// SQLite answers some lock waits with SQLITE_BUSY without calling
		// the busy handler: a fleet's first connections to a new file, which
		// switch it to WAL at once, meet them. They pass; a lock held for
		// longer than busyRetry is the caller's to see.
		if !f.sqlite || !sqliteBusy(err) || time.Since(start) > busyRetry {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// busyRetry bounds how long Open retries a SQLite database that answers
// SQLITE_BUSY (see Open).
const busyRetry = 30 * time.Second

// setUp creates f's table if it is missing and checks it is usable.
func (f *Fencer) setUp(ctx context.Context) error {
	if _, err := f.db.ExecContext(ctx, f.q.create); err != nil && !(!f.sqlite && createRace(err)) {
		return fmt.Errorf("fencesql: creating table %s: %w", f.table, err)
	}
	return f.probe(ctx)
}

// sqliteBusy reports whether err is SQLite's SQLITE_BUSY ("database is
// locked") or SQLITE_LOCKED: another connection held a lock. Drivers that
// give the result code (modernc.org/sqlite: Code) are asked; others are
// read by their text.
func sqliteBusy(err error) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		code := coded.Code() & 0xff // the primary code, without the extended bits
		return code == 5 || code == 6
	}
	msg := err.Error()
	return strings.Contains(msg, "database is locked") || strings.Contains(msg, "SQLITE_BUSY") ||
		strings.Contains(msg, "database table is locked")
}

// createRace reports whether err is PostgreSQL's answer to a CREATE TABLE IF
// NOT EXISTS that lost a race with another: its existence check passed, then
// its catalog insert met the other's. Depending on timing that is a
// unique_violation (23505) on pg_type's name index, duplicate_table (42P07),
// or duplicate_object (42710, "type ... already exists": the table's row type
// was committed first). Open's probe then tells a table that exists from a
// lookalike (a type of that name, say).
func createRace(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "23505", "42P07", "42710":
		return true
	}
	return false
}

// probe runs the upsert and the read on the empty resource, which Do never
// admits, and rolls back: it fails if the table lacks a column, or the unique
// index the upsert's ON CONFLICT needs.
func (f *Fencer) probe(ctx context.Context) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fencesql: checking table %s: %w", f.table, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, f.q.upsert, "", encode(1), encodeGroup(probeGroup)); err != nil {
		return f.probeError(ctx, err)
	}
	var v, g int64
	if err := tx.QueryRowContext(ctx, f.q.mark, "").Scan(&v, &g); err != nil {
		return f.probeError(ctx, err)
	}
	if v != encode(1) {
		return fmt.Errorf("%w: %s: column highest does not keep a BIGINT", ErrBadTable, f.table)
	}
	if g != encodeGroup(probeGroup) {
		return fmt.Errorf("%w: %s: column grp does not keep a BIGINT", ErrBadTable, f.table)
	}
	return nil
}

// probeError tells a table of the wrong shape (ErrBadTable) from a database
// that could not answer (ctx ended, connection lost), which may pass.
func (f *Fencer) probeError(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, sql.ErrConnDone) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(f.sqlite && sqliteBusy(err)) {
		return fmt.Errorf("fencesql: checking table %s: %w", f.table, err)
	}
	// Asked outside the probe's transaction, which PostgreSQL has aborted.
	if f.lacksGrp(ctx) {
		return fmt.Errorf(`%w: %s has no grp column: it was made before marks kept their group; `+
			`add it with ALTER TABLE "%s" ADD COLUMN grp BIGINT NOT NULL DEFAULT 0 `+
			`(each resource is then keyed to the next nonzero group it admits): %w`, ErrBadTable, f.table, f.table, err)
	}
	return fmt.Errorf("%w: %s: want (resource TEXT PRIMARY KEY, highest BIGINT NOT NULL, grp BIGINT NOT NULL DEFAULT 0): %w",
		ErrBadTable, f.table, err)
}

// lacksGrp reports whether the table is one of an earlier fencesql: the
// columns it had then, but no grp. The probe's error alone would not say so
// on both databases in words an operator can act on.
func (f *Fencer) lacksGrp(ctx context.Context) bool {
	if _, err := f.db.ExecContext(ctx, f.q.hasOld); err != nil {
		return false
	}
	_, err := f.db.ExecContext(ctx, f.q.hasGrp)
	return err != nil && ctx.Err() == nil
}

func check(resource string, token uint64) error {
	if resource == "" {
		return fmt.Errorf("%w: empty", ErrInvalidResource)
	}
	if token == 0 {
		return fmt.Errorf("%w: token 0 for %q (fencelock never grants 0; is the token set?)", ErrInvalidToken, resource)
	}
	return nil
}

// Do admits token for resource and runs write in the same transaction: it
// raises the resource's mark to token, then calls write, then commits. A token
// equal to the mark is admitted (the same holder writing again).
//
// A token lower than the mark is refused before write runs: Do rolls back and
// returns a *fencelock.StaleTokenError (errors.Is(err,
// fencelock.ErrStaleToken)) carrying the mark it found; nothing is written and
// the mark is unchanged. If write returns an error, Do rolls back and returns
// that error as is: write's statements and the raised mark are both undone.
// write must not commit or roll back tx itself; a panic in write rolls back
// and propagates.
//
// Any other error (begin, upsert, commit, a context that ended) is returned
// wrapped, and means the transaction did not commit, except for a commit
// error, after which the outcome is unknown, as with any commit: the write
// and the mark either both landed or neither did.
//
// If ctx carries a grant (fencelock.Lock.Context, Leadership.Context, or a
// context derived from one), the token is checked with that grant's group
// (see Groups: a resource keyed to another group refuses it with a
// *fencelock.OtherGroupError, before write runs and changing nothing, as for
// a stale token), and Do re-checks the grant by the holder's clock before it
// begins and again immediately before it commits (fencelock.GrantErr). Once
// the grant is over it rolls back and returns an error wrapping the grant's
// reason (fencelock.ErrSessionExpired, ErrNotLeader, ...): a process that
// wakes from a pause finds its ticker or request ready before its deadline
// timer has run, and this check is what stops it from writing with a token
// its group has already moved past while no successor has reached the mark
// yet. A holder that pauses after the last check and before the commit lands
// is stopped by the mark, once the successor's token has reached it (Claim);
// until it commits, its transaction holds the mark's lock, so a successor's
// Claim waits for it and is ordered after it. Without a grant in ctx the
// token is bare (group 0): checked alone on a resource keyed to no group,
// refused with a *fencelock.OtherGroupError on a keyed one (see Groups).
//
// A nil write makes Do the same as Claim.
func (f *Fencer) Do(ctx context.Context, resource string, token uint64, write func(tx *sql.Tx) error) error {
	// The group is the grant's, read at the call: a grant made before its
	// replica learnt the group's ID has it by now, or is checked alone.
	g, _ := fencelock.FenceFrom(ctx)
	return f.DoFence(ctx, resource, fencelock.Fence{Group: g.Group, Token: token}, write)
}

// DoFence is Do with an explicit fence, for a fence that came without a
// grant context (from a request header: fencehttp.Fence): the group checked
// is fence.Group, whatever grant ctx carries; group 0 is checked as a bare
// token (see Groups).
// A grant in ctx is still re-checked as Do does.
func (f *Fencer) DoFence(ctx context.Context, resource string, fence fencelock.Fence, write func(tx *sql.Tx) error) error {
	token := fence.Token
	if err := check(resource, token); err != nil {
		return err
	}
	if err := grantOver(ctx, resource, token); err != nil {
		return err
	}
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fencesql: begin: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback() // the error that made us roll back is the one to report
		}
	}()
	if err := f.admit(ctx, tx, resource, fence); err != nil {
		return err
	}
	if write != nil {
		if err := write(tx); err != nil {
			return err
		}
	}
	if err := grantOver(ctx, resource, token); err != nil {
		return err // rolled back: the holder's deadline passed during the transaction
	}
	done = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fencesql: commit: %w", err)
	}
	return nil
}

// grantOver returns the error of the grant ctx carries if it is over by the
// holder's clock now; nil if it holds or ctx carries none.
func grantOver(ctx context.Context, resource string, token uint64) error {
	if err := fencelock.GrantErr(ctx); err != nil {
		return fmt.Errorf("fencesql: %q token %d not written, the grant in ctx is over: %w", resource, token, err)
	}
	return nil
}

// admit runs the conditional upsert in tx, and on refusal reads the mark that
// refused it, in the same transaction, to say why: another group, or a
// stale token. Another group is reported first, as its token means nothing
// against the mark.
func (f *Fencer) admit(ctx context.Context, tx *sql.Tx, resource string, fence fencelock.Fence) error {
	res, err := tx.ExecContext(ctx, f.q.upsert, resource, encode(fence.Token), encodeGroup(fence.Group))
	if err != nil {
		return fmt.Errorf("fencesql: raising mark of %q: %w", resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("fencesql: raising mark of %q: %w", resource, err)
	}
	if n == 1 {
		return nil
	}
	var v, g int64
	if err := tx.QueryRowContext(ctx, f.q.mark, resource).Scan(&v, &g); err != nil {
		return fmt.Errorf("fencesql: reading mark of %q after refusing token %d: %w", resource, fence.Token, err)
	}
	if group := decodeGroup(g); group != 0 && group != fence.Group {
		return &fencelock.OtherGroupError{Resource: resource, Fence: fence, Group: group}
	}
	return &fencelock.StaleTokenError{Resource: resource, Token: fence.Token, Highest: decode(v)}
}

// Claim raises resource's mark to token in a transaction of its own, without
// a write, refusing a lower token, or a grant of another group than the
// resource's, as Do does (and re-checking a grant in ctx as Do does). A new
// lock holder claims its token as soon as it is granted, before its first
// write, so that its predecessor's late writes are refused from the moment
// Claim returns nil rather than from the successor's first write (see
// fencelock.Claimer). The mark is committed when Claim returns nil; with a
// grant in ctx it keys a resource that had no group to the grant's.
func (f *Fencer) Claim(ctx context.Context, resource string, token uint64) error {
	return f.Do(ctx, resource, token, nil)
}

// ClaimFence is Claim with an explicit fence, checked as DoFence checks it.
func (f *Fencer) ClaimFence(ctx context.Context, resource string, fence fencelock.Fence) error {
	return f.DoFence(ctx, resource, fence, nil)
}

// Rekey keys resource to group and resets its mark, so that the new
// group's tokens are admitted from the lowest on and every other group's are
// refused with fencelock.ErrOtherGroup. It is the operator's deliberate
// answer to ErrOtherGroup when the group was replaced on purpose: bootstrapped
// again from empty Dirs (its tokens restart low), or the resource moved to
// another group. group is the new group's ID (Status.GroupID on any of its
// replicas); 0 is refused with an error wrapping fencelock.ErrInvalidFence, as
// a resource keyed to no group would adopt whichever group writes next. The
// re-key commits when Rekey returns nil; it waits for fenced transactions of
// resource in flight, and those that wait for it are then checked against
// the new key.
//
// Re-key ONLY ONCE EVERY HOLDER OF THE OLD GROUP HAS STOPPED. The reset mark
// refuses none of the new group's tokens: the fence the old group's
// stragglers were refused by is gone. Rekey is not for
// programs to call on ErrOtherGroup: that error means two groups are writing
// to one resource, which only a person can sort out.
func (f *Fencer) Rekey(ctx context.Context, resource string, group uint64) error {
	if resource == "" {
		return fmt.Errorf("%w: empty", ErrInvalidResource)
	}
	if group == 0 {
		return fmt.Errorf("%w: re-keying %q to group 0: name the new group's ID (Status.GroupID)", fencelock.ErrInvalidFence, resource)
	}
	if _, err := f.db.ExecContext(ctx, f.q.rekey, resource, encode(0), encodeGroup(group)); err != nil {
		return fmt.Errorf("fencesql: re-keying %q to group %016x: %w", resource, group, err)
	}
	return nil
}

// Highest returns the mark of resource: the highest token admitted and
// committed for it, or 0 if none was (or none since Rekey). It reads outside
// any transaction, so the mark may rise as soon as it returns; it is for
// monitoring and tests, while Do is what makes the check.
func (f *Fencer) Highest(ctx context.Context, resource string) (uint64, error) {
	if resource == "" {
		return 0, fmt.Errorf("%w: empty", ErrInvalidResource)
	}
	var v, g int64
	err := f.db.QueryRowContext(ctx, f.q.mark, resource).Scan(&v, &g)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fencesql: reading mark of %q: %w", resource, err)
	}
	return decode(v), nil
}
