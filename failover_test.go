package fencelock

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

// A paused holder (its process frozen past the TTL, its node alive) finds
// Lock.Done closed by its own clock, its late Release changes nothing, and
// its late write is refused by the resource.
func TestPausedHolderIsFencedOff(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const ttl = time.Second
	a := newSession(t, ctx, c.node(2), WithTTL(ttl))
	b := newSession(t, ctx, c.node(3))
	storage := NewFencer()

	la, err := a.Acquire(ctx, "file")
	require.NoError(t, err)
	require.NoError(t, storage.Admit("file", la.Token()))
	res := stoppedFirst(a, func() (*Lock, error) { return b.Acquire(ctx, "file") })
	waitWaiters(t, ctx, c.node(1), "file", 1)

	// The holder's replica is cut off too, so that the holder cannot
	// learn of its expiry from the group: its own deadline must stop it.
	cutOff(t, c, a, 2)
	successor := requireStoppedFirst(t, res, "the group passed the lock on while the holder still believed it held it")
	require.ErrorIs(t, la.Err(), ErrSessionExpired)
	require.ErrorIs(t, a.Err(), ErrSessionExpired)
	require.Greater(t, successor.Token(), la.Token())
	c.net.Heal()
	require.NoError(t, storage.Admit("file", successor.Token()))

	testhook.Thaw(a)
	requireStaleWriteRefused(t, storage, "file", la.Token())
	require.ErrorIs(t, la.Release(ctx), ErrNotHeld)
	require.Equal(t, b.ID(), inspect(t, ctx, c.node(1), "file").SessionID, "the late release freed nothing")
}

// handover is what a successor's Acquire or Campaign returned, and whether
// the holder's session had closed Done by itself by then.
type handover[T any] struct {
	next          T
	err           error
	holderStopped bool
}

// stoppedFirst runs call, a successor's Acquire or Campaign, and sends its
// result with whether holder had stopped first: the order is taken where the
// grant happens, when call returns. (It reads the raw channel: Done() would
// check the deadline itself.)
func stoppedFirst[T any](holder *Session, call func() (T, error)) <-chan handover[T] {
	res := make(chan handover[T], 1)
	go func() {
		got, err := call()
		res <- handover[T]{got, err, closed(holder.s.Testing().Done())}
	}()
	return res
}

// requireStoppedFirst returns the successor's grant from res, and fails the
// test with msg unless the holder had stopped by its own clock first.
func requireStoppedFirst[T any](t *testing.T, res <-chan handover[T], msg string) T {
	t.Helper()
	r := <-res
	require.NoError(t, r.err)
	require.True(t, r.holderStopped, msg)
	return r.next
}

// cutOff freezes holder's process (until the test ends, or it thaws holder)
// and isolates the replica it uses, so that it cannot learn of its expiry
// from the group.
func cutOff(t *testing.T, c *testCluster, holder *Session, replica uint64) {
	testhook.Freeze(holder)
	t.Cleanup(func() { testhook.Thaw(holder) })
	c.net.Isolate(c.members[replica])
}

// requireStaleWriteRefused checks that storage refuses, and never runs, a
// write to name under a deposed holder's token.
func requireStaleWriteRefused(t *testing.T, storage *Fencer, name string, token uint64) {
	t.Helper()
	require.ErrorIs(t, storage.Do(name, token, func() error {
		t.Error("the stale holder's write ran")
		return nil
	}), ErrStaleToken)
}

// A replica that was down while the log was compacted past it catches up from
// a snapshot, and serves reads and sessions with the same state.
func TestRestartedReplicaCatchesUpFromSnapshot(t *testing.T) {
	c := newCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries, cfg.CompactionOverhead = 20, 5 })
	ctx := testCtx(t)
	leader := c.leader(ctx)
	lagging := leader%3 + 1
	other := lagging%3 + 1
	s0 := newSession(t, ctx, c.node(lagging))
	require.NoError(t, s0.Close(ctx))
	stoppedAt := c.node(lagging).Status().AppliedIndex
	c.crash(lagging)

	s := newSession(t, ctx, c.node(other))
	var held *Lock
	for i := range 60 {
		l, err := s.Acquire(ctx, "k")
		require.NoError(t, err)
		if i == 59 {
			held = l
			break
		}
		require.NoError(t, l.Release(ctx))
	}
	n := c.start(lagging)
	waitUntil(t, ctx, "the restarted replica catches up", func() bool {
		return n.Status().AppliedIndex >= c.node(other).Status().AppliedIndex
	})
	require.Greater(t, n.r.RestoredIndex(), stoppedAt+20, "the replica caught up from a snapshot")
	local, err := n.r.StaleRead(fsm.Query(func(st *fsm.State) any { return st.Lock("k") }))
	require.NoError(t, err)
	require.Equal(t, held.Token(), local.(fsm.LockInfo).Token, "its local state has the latest grant")

	s3 := newSession(t, ctx, n)
	res := acquireAsync(ctx, s3, "k")
	waitWaiters(t, ctx, n, "k", 1)
	require.NoError(t, held.Release(ctx))
	r := <-res
	require.NoError(t, r.err, "a waiter on the caught-up replica is woken by its own apply")
	require.Greater(t, r.l.Token(), held.Token())
}

// An expiry decided by a deposed leader (its proposal forwarded, retried or
// delayed past the election) never applies in its successor's term: it names
// the old leader's marker. It names a keep-alive no later one can overrule,
// so only the marker can refuse it.
func TestDeposedLeadersExpiryIsRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	old := c.leader(ctx)
	f1 := old%3 + 1
	s := newSession(t, ctx, c.node(f1))
	mark := func() uint64 {
		v, err := c.node(f1).r.Read(ctx, func(st *fsm.State) any { return st.LeaderMark() })
		require.NoError(t, err)
		return v.(uint64)
	}
	require.Eventually(t, func() bool { return mark() != 0 }, 30*time.Second, 10*time.Millisecond,
		"the leader commits its marker")
	oldMark := mark()

	c.crash(old)
	require.NotEqual(t, old, c.leader(ctx))
	require.Eventually(t, func() bool { return mark() != oldMark }, 30*time.Second, 10*time.Millisecond,
		"the new leader commits its own marker")

	res, err := c.node(f1).r.Propose(ctx, fsm.Command{Kind: fsm.KindExpire, Session: s.ID(), Target: math.MaxUint64, Mark: oldMark})
	require.NoError(t, err)
	require.Equal(t, fsm.NotApplied, res.Status)
	require.NoError(t, s.Err(), "the session lives on")
	_, err = s.Acquire(ctx, "after")
	require.NoError(t, err)
}
