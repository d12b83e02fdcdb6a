package fencesql_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// startOne starts a one-replica group that takes its time from c.
func startOne(t *testing.T, c clock.Clock) *fencelock.Node {
	t.Helper()
	return fencelocktest.NewCluster(t, 1, fencelocktest.WithConfig(func(cfg *fencelock.Config) { testhook.UseClock(cfg, c) })).Node(1)
}

// Do re-checks the grant its context carries, by the holder's clock, before
// it begins and again just before it commits. Here the holder's deadline
// passes while its write runs (the clock jumps as a pause would make it):
// the transaction is rolled back though the mark admitted the token, and
// later calls are refused before they begin, while the deadline timer,
// many seconds away in real time, has not run.
func TestDoRechecksGrantBeforeCommit(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		c := &clock.Ahead{}
		node := startOne(t, c)
		const ttl = 20 * time.Second
		s, err := node.NewSession(ctx, fencelock.WithTTL(ttl))
		require.NoError(t, err)
		l, err := s.Acquire(ctx, "jobs/reindex")
		require.NoError(t, err)
		testhook.Freeze(s) // no keep-alive moves the deadline on
		defer testhook.Thaw(s)
		f, _ := open(t, ctx, d)
		data := d.dataTable(ctx)
		lctx := l.Context(ctx)
		tok := l.Token()

		require.NoError(t, f.Claim(lctx, "r", tok))
		require.NoError(t, f.Do(lctx, "r", tok, d.insert(lctx, data, row{"r", tok, 1})))
		err = f.Do(lctx, "r", tok, func(tx *sql.Tx) error {
			if err := d.insert(lctx, data, row{"r", tok, 2})(tx); err != nil {
				return err
			}
			c.Set(2 * ttl) // the holder pauses past its deadline here
			return nil
		})
		require.ErrorIs(t, err, fencelock.ErrSessionExpired)
		var calls atomic.Int32
		require.ErrorIs(t, f.Do(lctx, "r", tok, spy(&calls, d.insert(ctx, data, row{"r", tok, 3}))), fencelock.ErrSessionExpired)
		require.Zero(t, calls.Load(), "a call with a grant that is over does not begin")
		require.ErrorIs(t, f.Claim(lctx, "r", tok), fencelock.ErrSessionExpired)
		require.Equal(t, []row{{"r", tok, 1}}, d.rows(ctx, data), "nothing after the deadline committed")
		require.Equal(t, tok, highest(t, ctx, f, "r"))
	})
}

// Do and Claim take the group from the grant their ctx carries: the claim
// keys the resource to the holder's group, and a resource keyed to another
// group (here, by Rekey) refuses the holder's writes though its token is
// higher than the mark, and so does the same token without a grant context
// (a bare token).
func TestDoTakesTheGroupFromTheGrant(t *testing.T) {
	forEachDB(t, func(t *testing.T, ctx context.Context, d *testDB) {
		node := startOne(t, clock.Real)
		for node.Status().GroupID == 0 { // set by the group's first leader, once
			select {
			case <-ctx.Done():
				t.Fatal("the group's ID was never applied")
			case <-time.After(10 * time.Millisecond):
			}
		}
		id := node.Status().GroupID
		s, err := node.NewSession(ctx)
		require.NoError(t, err)
		l, err := s.Acquire(ctx, "jobs/reindex")
		require.NoError(t, err)
		lctx := l.Context(ctx)
		f, table := open(t, ctx, d)
		data := d.dataTable(ctx)
		tok := l.Token()

		require.NoError(t, f.Claim(lctx, "mine", tok))
		require.Equal(t, stored(id), storedGroup(t, ctx, d, table, "mine"), "keyed to the grant's group")

		require.NoError(t, f.Rekey(ctx, "theirs", id^1))
		var calls atomic.Int32
		err = f.Do(lctx, "theirs", tok, spy(&calls, d.insert(ctx, data, row{"theirs", tok, 1})))
		require.ErrorIs(t, err, fencelock.ErrOtherGroup)
		var other *fencelock.OtherGroupError
		require.ErrorAs(t, err, &other)
		require.Equal(t, fencelock.Fence{Group: id, Token: tok}, other.Fence)
		require.Equal(t, id^1, other.Group)
		require.Zero(t, calls.Load())
		require.ErrorIs(t, f.Claim(lctx, "theirs", tok), fencelock.ErrOtherGroup)
		require.Zero(t, highest(t, ctx, f, "theirs"), "nothing committed")
		require.Empty(t, d.rows(ctx, data))

		require.ErrorIs(t, f.Do(ctx, "theirs", tok, d.insert(ctx, data, row{"theirs", tok, 2})), fencelock.ErrOtherGroup,
			"no grant: a bare token, refused by a keyed resource")
		// An explicit fence wins over the grant's group.
		require.NoError(t, f.DoFence(lctx, "theirs", fencelock.Fence{Group: id ^ 1, Token: tok}, d.insert(ctx, data, row{"theirs", tok, 2})))
		require.Equal(t, []row{{"theirs", tok, 2}}, d.rows(ctx, data))
		require.NoError(t, s.Close(ctx))
	})
}
