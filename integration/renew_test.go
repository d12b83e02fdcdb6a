package integration_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// A node renews all its sessions with a few batches per period: every
// session lives on, holding its lock, while the keep-alive commands number
// a small fraction of the renewals they carry.
func TestBatchedKeepAlivesRenewEverySession(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	leader := c.Leader(ctx)
	f := c.Node(leader%3 + 1)
	const ttl, sessions = time.Second, 40
	ss := make([]*fencelock.Session, sessions)
	locks := make([]*fencelock.Lock, sessions)
	for i := range ss {
		ss[i] = newSession(t, ctx, f, fencelock.WithTTL(ttl))
		l, err := ss[i].Acquire(ctx, fmt.Sprint("batched/", i))
		require.NoError(t, err)
		locks[i] = l
	}
	before, leaderBefore := f.Stats(), c.Node(leader).Stats()

	watch := time.NewTimer(4 * ttl) // four TTLs in which only keep-alives happen
	defer watch.Stop()
	select {
	case <-locks[0].Done():
		t.Fatalf("a holder lost its lock: %v", locks[0].Err())
	case <-watch.C:
	}
	after, leaderAfter := f.Stats(), c.Node(leader).Stats()
	for i, s := range ss {
		require.NoError(t, s.Err(), "session %d", i)
		info := inspect(t, ctx, c.Node(leader), locks[i].Name())
		require.Equal(t, s.ID(), info.SessionID)
		require.Equal(t, locks[i].Token(), info.Token)
	}
	require.Equal(t, leaderBefore.Expiries, leaderAfter.Expiries, "no session expired")
	renewals, commands := after.Renewals-before.Renewals, after.KeepAlives-before.KeepAlives
	// Each session renews every TTL/3: about 12 times each in four TTLs.
	require.GreaterOrEqual(t, renewals, uint64(sessions*6), "every session was renewed, period after period")
	require.LessOrEqual(t, commands*8, renewals, "keep-alives went in batches (%d commands for %d renewals)", commands, renewals)
	require.LessOrEqual(t, after.KeepAliveEntries-before.KeepAliveEntries, commands)
}
