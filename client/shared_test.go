package client

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

func TestSharedAndSemaphore(t *testing.T) {
	g := newGroup(t)
	ctx := testCtx(t)
	c1, c2 := newClient(t, g.urls[1]), newClient(t, g.urls[2])
	s1, err := c1.NewSession(ctx, fencelock.WithTTL(5*time.Second))
	require.NoError(t, err)
	s2, err := c2.NewSession(ctx, fencelock.WithTTL(5*time.Second))
	require.NoError(t, err)
	s3, err := c1.NewSession(ctx, fencelock.WithTTL(5*time.Second))
	require.NoError(t, err)

	// Two sessions' shared acquires, concurrently: both granted at once.
	var wg sync.WaitGroup
	locks := make([]*Lock, 2)
	errs := make([]error, 2)
	for i, s := range []*Session{s1, s2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			locks[i], errs[i] = s.AcquireShared(ctx, "rw")
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.NotEqual(t, locks[0].Token(), locks[1].Token())
	require.Nil(t, locks[0].Err())
	require.Nil(t, locks[1].Err())
	_, err = s3.TryAcquire(ctx, "rw")
	require.ErrorIs(t, err, fencelock.ErrLocked)
	_, err = s3.AcquireSemaphore(ctx, "rw", 2)
	require.ErrorIs(t, err, fencelock.ErrPermitConflict)
	require.NoError(t, locks[0].Release(ctx))
	require.NoError(t, locks[1].Release(ctx))

	// A semaphore of 2: two permits, a third try is refused.
	p1, err := s1.AcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	p2, err := s2.AcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	_, err = s3.TryAcquireSemaphore(ctx, "pool", 2)
	require.ErrorIs(t, err, fencelock.ErrLocked)
	_, err = s3.AcquireSemaphore(ctx, "pool", 3)
	require.ErrorIs(t, err, fencelock.ErrPermitConflict)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "permit_conflict", e.Code)
	_, err = s3.Acquire(ctx, "pool")
	require.ErrorIs(t, err, fencelock.ErrPermitConflict)
	require.NoError(t, p1.Release(ctx))
	p3, err := s3.AcquireSemaphore(ctx, "pool", 2)
	require.NoError(t, err)
	require.NoError(t, p2.Release(ctx))
	require.NoError(t, p3.Release(ctx))

	// WithMaxHold: the holder stops first, and the next in line is granted.
	l, err := s1.Acquire(ctx, "bounded", fencelock.WithMaxHold(2*time.Second))
	require.NoError(t, err)
	start := time.Now()
	next, err := s2.Acquire(ctx, "bounded")
	require.NoError(t, err)
	select {
	case <-l.Done():
	default:
		t.Fatal("the next holder was granted before the bounded one stopped")
	}
	require.ErrorIs(t, l.Err(), fencelock.ErrMaxHoldExceeded)
	require.Greater(t, time.Since(start), time.Second)
	require.Nil(t, s1.Err())
	require.NoError(t, next.Release(ctx))
}
