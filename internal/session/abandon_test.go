package session

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

// A session given up in this process only (Abandon: the HTTP service's
// Close, before it cancels the waits it runs) leaves its queued requests in
// their queues for the replica that adopts it, even when the wait's
// context ends at once after: the part's end decides, not select's pick
// between the two. (The service's adoption test caught a re-issued acquire
// queued behind the request it should have kept, under CI's load.)
func TestAbandonedWaitIsNotWithdrawn(t *testing.T) {
	o := Options{TTL: 30 * time.Second, Margin: time.Second}
	ctx, tg, holder := openInTwoGroups(t, 2*time.Minute, o)
	_, err := acquire(ctx, holder, "", "x")
	require.NoError(t, err)
	r := tg.groups.m[""]
	queue := func() []uint64 {
		v, err := r.Read(ctx, func(st *fsm.State) any { return st.Queue("x", fsm.MaxWaitersPerLock) })
		require.NoError(t, err)
		return v.([]uint64)
	}
	for round := range 20 {
		s, err := tg.h.Open(ctx, o, nil)
		require.NoError(t, err)
		wctx, stop := context.WithCancel(ctx)
		ended := make(chan error, 1)
		go func() {
			_, err := acquire(wctx, s, "", "x")
			ended <- err
		}()
		require.Eventually(t, func() bool { return slices.Contains(queue(), s.ID()) }, time.Minute, 5*time.Millisecond)
		s.Abandon(errors.New("test: given up here"))
		stop() // at once: the wait sees both its part's end and its context's
		<-ended
		require.Contains(t, queue(), s.ID(), "round %d: the abandoned session's request stays queued", round)
	}
}

// A holder that finds its lock over because the session's default part
// ended finds the session over too, even while another goroutine is still
// between the part's end and the session's (the renewer that gave the part
// up by the holder's clock, preempted there): Err does not answer nil for
// a session whose locks are gone. (CI caught Session.Err answering nil
// right after Lock.Err answered ErrSessionExpired, under load.)
func TestSessionOverOnceItsDefaultPartIs(t *testing.T) {
	ctx, _, s := openInTwoGroups(t, time.Minute, Options{TTL: 30 * time.Second, Margin: time.Second})
	g, err := acquire(ctx, s, "", "x")
	require.NoError(t, err)

	// The renewer's giveUp, stopped half way: the part and its grants
	// ended, the session not yet told.
	require.True(t, s.def.endAlone(ErrSessionExpired))
	require.ErrorIs(t, g.Err(), ErrSessionExpired)
	resumed := make(chan struct{})
	go func() { // the renewer goes on, on its own goroutine
		defer close(resumed)
		s.partEnded(s.def, ErrSessionExpired)
	}()
	require.ErrorIs(t, s.Err(), ErrSessionExpired, "the session answered nil while its lock was over")
	<-resumed
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed once Err answered")
	}
}
