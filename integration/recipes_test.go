package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// Readers share the lock; a writer queued behind them waits for both, and
// a reader that comes after the writer waits for the writer: the queue is
// FIFO across modes, and every grant has a larger token.
func TestSharedLockFairModeSwitching(t *testing.T) {
	c, ctx := newCluster(t, 3)
	r1, r2 := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	w, r3 := newSession(t, ctx, c.Node(3)), newSession(t, ctx, c.Node(1))

	l1, err := r1.AcquireShared(ctx, "doc")
	require.NoError(t, err)
	l2, err := r2.TryAcquireShared(ctx, "doc")
	require.NoError(t, err)
	require.True(t, l1.Shared())
	require.True(t, l2.Shared())
	require.Zero(t, l1.Permits())
	require.Greater(t, l2.Token(), l1.Token())
	info := inspect(t, ctx, c.Node(3), "doc")
	require.True(t, info.Held)
	require.True(t, info.Shared)
	require.Equal(t, []uint64{r1.ID(), r2.ID()}, holderIDs(info))
	require.Equal(t, l1.Token(), info.Token, "the oldest grant")
	require.Equal(t, []fencelock.Holder{{SessionID: r1.ID(), PartID: r1.ID(), Token: l1.Token(), Owner: 1}, {SessionID: r2.ID(), PartID: r2.ID(), Token: l2.Token(), Owner: 2}}, unnamed(t, info).Holders)

	_, err = w.TryAcquire(ctx, "doc")
	require.ErrorIs(t, err, fencelock.ErrLocked)
	writer := acquireAsync(ctx, w, "doc")
	waitWaiters(t, ctx, c.Node(1), "doc", 1)
	_, err = r3.TryAcquireShared(ctx, "doc")
	require.ErrorIs(t, err, fencelock.ErrLocked, "a reader does not overtake a queued writer")
	reader := acquireSharedAsync(ctx, r3, "doc")
	waitWaiters(t, ctx, c.Node(1), "doc", 2)

	require.NoError(t, l1.Release(ctx))
	notYet(t, writer, "the writer, while a reader holds")
	require.Equal(t, []uint64{r2.ID()}, holderIDs(inspect(t, ctx, c.Node(2), "doc")))

	require.NoError(t, l2.Release(ctx))
	wr := <-writer
	require.NoError(t, wr.err)
	require.False(t, wr.l.Shared())
	require.Greater(t, wr.l.Token(), l2.Token(), "the writer's token is above every reader's before it")
	notYet(t, reader, "the reader behind the writer")
	info = inspect(t, ctx, c.Node(1), "doc")
	require.False(t, info.Shared)
	require.Equal(t, []uint64{w.ID()}, holderIDs(info))

	require.NoError(t, wr.l.Release(ctx))
	rd := <-reader
	require.NoError(t, rd.err)
	require.Greater(t, rd.l.Token(), wr.l.Token())
	require.NoError(t, rd.l.Release(ctx))
	require.Equal(t, fencelock.LockInfo{Name: "doc"}, inspect(t, ctx, c.Node(2), "doc"))
}

// A semaphore admits permits holders with a token each, queues the rest
// FIFO, and refuses a request naming another count, changing nothing.
func TestSemaphorePermitsAndConflicts(t *testing.T) {
	c, ctx := newCluster(t, 3)
	a, b, d := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2)), newSession(t, ctx, c.Node(3))

	la, err := a.AcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	lb, err := b.TryAcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	require.True(t, la.Shared())
	require.Equal(t, 2, lb.Permits())
	require.Greater(t, lb.Token(), la.Token())
	_, err = d.TryAcquireSemaphore(ctx, "pool", 2)
	require.ErrorIs(t, err, fencelock.ErrLocked, "full")

	before := inspect(t, ctx, c.Node(3), "pool")
	require.Equal(t, 2, before.Permits)
	require.Equal(t, []uint64{a.ID(), b.ID()}, holderIDs(before))
	for _, try := range []func() (*fencelock.Lock, error){
		func() (*fencelock.Lock, error) { return d.AcquireSemaphore(ctx, "pool", 3) },
		func() (*fencelock.Lock, error) { return d.TryAcquireSemaphore(ctx, "pool", 1) },
		func() (*fencelock.Lock, error) { return d.Acquire(ctx, "pool") },
		func() (*fencelock.Lock, error) { return d.AcquireShared(ctx, "pool") },
	} {
		l, err := try()
		require.ErrorIs(t, err, fencelock.ErrPermitConflict)
		require.Nil(t, l)
	}
	require.Equal(t, before, inspect(t, ctx, c.Node(1), "pool"), "a conflict changes nothing")
	for _, n := range []int{0, -1, fencelock.MaxHoldersPerLock + 1} {
		_, err = d.AcquireSemaphore(ctx, "pool", n)
		require.ErrorIs(t, err, fencelock.ErrInvalidPermits)
		_, err = d.TryAcquireSemaphore(ctx, "pool", n)
		require.ErrorIs(t, err, fencelock.ErrInvalidPermits)
	}
	// A lock's name is not a semaphore's.
	lk, err := d.Acquire(ctx, "plain")
	require.NoError(t, err)
	_, err = a.AcquireSemaphore(ctx, "plain", 2)
	require.ErrorIs(t, err, fencelock.ErrPermitConflict)
	require.NoError(t, lk.Release(ctx))

	third := make(chan acquired, 1)
	go func() {
		l, err := d.AcquireSemaphore(ctx, "pool", 2)
		third <- acquired{l, err}
	}()
	waitWaiters(t, ctx, c.Node(2), "pool", 1)
	require.NoError(t, la.Release(ctx))
	r := <-third
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), lb.Token())
	page, err := c.Node(1).Locks(ctx, "pool")
	require.NoError(t, err)
	require.Len(t, page.Locks, 1)
	require.Equal(t, []uint64{b.ID(), d.ID()}, holderIDs(page.Locks[0].LockInfo))
	require.Equal(t, uint64(2), page.Locks[0].Owner, "the oldest holder's replica")

	// Revoke ends every permit; the semaphore is gone and takes a new count.
	require.NoError(t, c.Node(2).Revoke(ctx, "pool"))
	<-lb.Done()
	<-r.l.Done()
	require.ErrorIs(t, lb.Err(), fencelock.ErrRevoked)
	require.ErrorIs(t, r.l.Err(), fencelock.ErrRevoked)
	l5, err := a.AcquireSemaphore(ctx, "pool", 5)
	require.NoError(t, err)
	require.Equal(t, 5, inspect(t, ctx, c.Node(3), "pool").Permits)
	require.NoError(t, l5.Release(ctx))
}

// Watch reports every holder of a shared lock.
func TestWatchShowsSharedHolders(t *testing.T) {
	c, ctx := newCluster(t, 3)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch := c.Node(3).Watch(wctx, "doc")
	a, b := newSession(t, ctx, c.Node(1)), newSession(t, ctx, c.Node(2))
	la, err := a.AcquireShared(ctx, "doc")
	require.NoError(t, err)
	lb, err := b.AcquireShared(ctx, "doc")
	require.NoError(t, err)
	both := until(t, ctx, ch, "both readers", func(i fencelock.LockInfo) bool { return len(i.Holders) == 2 })
	require.True(t, both.Shared)
	require.Equal(t, []fencelock.Holder{{SessionID: a.ID(), PartID: a.ID(), Token: la.Token(), Owner: 1}, {SessionID: b.ID(), PartID: b.ID(), Token: lb.Token(), Owner: 2}}, unnamed(t, both).Holders)
	require.NoError(t, la.Release(ctx))
	one := until(t, ctx, ch, "one reader", func(i fencelock.LockInfo) bool { return len(i.Holders) == 1 })
	require.Equal(t, lb.Token(), one.Token)
	require.NoError(t, lb.Release(ctx))
	until(t, ctx, ch, "free", func(i fencelock.LockInfo) bool { return !i.Held })
}

func acquireSharedAsync(ctx context.Context, s *fencelock.Session, name string) <-chan acquired {
	return async(func() (*fencelock.Lock, error) { return s.AcquireShared(ctx, name) })
}

// holderIDs returns the session ID of each of the lock's holders.
func holderIDs(info fencelock.LockInfo) []uint64 {
	return mapped(info.Holders, func(h fencelock.Holder) uint64 { return h.SessionID })
}

func notYet(t *testing.T, ch <-chan acquired, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s was granted early: %+v", what, r)
	case <-time.After(100 * time.Millisecond):
	}
}
