package fencelock

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A process that restarts within its session's TTL takes the session back
// with its lock and its leadership, tokens unchanged; what it had queued is
// withdrawn, and the lock still passes on in FIFO order when released.
func TestResumeSessionAfterRestart(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.node(1), WithTTL(30*time.Second))
	l, err := s.Acquire(ctx, "L")
	require.NoError(t, err)
	lead, err := s.Campaign(ctx, "E", "primary-1")
	require.NoError(t, err)
	permit, err := s.AcquireSemaphore(ctx, "S", 2)
	require.NoError(t, err)
	other := newSession(t, ctx, c.node(2))
	m, err := other.Acquire(ctx, "M")
	require.NoError(t, err)
	next := make(chan *Lock, 1)
	go func() {
		nl, err := other.Acquire(ctx, "L")
		if err == nil {
			next <- nl
		}
		close(next)
	}()
	waitWaiters(t, ctx, c.node(3), "L", 1)
	queued := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "M")
		queued <- err
	}()
	waitWaiters(t, ctx, c.node(3), "M", 1)

	saved := s.Resume().String()
	c.crash(1) // the process dies: nothing is closed at the group
	require.ErrorIs(t, <-queued, ErrClosed)
	c.start(1)

	tok, err := ParseResumeToken(saved)
	require.NoError(t, err)
	require.Equal(t, s.ID(), tok.SessionID())
	rs, err := c.node(1).ResumeSession(ctx, tok)
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
	info, err := c.node(3).Leader(ctx, "E")
	require.NoError(t, err)
	require.Equal(t, rs.ID(), info.SessionID)
	require.Zero(t, inspect(t, ctx, c.node(3), "M").Waiters, "the dead process's queued acquire was withdrawn")
	require.Equal(t, 1, inspect(t, ctx, c.node(3), "L").Waiters)

	// The resumed session works as any other: its renewals keep it, its
	// release hands the lock to the head of the queue.
	require.NoError(t, leads[0].Proclaim(ctx, "primary-2"))
	require.NoError(t, locks[0].Release(ctx))
	<-locks[0].Done()
	nl := <-next
	require.NotNil(t, nl)
	require.Greater(t, nl.Token(), l.Token())
	n, err := rs.Acquire(ctx, "N")
	require.NoError(t, err)
	require.NoError(t, n.Release(ctx))
	require.NoError(t, m.Release(ctx))
	require.NoError(t, rs.Close(ctx))
	<-leads[0].Done()
	require.False(t, inspect(t, ctx, c.node(3), "E").Held)
}

// A second process that resumes the session while the first still runs
// takes it over: the first finds its session over at its next keep-alive,
// and nothing it sends afterwards changes the group.
func TestResumeEndsTheOldIncarnation(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	old := newSession(t, ctx, c.node(1), WithTTL(3*time.Second))
	l, err := old.Acquire(ctx, "L")
	require.NoError(t, err)

	_, err = c.node(1).ResumeSession(ctx, old.Resume())
	require.ErrorIs(t, err, ErrInvalidResumeToken, "the session is open in this process")

	rs, err := c.node(2).ResumeSession(ctx, old.Resume())
	require.NoError(t, err)
	select {
	case <-old.Done():
	case <-ctx.Done():
		t.Fatal("the old incarnation never learned its session was taken")
	}
	require.ErrorIs(t, old.Err(), ErrSessionExpired)
	require.ErrorIs(t, l.Err(), ErrSessionExpired)
	require.Error(t, l.Release(ctx))
	require.NoError(t, old.Close(ctx))
	info := inspect(t, ctx, c.node(3), "L")
	require.True(t, info.Held, "the old incarnation's release and close changed nothing")
	require.Equal(t, rs.ID(), info.SessionID)
	require.Equal(t, l.Token(), info.Token)
	require.NoError(t, rs.Err())
	require.Len(t, rs.Locks(), 1)
}

func TestResumeSessionRefused(t *testing.T) {
	c := newCluster(t, 1, nil)
	ctx := testCtx(t)
	s := newSession(t, ctx, c.node(1), WithTTL(time.Second))
	tok := s.Resume()
	c.stop(1)
	c.start(1)
	n := c.node(1)

	wrong := tok
	wrong.secret++
	_, err := n.ResumeSession(ctx, wrong)
	require.ErrorIs(t, err, ErrSessionExpired, "a wrong secret is told nothing more")
	other := tok
	other.group++
	_, err = n.ResumeSession(ctx, other)
	require.ErrorIs(t, err, ErrOtherGroup)
	_, err = n.ResumeSession(ctx, ResumeToken{})
	require.ErrorIs(t, err, ErrInvalidResumeToken)

	// Once the group expired it, the session is gone for good.
	waitUntil(t, ctx, "the session expired", func() bool {
		page, err := n.Sessions(ctx)
		require.NoError(t, err)
		return len(page.Sessions) == 0
	})
	_, err = n.ResumeSession(ctx, tok)
	require.ErrorIs(t, err, ErrSessionExpired)
}

func TestResumeTokenText(t *testing.T) {
	tok := ResumeToken{group: 0xfeed, session: 1 << 16, secret: 0xdeadbeef, ttl: 1500 * time.Millisecond}
	got, err := ParseResumeToken(tok.String())
	require.NoError(t, err)
	require.Equal(t, tok, got)
	b, err := json.Marshal(struct{ T ResumeToken }{tok})
	require.NoError(t, err)
	var back struct{ T ResumeToken }
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, tok, back.T)
	for _, bad := range []string{
		"", "flr1", "flr2.1.2.3.4", "flr1.1.2.3", "flr1.1.2.3.4.5", "flr1.x.2.3.1000",
		"flr1.1.0.3.1000", "flr1.1.2.0.1000", "flr1.1.2.3.0", "flr1.1.2.3.-5", "flr1.1.2.3.999999999999",
		"flr1.1.2.10000000000000000.1000",
	} {
		_, err := ParseResumeToken(bad)
		require.ErrorIs(t, err, ErrInvalidResumeToken, bad)
	}
	require.True(t, errors.Is(json.Unmarshal([]byte(`{"T":"nope"}`), &back), ErrInvalidResumeToken))
}

func FuzzParseResumeToken(f *testing.F) {
	f.Add("flr1.feed.10000.deadbeef.1500")
	f.Add("flr1.0.1.1.100")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseResumeToken(s)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidResumeToken)
			return
		}
		again, err := ParseResumeToken(tok.String())
		require.NoError(t, err)
		require.Equal(t, tok, again)
	})
}

// A resume that takes longer than the holder's deadline to apply (its
// replica cut off meanwhile, while the old process still renews the
// session) still hands over a live session with its grants: the resume
// renews it at once rather than return one that gives itself up.
func TestSlowResumeRenewsAtOnce(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const ttl = 3 * time.Second
	old := newSession(t, ctx, c.node(1), WithTTL(ttl))
	l, err := old.Acquire(ctx, "L")
	require.NoError(t, err)

	c.net.Isolate(c.addr(2))
	resumed := make(chan *Session, 1)
	go func() {
		s, err := c.node(2).ResumeSession(ctx, old.Resume())
		assert.NoError(t, err)
		resumed <- s
	}()
	// The fault lasts past the deadline a resume earns at its send
	// (TTL − margin); the old process renews the session meanwhile.
	time.Sleep(ttl)
	c.net.Heal()
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
