package fencesql_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencesql"
)

// Two groups: g2 has the top bit set, to cover the stored form's sign.
const g1, g2 = 0x00000000000feed1, 0xfeedfacecafebeef

// stored is a group's documented stored form, int64(group).
func stored(group uint64) int64 { return int64(group) }

// storedGroup reads a resource's grp column as it is in the table.
func storedGroup(t *testing.T, ctx context.Context, d *testDB, table, resource string) int64 {
	t.Helper()
	var g int64
	require.NoError(t, d.admin.QueryRowContext(ctx,
		d.rebind(`SELECT grp FROM "`+table+`" WHERE resource = ?`), resource).Scan(&g))
	return g
}

// A resource keyed to a group refuses another group's fence whatever its
// token, before write runs, and commits nothing; a stale fence of its own
// group is stale.
func TestOtherGroupRefused(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, table := open(t, ctx, d)
		data := d.dataTable(ctx)
		require.NoError(t, f.DoFence(ctx, "r", fencelock.Fence{Group: g1, Token: 5}, d.insert(ctx, data, row{"r", 5, 1})))
		require.Equal(t, stored(g1), storedGroup(t, ctx, d, table, "r"), "keyed by the first nonzero group")

		for i, tok := range []uint64{1, 5, 6, 1 << 62} {
			fence := fencelock.Fence{Group: g2, Token: tok}
			var calls atomic.Int32
			err := f.DoFence(ctx, "r", fence, spy(&calls, d.insert(ctx, data, row{"r", tok, int64(10 + i)})))
			require.ErrorIs(t, err, fencelock.ErrOtherGroup, "token %d", tok)
			require.NotErrorIs(t, err, fencelock.ErrStaleToken, "token %d", tok)
			var other *fencelock.OtherGroupError
			require.ErrorAs(t, err, &other)
			require.Equal(t, fencelock.OtherGroupError{Resource: "r", Fence: fence, Group: g1}, *other)
			require.Zero(t, calls.Load(), "write must not run for another group")
		}
		require.ErrorIs(t, f.ClaimFence(ctx, "r", fencelock.Fence{Group: g2, Token: 9}), fencelock.ErrOtherGroup)

		var stale *fencelock.StaleTokenError
		require.ErrorAs(t, f.DoFence(ctx, "r", fencelock.Fence{Group: g1, Token: 4}, d.insert(ctx, data, row{"r", 4, 20})), &stale)
		require.Equal(t, uint64(5), stale.Highest)

		require.Equal(t, []row{{"r", 5, 1}}, d.rows(ctx, data), "the refused writes left nothing")
		require.Equal(t, uint64(5), highest(t, ctx, f, "r"))
		require.Equal(t, stored(g1), storedGroup(t, ctx, d, table, "r"))

		// Another process's Fencer sees the key.
		other, err := fencesql.Open(ctx, d.pool(), d.dialect, table)
		require.NoError(t, err)
		require.ErrorIs(t, other.ClaimFence(ctx, "r", fencelock.Fence{Group: g2, Token: 6}), fencelock.ErrOtherGroup)
		require.NoError(t, other.ClaimFence(ctx, "r", fencelock.Fence{Group: g1, Token: 6}))
	})
}

// Group 0 (no grant in ctx, or a bare token) is checked by its token alone
// on an unkeyed resource, and keys nothing; a stale fence keys nothing
// either; the first admitted nonzero group does, and from then on group 0
// is refused as of another group and raises nothing.
func TestGroupZeroChecksTokenOnlyAndFirstGroupIsAdopted(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, table := open(t, ctx, d)
		data := d.dataTable(ctx)

		require.NoError(t, f.Do(ctx, "r", 5, d.insert(ctx, data, row{"r", 5, 1})))
		require.Zero(t, storedGroup(t, ctx, d, table, "r"), "a bare token keys nothing")
		require.NoError(t, f.DoFence(ctx, "r", fencelock.Fence{Token: 6}, d.insert(ctx, data, row{"r", 6, 2})))
		require.Zero(t, storedGroup(t, ctx, d, table, "r"))

		require.ErrorIs(t, f.ClaimFence(ctx, "r", fencelock.Fence{Group: g2, Token: 4}), fencelock.ErrStaleToken)
		require.Zero(t, storedGroup(t, ctx, d, table, "r"), "a refused fence keys nothing")
		require.NoError(t, f.DoFence(ctx, "r", fencelock.Fence{Group: g2, Token: 6}, d.insert(ctx, data, row{"r", 6, 3})))
		require.Equal(t, int64(-0x0112053135014111), storedGroup(t, ctx, d, table, "r"),
			"adopted, stored as int64(group): 0xfeedfacecafebeef")
		require.Equal(t, uint64(0xfeedfacecafebeef), uint64(storedGroup(t, ctx, d, table, "r")))

		var calls atomic.Int32
		err := f.Do(ctx, "r", 7, spy(&calls, d.insert(ctx, data, row{"r", 7, 4})))
		require.ErrorIs(t, err, fencelock.ErrOtherGroup, "no grant in ctx: a bare token, refused by a keyed resource")
		var other *fencelock.OtherGroupError
		require.ErrorAs(t, err, &other)
		require.Equal(t, fencelock.OtherGroupError{Resource: "r", Fence: fencelock.Fence{Token: 7}, Group: g2}, *other)
		require.ErrorIs(t, f.DoFence(ctx, "r", fencelock.Fence{Token: 8}, spy(&calls, d.insert(ctx, data, row{"r", 8, 5}))), fencelock.ErrOtherGroup)
		require.ErrorIs(t, f.Claim(ctx, "r", 9), fencelock.ErrOtherGroup)
		require.Zero(t, calls.Load(), "refused before the write ran")
		require.Equal(t, uint64(6), highest(t, ctx, f, "r"), "group 0 raised nothing")
		require.Equal(t, stored(g2), storedGroup(t, ctx, d, table, "r"), "group 0 leaves the key alone")
		require.NoError(t, f.DoFence(ctx, "r", fencelock.Fence{Group: g2, Token: 7}, d.insert(ctx, data, row{"r", 7, 4})))
		require.ErrorIs(t, f.ClaimFence(ctx, "r", fencelock.Fence{Group: g1, Token: 9}), fencelock.ErrOtherGroup)

		// A fresh resource is keyed by its first fence, inserted.
		require.NoError(t, f.ClaimFence(ctx, "s", fencelock.Fence{Group: g1, Token: 1}))
		require.Equal(t, stored(g1), storedGroup(t, ctx, d, table, "s"))
		require.Equal(t, []row{{"r", 5, 1}, {"r", 6, 2}, {"r", 6, 3}, {"r", 7, 4}}, d.rows(ctx, data))
	})
}

// The probe: a resource keyed to group feed at token 100 is sent
// Fence{0, 5000}. The upsert must refuse it as of no group and leave the
// mark alone, so that the group's next holder, token 200, is admitted;
// before, the group-0 fence raised the mark to 5000 and 200 was refused as
// stale, hiding that two groups write.
func TestGroupZeroRefusedByAKeyedResource(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, table := open(t, ctx, d)
		const feed = 0xfeed
		require.NoError(t, f.ClaimFence(ctx, "feed", fencelock.Fence{Group: feed, Token: 100}))
		err := f.ClaimFence(ctx, "feed", fencelock.Fence{Token: 5000})
		require.ErrorIs(t, err, fencelock.ErrOtherGroup)
		require.NotErrorIs(t, err, fencelock.ErrStaleToken)
		require.Equal(t, uint64(100), highest(t, ctx, f, "feed"), "group 0 never raises the mark")
		require.NoError(t, f.ClaimFence(ctx, "feed", fencelock.Fence{Group: feed, Token: 200}), "the group's next holder")
		require.Equal(t, uint64(200), highest(t, ctx, f, "feed"))
		require.Equal(t, stored(feed), storedGroup(t, ctx, d, table, "feed"))
	})
}

// The operator re-keys a resource to a group bootstrapped again from empty
// Dirs: the new group's low tokens are admitted, the old group's refused,
// even with higher tokens.
func TestRekey(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		f, table := open(t, ctx, d)
		data := d.dataTable(ctx)
		require.NoError(t, f.DoFence(ctx, "r", fencelock.Fence{Group: g1, Token: 1 << 40}, d.insert(ctx, data, row{"r", 1 << 40, 1})))
		require.ErrorIs(t, f.DoFence(ctx, "r", fencelock.Fence{Group: g2, Token: 65536}, d.insert(ctx, data, row{"r", 65536, 2})),
			fencelock.ErrOtherGroup, "the re-bootstrapped group before the re-key")

		require.ErrorIs(t, f.Rekey(ctx, "r", 0), fencelock.ErrInvalidFence)
		require.ErrorIs(t, f.Rekey(ctx, "", g2), fencesql.ErrInvalidResource)
		require.Equal(t, stored(g1), storedGroup(t, ctx, d, table, "r"), "a refused re-key changes nothing")
		require.Equal(t, uint64(1<<40), highest(t, ctx, f, "r"))

		require.NoError(t, f.Rekey(ctx, "r", g2))
		require.Zero(t, highest(t, ctx, f, "r"), "the mark was reset")
		require.Equal(t, stored(g2), storedGroup(t, ctx, d, table, "r"))
		require.NoError(t, f.DoFence(ctx, "r", fencelock.Fence{Group: g2, Token: 65536}, d.insert(ctx, data, row{"r", 65536, 3})))

		var calls atomic.Int32
		err := f.DoFence(ctx, "r", fencelock.Fence{Group: g1, Token: 1<<40 + 1}, spy(&calls, d.insert(ctx, data, row{"r", 1<<40 + 1, 4})))
		require.ErrorIs(t, err, fencelock.ErrOtherGroup, "the old group's holder, even with a higher token")
		require.Zero(t, calls.Load())
		require.ErrorIs(t, f.ClaimFence(ctx, "r", fencelock.Fence{Group: g2, Token: 65535}), fencelock.ErrStaleToken)
		require.Equal(t, []row{{"r", 1 << 40, 1}, {"r", 65536, 3}}, d.rows(ctx, data))
		require.Equal(t, uint64(65536), highest(t, ctx, f, "r"))

		// Re-keying a resource never fenced creates its mark, keyed.
		require.NoError(t, f.Rekey(ctx, "new", g1))
		require.ErrorIs(t, f.ClaimFence(ctx, "new", fencelock.Fence{Group: g2, Token: 1}), fencelock.ErrOtherGroup)
		require.NoError(t, f.ClaimFence(ctx, "new", fencelock.Fence{Group: g1, Token: 1}))
	})
}

// Two groups race their fences on a fresh resource from several pools:
// exactly one group keys it, every call of the other is refused as of
// another group, and only the winner's writes are in the table.
func TestTwoGroupsRaceForAFreshResource(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		const writers, calls = 6, 20
		table := d.table("fsmarks")
		data := d.dataTable(ctx)
		groups := []uint64{g1, g2}
		var admitted, other, stale [2]atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for w := range writers {
			f, err := fencesql.Open(ctx, d.pool(), d.dialect, table)
			require.NoError(t, err)
			gi := w % 2
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for i := range calls {
					fence := fencelock.Fence{Group: groups[gi], Token: uint64(i + 1)}
					var wrote atomic.Int32
					err := f.DoFence(ctx, "race", fence, spy(&wrote, d.insert(ctx, data, row{"race", fence.Token, int64(gi)})))
					switch {
					case err == nil:
						admitted[gi].Add(1)
					case errors.Is(err, fencelock.ErrOtherGroup):
						other[gi].Add(1)
					case errors.Is(err, fencelock.ErrStaleToken):
						stale[gi].Add(1)
					default:
						t.Errorf("DoFence %v: %v", fence, err)
						return
					}
					if err != nil && wrote.Load() != 0 {
						t.Errorf("write ran for refused %v: %v", fence, err)
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		if t.Failed() {
			return
		}
		winner := 0
		if uint64(storedGroup(t, ctx, d, table, "race")) == g2 {
			winner = 1
		}
		loser := 1 - winner
		require.Equal(t, groups[winner], uint64(storedGroup(t, ctx, d, table, "race")))
		require.Zero(t, admitted[loser].Load(), "the group that lost the key never wrote")
		require.Equal(t, int32(writers/2*calls), other[loser].Load(), "every call of the loser: another group")
		require.Zero(t, stale[loser].Load())
		require.Zero(t, other[winner].Load())
		require.Positive(t, admitted[winner].Load())
		rows := d.rows(ctx, data)
		require.Len(t, rows, int(admitted[winner].Load()))
		for _, r := range rows {
			require.Equal(t, int64(winner), r.Seq, "a row of the group that lost")
		}
		t.Logf("group %d keyed the resource: %d admitted, %d stale; %d refused as another group",
			winner, admitted[winner].Load(), stale[winner].Load(), other[loser].Load())
	})
}

// A mark table made before marks kept their group: Open refuses it with
// ErrBadTable and says how to add the column; once added as it says, the
// table works, and its old marks, keyed to no group, check tokens alone
// until a group is admitted.
func TestOpenTableWithoutGroup(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		table := d.table("fsold")
		_, err := d.admin.ExecContext(ctx, `CREATE TABLE "`+table+`" (resource TEXT PRIMARY KEY, highest BIGINT NOT NULL)`)
		require.NoError(t, err)
		seven := uint64(7)
		_, err = d.admin.ExecContext(ctx, d.rebind(`INSERT INTO "`+table+`" (resource, highest) VALUES (?, ?)`), "r", int64(seven^1<<63))
		require.NoError(t, err)

		_, err = fencesql.Open(ctx, d.admin, d.dialect, table)
		require.ErrorIs(t, err, fencesql.ErrBadTable)
		alter := `ALTER TABLE "` + table + `" ADD COLUMN grp BIGINT NOT NULL DEFAULT 0`
		require.Contains(t, err.Error(), alter)

		_, err = d.admin.ExecContext(ctx, alter)
		require.NoError(t, err)
		f, err := fencesql.Open(ctx, d.admin, d.dialect, table)
		require.NoError(t, err)
		require.Equal(t, uint64(7), highest(t, ctx, f, "r"))
		require.ErrorIs(t, f.ClaimFence(ctx, "r", fencelock.Fence{Group: g1, Token: 6}), fencelock.ErrStaleToken)
		require.NoError(t, f.ClaimFence(ctx, "r", fencelock.Fence{Group: g1, Token: 7}))
		require.ErrorIs(t, f.ClaimFence(ctx, "r", fencelock.Fence{Group: g2, Token: 8}), fencelock.ErrOtherGroup)
	})
}

// A grp column that cannot keep 64 bits is a bad table.
func TestOpenNarrowGroupColumn(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		if d.dialect == fencesql.SQLite {
			t.Skip("SQLite's INTEGER columns keep 64 bits whatever their declared type")
		}
		table := d.table("fsnarrow")
		_, err := d.admin.ExecContext(ctx, `CREATE TABLE "`+table+`" (resource TEXT PRIMARY KEY, highest BIGINT NOT NULL, grp INTEGER NOT NULL DEFAULT 0)`)
		require.NoError(t, err)
		_, err = fencesql.Open(ctx, d.admin, d.dialect, table)
		require.ErrorIs(t, err, fencesql.ErrBadTable)
		require.NotContains(t, err.Error(), "ALTER TABLE", "the column is there, of the wrong type")
	})
}
