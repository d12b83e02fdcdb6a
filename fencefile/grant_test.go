//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fencefile

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// heldLock starts a one-replica group on c and returns a lock held on it,
// its session frozen so that no keep-alive moves the deadline on.
func heldLock(t *testing.T, ctx context.Context, c clock.Clock, ttl time.Duration) *fencelock.Lock {
	t.Helper()
	node := fencelocktest.NewCluster(t, 1, fencelocktest.WithConfig(func(cfg *fencelock.Config) { testhook.UseClock(cfg, c) })).Node(1)
	s, err := node.NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	lock, err := s.Acquire(ctx, "feed")
	require.NoError(t, err)
	testhook.Freeze(s)
	t.Cleanup(func() { testhook.Thaw(s) })
	return lock
}

// AppendGrant and ClaimGrant re-check the grant under the file's lock,
// immediately before writing: a holder whose deadline passes while it waits
// for the lock (here the clock jumps once the lock is taken, as a pause
// there would make it) writes neither the record nor the mark, though no
// successor has claimed the file and its token is the highest; later calls
// are refused before they take the lock. The deadline timer, many seconds
// away in real time, has not run: only the re-check by the holder's clock
// refuses.
func TestAppendGrantRechecksUnderTheLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := &clock.Ahead{}
	const ttl = 20 * time.Second
	lock := heldLock(t, ctx, c, ttl)
	lctx := lock.Context(ctx)
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)

	require.NoError(t, f.ClaimGrant(lctx, lock.Fence()))
	require.NoError(t, f.AppendGrant(lctx, lock.Fence(), []byte("in time")))

	lockedForTest = func() { c.Set(2 * ttl) } // the pause, between the lock and the write
	err = f.AppendGrant(lctx, lock.Fence(), []byte("after the deadline"))
	lockedForTest = nil
	require.ErrorIs(t, err, fencelock.ErrSessionExpired)

	var locked atomic.Int32
	lockedForTest = func() { locked.Add(1) }
	defer func() { lockedForTest = nil }()
	require.ErrorIs(t, f.AppendGrant(lctx, lock.Fence(), []byte("later")), fencelock.ErrSessionExpired)
	require.ErrorIs(t, f.ClaimGrant(lctx, lock.Fence()), fencelock.ErrSessionExpired)
	require.Zero(t, locked.Load(), "a grant that is over does not wait for the lock")

	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{lock.Token(), "in time"}}, records, "nothing after the deadline was written")
	mark, err := readMark(path)
	require.NoError(t, err)
	require.Equal(t, lock.Fence(), mark)
}

// ClaimGrant keys the file and raises its mark, and a canceled context
// writes nothing, like an ended grant.
func TestClaimGrantAndCanceledContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lock := heldLock(t, ctx, clock.Real, 20*time.Second)
	lctx := lock.Context(ctx)
	f, err := Open(filepath.Join(t.TempDir(), "resource.log"))
	require.NoError(t, err)
	require.NoError(t, f.ClaimGrant(lctx, fencelock.Fence{Group: 0xfeed, Token: lock.Token()}))
	g, err := f.Group()
	require.NoError(t, err)
	require.Equal(t, uint64(0xfeed), g)
	h, err := f.Highest()
	require.NoError(t, err)
	require.Equal(t, lock.Token(), h)

	canceled, stop := context.WithCancel(lctx)
	stop()
	require.ErrorIs(t, f.AppendGrant(canceled, fencelock.Fence{Group: 0xfeed, Token: lock.Token() + 1}, []byte("x")), context.Canceled)
	h, err = f.Highest()
	require.NoError(t, err)
	require.Equal(t, lock.Token(), h, "a canceled write raised nothing")
}
