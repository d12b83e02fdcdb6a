package metrics

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// The contention figures count this process's lock calls in the group
// they name: a wait that blocked until a release is at least as long as
// the time from the call to the release, a hold at least the time from the
// grant to the release; a deadline and a cancel are counted apart, a Try
// refused is not counted. The default group sees none of it.
func TestCollectorContention(t *testing.T) {
	ctx := testCtx(t)
	n := startBilling(t, ctx)
	reg := registry(t, n)
	requireLint(t, reg)

	holder, err := n.NewSession(ctx)
	require.NoError(t, err)
	waiter, err := n.NewSession(ctx)
	require.NoError(t, err)
	grantStarted := time.Now()
	held, err := holder.Acquire(ctx, "job@billing")
	require.NoError(t, err)
	grantedAt := time.Now()

	_, err = waiter.TryAcquire(ctx, "job@billing")
	require.ErrorIs(t, err, fencelock.ErrLocked)
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = waiter.Acquire(short, "job@billing")
	stop()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	gone, stop := context.WithCancel(ctx)
	queued := make(chan error, 1)
	go func() {
		_, err := waiter.Acquire(gone, "job@billing", fencelock.WithQueuePosition(func(int) { stop() }))
		queued <- err
	}()
	require.ErrorIs(t, <-queued, context.Canceled)

	// A waiter that blocks until the release below.
	type result struct {
		l   *fencelock.Lock
		err error
	}
	in := make(chan struct{})
	var once sync.Once
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, "job@billing", fencelock.WithQueuePosition(func(int) { once.Do(func() { close(in) }) }))
		got <- result{l, err}
	}()
	select {
	case <-in: // queued behind the holder
	case <-ctx.Done():
		t.Fatal("the waiter never queued")
	}
	queuedAt := time.Now() // the waiter's call began before
	// The holder works on a while, so that the wait is measurably long
	// (not a synchronisation: the order is already fixed).
	time.Sleep(20 * time.Millisecond)
	releasing := time.Now() // the waiter is granted after
	require.NoError(t, held.Release(ctx))
	r := <-got
	returned := time.Now()
	require.NoError(t, r.err)
	require.NoError(t, r.l.Release(ctx))

	st := n.Stats()
	require.Len(t, st.Groups, 2)
	def, billing := st.Groups[0].Contention, st.Groups[1].Contention
	require.Zero(t, def.Grants+def.Timeouts+def.Cancellations+def.Wait.Count+def.Hold.Count, "the default group saw no lock call")
	require.Equal(t, st.Contention, def, "Stats' own figures are the default group's")
	require.EqualValues(t, 2, billing.Grants)
	require.EqualValues(t, 1, billing.Timeouts)
	require.EqualValues(t, 1, billing.Cancellations)
	require.EqualValues(t, 2, billing.Wait.Count)
	require.GreaterOrEqual(t, billing.Wait.Sum, releasing.Sub(queuedAt),
		"the blocked call's wait covers the time from its queueing to the release")
	require.LessOrEqual(t, billing.Wait.Sum, returned.Sub(grantStarted), "and no more than the calls took")
	require.EqualValues(t, 2, billing.Hold.Count)
	require.GreaterOrEqual(t, billing.Hold.Sum, releasing.Sub(grantedAt))

	m := scrape(t, reg)
	require.Equal(t, 2.0, m["fencelock_acquire_grants_total{group=billing}"])
	require.Equal(t, 1.0, m["fencelock_acquire_timeouts_total{group=billing}"])
	require.Equal(t, 1.0, m["fencelock_acquire_cancellations_total{group=billing}"])
	require.Equal(t, 2.0, m["fencelock_acquire_wait_seconds{group=billing}"])
	require.Equal(t, 2.0, m["fencelock_lock_hold_seconds{group=billing}"])
	require.Equal(t, 0.0, m["fencelock_acquire_grants_total"], "the default group's")
}

// fencelock_election_is_leader is 1 while a session of this process leads
// the election, 0 once it resigned, and stays listed; an election this
// process never campaigned in has no series.
func TestCollectorIsLeader(t *testing.T) {
	ctx := testCtx(t)
	n := startBilling(t, ctx)
	reg := registry(t, n)
	s, err := n.NewSession(ctx)
	require.NoError(t, err)
	lead, err := s.Campaign(ctx, "primary@billing", "me")
	require.NoError(t, err)
	other, err := n.NewSession(ctx)
	require.NoError(t, err)
	_, err = other.TryCampaign(ctx, "primary@billing", "them")
	require.True(t, errors.Is(err, fencelock.ErrElectionTaken), "%v", err)
	m := scrape(t, reg)
	require.Equal(t, 1.0, m["fencelock_election_is_leader{election=primary@billing}{group=billing}"])
	require.NotContains(t, m, "fencelock_election_is_leader{election=other}")

	require.NoError(t, lead.Resign(ctx))
	m = scrape(t, reg)
	v, ok := m["fencelock_election_is_leader{election=primary@billing}{group=billing}"]
	require.True(t, ok, "the election stays listed")
	require.Equal(t, 0.0, v)

	// A leadership lost with its session counts down too.
	lead, err = s.Campaign(ctx, "primary@billing", "me")
	require.NoError(t, err)
	require.Equal(t, 1.0, scrape(t, reg)["fencelock_election_is_leader{election=primary@billing}{group=billing}"])
	require.NoError(t, s.Close(ctx))
	<-lead.Done()
	require.Equal(t, 0.0, scrape(t, reg)["fencelock_election_is_leader{election=primary@billing}{group=billing}"])
}
