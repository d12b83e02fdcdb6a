package integration_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// A process that restarts within its session's TTL takes the session back
// with its lock and its leadership, tokens unchanged; what it had queued is
// withdrawn, and the lock still passes on in FIFO order when released.
func TestResumeSessionAfterRestart(t *testing.T) {
	c, ctx := newCluster(t, 3)
	s := newSession(t, ctx, c.Node(1), fencelock.WithTTL(30*time.Second))
	l, err := s.Acquire(ctx, "L")
	require.NoError(t, err)
	lead, err := s.Campaign(ctx, "E", "primary-1")
	require.NoError(t, err)
	permit, err := s.AcquireSemaphore(ctx, "S", 2)
	require.NoError(t, err)
	other, m := holding(t, ctx, c.Node(2), "M")
	next := acquireAsync(ctx, other, "L")
	waitWaiters(t, ctx, c.Node(3), "L", 1)
	queued := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "M")
		queued <- err
	}()
	waitWaiters(t, ctx, c.Node(3), "M", 1)

	saved := s.Resume().String()
	c.Crash(1) // the process dies: nothing is closed at the group
	require.ErrorIs(t, <-queued, fencelock.ErrClosed)
	c.Restart(1)

	tok, err := fencelock.ParseResumeToken(saved)
	require.NoError(t, err)
	require.Equal(t, s.ID(), tok.SessionID())
	rs, err := c.Node(1).ResumeSession(ctx, tok)
	require.NoError(t, err)
	require.Equal(t, s.ID(), rs.ID())
	require.Equal(t, s.TTL(), rs.TTL())
	locks, leads := rs.Locks(), rs.Leaderships()
	require.Len(t, locks, 2)
	require.Equal(t, "L", locks[0].Name())
	require.Equal(t, l.Token(), locks[0].Token())
	require.False(t, locks[0].Shared())
	require.Equal(t, []any{"S", permit.Token(), true, 2}, []any{locks[1].Name(), locks[1].Token(), locks[1].Shared(), locks[1].Permits()},
		"a semaphore's permit is kept as one")
	require.NoError(t, locks[1].Release(ctx))
	require.Len(t, leads, 1)
	require.Equal(t, lead.Token(), leads[0].Token(), "the term and its epoch stay")
	require.Equal(t, "primary-1", leads[0].Value())
	info, err := c.Node(3).Leader(ctx, "E")
	require.NoError(t, err)
	require.Equal(t, rs.ID(), info.SessionID)
	require.Zero(t, inspect(t, ctx, c.Node(3), "M").Waiters, "the dead process's queued acquire was withdrawn")
	require.Equal(t, 1, inspect(t, ctx, c.Node(3), "L").Waiters)

	// The resumed session works as any other: its renewals keep it, its
	// release hands the lock to the head of the queue.
	require.NoError(t, leads[0].Proclaim(ctx, "primary-2"))
	require.NoError(t, locks[0].Release(ctx))
	<-locks[0].Done()
	nl := (<-next).l
	require.NotNil(t, nl)
	require.Greater(t, nl.Token(), l.Token())
	n, err := rs.Acquire(ctx, "N")
	require.NoError(t, err)
	require.NoError(t, n.Release(ctx))
	require.NoError(t, m.Release(ctx))
	require.NoError(t, rs.Close(ctx))
	<-leads[0].Done()
	require.False(t, inspect(t, ctx, c.Node(3), "E").Held)
}

// A second process that resumes the session while the first still runs
// takes it over: the first finds its session over at its next keep-alive,
// and nothing it sends afterwards changes the group.
func TestResumeEndsTheOldIncarnation(t *testing.T) {
	c, ctx := newCluster(t, 3)
	old := newSession(t, ctx, c.Node(1), fencelock.WithTTL(3*time.Second))
	l, err := old.Acquire(ctx, "L")
	require.NoError(t, err)

	_, err = c.Node(1).ResumeSession(ctx, old.Resume())
	require.ErrorIs(t, err, fencelock.ErrInvalidResumeToken, "the session is open in this process")

	rs, err := c.Node(2).ResumeSession(ctx, old.Resume())
	require.NoError(t, err)
	select {
	case <-old.Done():
	case <-ctx.Done():
		t.Fatal("the old incarnation never learned its session was taken")
	}
	require.ErrorIs(t, old.Err(), fencelock.ErrSessionExpired)
	require.ErrorIs(t, l.Err(), fencelock.ErrSessionExpired)
	require.Error(t, l.Release(ctx))
	require.NoError(t, old.Close(ctx))
	info := inspect(t, ctx, c.Node(3), "L")
	require.True(t, info.Held, "the old incarnation's release and close changed nothing")
	require.Equal(t, rs.ID(), info.SessionID)
	require.Equal(t, l.Token(), info.Token)
	require.NoError(t, rs.Err())
	require.Len(t, rs.Locks(), 1)
}

// A resume that takes longer than the holder's deadline to apply (its
// replica cut off meanwhile, while the old process still renews the
// session) still hands over a live session with its grants: the resume
// renews it at once rather than return one that gives itself up.
func TestSlowResumeRenewsAtOnce(t *testing.T) {
	c, ctx := newCluster(t, 3)
	const ttl = 3 * time.Second
	old := newSession(t, ctx, c.Node(1), fencelock.WithTTL(ttl))
	l, err := old.Acquire(ctx, "L")
	require.NoError(t, err)

	c.Network().Isolate(c.Addr(2))
	resumed := make(chan *fencelock.Session, 1)
	go func() {
		s, err := c.Node(2).ResumeSession(ctx, old.Resume())
		assert.NoError(t, err)
		resumed <- s
	}()
	// The fault lasts past the deadline a resume earns at its send
	// (TTL − margin); the old process renews the session meanwhile.
	time.Sleep(ttl)
	c.Network().Heal()
	s := <-resumed
	require.NotNil(t, s)
	require.NoError(t, s.Err(), "the resumed session lives")
	locks := s.Locks()
	require.Len(t, locks, 1)
	require.Equal(t, l.Token(), locks[0].Token())
	<-old.Done() // the old incarnation learns its session was taken
	require.NoError(t, s.Err())
	require.NoError(t, locks[0].Release(ctx))
}

// A token taken once its process's node has closed (a shutdown hook that
// saves it last) or crashed still names the session's parts in named
// groups: those parts ended there only, the groups keep them, and a resume
// takes their locks back as it does the default group's.
func TestResumeTokenTakenAfterTheNodeClosed(t *testing.T) {
	for _, how := range []string{"close", "crash"} {
		t.Run(how, func(t *testing.T) {
			c := fencelocktest.NewCluster(t, 3, withGroups(fencelock.GroupConfig{Name: "g", Voters: []uint64{1, 2, 3}}))
			ctx := testCtx(t)
			s := newSession(t, ctx, c.Node(1), fencelock.WithTTL(30*time.Second))
			named, err := s.Acquire(ctx, "x@g")
			require.NoError(t, err)
			def, err := s.Acquire(ctx, "y")
			require.NoError(t, err)
			if how == "close" {
				c.Stop(1)
			} else {
				c.Crash(1)
			}
			<-named.Done()
			tok := s.Resume()

			rs, err := c.Node(2).ResumeSession(ctx, tok)
			require.NoError(t, err)
			got := map[string]uint64{}
			for _, l := range rs.Locks() {
				got[l.Name()] = l.Token()
			}
			require.Equal(t, map[string]uint64{"x@g": named.Token(), "y": def.Token()}, got)
			require.NoError(t, rs.Close(ctx))
		})
	}
}
