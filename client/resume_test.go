package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// restart makes s's process gone as a crash leaves it: its heartbeats stop
// and nothing ends the session at the group (no DELETE), which keeps it,
// with its grants, until its TTL runs out.
func restart(s *Session) { s.end(errors.New("test: the holder's process restarted")) }

// A process that restarts takes its session back within the TTL from the
// token's text, through another replica than the one that served it: the
// re-issued Acquire and Campaign answer the grants the session held, with
// their tokens, and the new process's heartbeats keep them past the TTL
// counted from the old process's last heartbeat.
func TestResumeSessionKeepsItsLocksAndTokens(t *testing.T) {
	g, ctx := newGroup(t)
	const ttl = 2 * time.Second
	c1 := newClient(t, g.urls[1], g.urls[2], g.urls[3])
	s1 := newSession(t, ctx, c1, ttl, fencelock.WithSessionName("worker@test"))
	l1, err := s1.Acquire(ctx, "x")
	require.NoError(t, err)
	term1, err := s1.Campaign(ctx, "e", "first")
	require.NoError(t, err)
	text := s1.Resume().String()
	require.True(t, strings.HasPrefix(text, "flh1."), text)

	restart(s1)
	stopped := time.Now() // the old process's last heartbeat was before this
	c1.Close()            // ends no session: s1 is over for this client already

	c2 := newClient(t, g.urls[3], g.urls[2], g.urls[1])
	tok, err := ParseResumeToken(text)
	require.NoError(t, err)
	began := time.Now()
	s2, err := c2.ResumeSession(ctx, tok)
	require.NoError(t, err)
	t.Logf("resume through a replica that forwards to the session's own: %v", time.Since(began))
	require.Equal(t, s1.ID(), s2.ID())
	require.Equal(t, ttl, s2.TTL())
	require.Positive(t, s2.LeaseLeft())
	beats := make(chan error, 64)
	s2.OnHeartbeat(func(err error, _ time.Duration) {
		select {
		case beats <- err:
		default:
		}
	})

	l2, err := s2.Acquire(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, l1.Token(), l2.Token(), "the resumed session's grant is the one it held")
	require.Equal(t, l1.Fence(), l2.Fence())
	term2, err := s2.Campaign(ctx, "e", "second")
	require.NoError(t, err)
	require.Equal(t, term1.Token(), term2.Token())
	require.Equal(t, "first", term2.Value(), "a re-issued campaign answers the term it leads")

	other := newSession(t, ctx, c2, ttl)
	_, err = other.TryAcquire(ctx, "x")
	require.ErrorIs(t, err, fencelock.ErrLocked)

	// Past the TTL from the old process's last heartbeat, on the new one's.
	for time.Since(stopped) < 2*ttl {
		select {
		case <-beats:
		case <-s2.Done():
			t.Fatalf("the resumed session ended: %v", s2.Err())
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	require.NoError(t, s2.Err())
	require.NoError(t, l2.Err())
	require.NoError(t, term2.Err())
	requireHeldBy(t, ctx, c2, "x", l1, s1, "worker@test")
	_, err = other.TryAcquire(ctx, "x")
	require.ErrorIs(t, err, fencelock.ErrLocked)

	require.NoError(t, l2.Release(ctx))
	l3, err := other.TryAcquire(ctx, "x")
	require.NoError(t, err)
	require.Greater(t, l3.Token(), l1.Token())
	require.NoError(t, s2.Close(ctx))
}

// A token with another secret resumes nothing and says no more than an
// ended session's would, through the session's own replica and the
// others alike; the session and its lock are untouched. A token whose TTL
// is not the session's is refused as invalid; a session that expired, or
// was closed, cannot be resumed.
func TestResumeSessionRefusals(t *testing.T) {
	g, ctx := newGroup(t)
	const ttl = 2 * time.Second
	c := newClient(t, g.urls[1])
	s, l := hold(t, ctx, c, ttl, "x")
	good := s.Resume()

	wrong, err := ParseResumeToken(strings.Replace(good.String(), "."+s.secret, ".AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", 1))
	require.NoError(t, err)
	require.Equal(t, good.SessionID(), wrong.SessionID())
	for id := uint64(1); id <= 3; id++ {
		ci := newClient(t, g.urls[id])
		_, err := ci.ResumeSession(ctx, wrong)
		require.ErrorIs(t, err, fencelock.ErrSessionExpired, "through replica %d", id)
		require.NotErrorIs(t, err, ErrForbidden, "it tells nothing more")
		require.NotContains(t, err.Error(), "AAAAAAAA")
	}
	require.NoError(t, s.KeepAlive(ctx), "the session answers to its own secret")
	require.NoError(t, l.Err())

	longer := good
	longer.ttl += time.Second
	_, err = newClient(t, g.urls[2]).ResumeSession(ctx, longer)
	require.ErrorIs(t, err, fencelock.ErrInvalidResumeToken)
	require.NotContains(t, err.Error(), s.secret)
	_, err = c.ResumeSession(ctx, ResumeToken{})
	require.ErrorIs(t, err, fencelock.ErrInvalidResumeToken)

	require.NoError(t, s.KeepAlive(ctx))
	require.NoError(t, l.Err())
	info, err := c.Inspect(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, l.Token(), info.Token)
	require.Equal(t, s.ID(), info.SessionID)

	// Expired: its process gone, the group frees its lock one TTL later.
	restart(s)
	probe := newSession(t, ctx, c, ttl)
	var freed *Lock
	require.Eventually(t, func() bool {
		freed, err = probe.TryAcquire(ctx, "x")
		return err == nil
	}, 4*ttl, 50*time.Millisecond, "the group expires the session")
	require.Greater(t, freed.Token(), l.Token())
	_, err = newClient(t, g.urls[3]).ResumeSession(ctx, good)
	require.ErrorIs(t, err, fencelock.ErrSessionExpired)

	// Closed by its holder.
	require.NoError(t, probe.Close(ctx))
	_, err = c.ResumeSession(ctx, probe.Resume())
	require.ErrorIs(t, err, fencelock.ErrSessionExpired)
}

// NewSession does not take the embedded session's WithResume, and says
// what to use instead.
func TestNewSessionWithResumeNamesResumeSession(t *testing.T) {
	rt, err := fencelock.ParseResumeToken("flr1.feed.10000.deadbeef.1500")
	require.NoError(t, err)
	_, err = (&Client{}).NewSession(context.Background(), fencelock.WithResume(rt))
	require.ErrorIs(t, err, errors.ErrUnsupported)
	require.ErrorContains(t, err, "Client.ResumeSession")
}

func TestParseResumeToken(t *testing.T) {
	tok := ResumeToken{id: 0x3_0000, secret: "Zm9v-YmFy_0123456789abcdefABCDEF0123456789xyz", ttl: 10 * time.Second}
	text := tok.String()
	require.Equal(t, "flh1.30000.10000.Zm9v-YmFy_0123456789abcdefABCDEF0123456789xyz", text)
	got, err := ParseResumeToken(text)
	require.NoError(t, err)
	require.Equal(t, tok, got)
	require.Equal(t, uint64(0x3_0000), got.SessionID())
	require.Equal(t, 10*time.Second, got.TTL())

	b, err := tok.MarshalText()
	require.NoError(t, err)
	var back ResumeToken
	require.NoError(t, back.UnmarshalText(b))
	require.Equal(t, tok, back)
	// Not canonical on the way in (an upper-case ID), canonical out.
	got, err = ParseResumeToken("flh1.3ABC.1500.s3cr.t")
	require.NoError(t, err)
	require.Equal(t, "flh1.3abc.1500.s3cr.t", got.String())

	for _, bad := range []string{
		"", "flh1", "flh1.1.1000", "flh2.1.1000.s", "flr1.feed.10000.deadbeef.1500",
		"flh1.0.1000.s", "flh1.-1.1000.s", "flh1.zz.1000.s", "flh1.10000000000000000.1000.s",
		"flh1.1.99.s", "flh1.1.86400001.s", "flh1.1.1e3.s", "flh1.1.+1000.s", "flh1.1.1000.",
		"flh1.1.1000.se cret", "flh1.1.1000.s\n", "flh1.1.1000.sécret", "flh1.1.1000." + strings.Repeat("s", 257),
	} {
		_, err := ParseResumeToken(bad)
		require.ErrorIs(t, err, fencelock.ErrInvalidResumeToken, "%q", bad)
		if len(bad) > 14 {
			require.NotContains(t, err.Error(), bad[14:], "the error quotes no secret")
		}
		require.ErrorIs(t, back.UnmarshalText([]byte(bad)), fencelock.ErrInvalidResumeToken)
	}
	require.Equal(t, tok, back, "a failed UnmarshalText changes nothing")
}

// A token's text comes from a file or a secret store: garbage must be an
// error wrapping ErrInvalidResumeToken, never a panic, and every token read
// is written back as a text that reads as the same token.
func FuzzParseResumeToken(f *testing.F) {
	for _, seed := range []string{
		"flh1.30000.10000.Zm9v-YmFy_0123456789abcdefABCDEF0123456789xyz",
		"flh1.1.100.s", "flh1.FFFFFFFFFFFFFFFF.86400000.~!", "flh1.3ABC.1500.s3cr.t",
		"flh1.1.1000.", "flh1.0.1000.s", "flh1.1.99.s", "flh1.1.1000.s\x00", "flr1.feed.10000.deadbeef.1500", "",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseResumeToken(s)
		if err != nil {
			require.ErrorIs(t, err, fencelock.ErrInvalidResumeToken)
			return
		}
		again, err := ParseResumeToken(tok.String())
		require.NoError(t, err)
		require.Equal(t, tok, again)
	})
}

// The replica that served the session stops with the old process: another
// replica adopts the session for the resume, checking the secret at the
// group, so a wrong one takes nothing over and the right one then does.
// A request the old process had queued is the resumed one's: its Acquire
// waits in that place, never as a second waiter, and is granted in turn.
func TestResumeSessionAfterItsReplicaStopped(t *testing.T) {
	g, ctx := newGroup(t)
	const ttl = 3 * time.Second
	c1 := newClient(t, g.urls[1])
	s1, l1 := hold(t, ctx, c1, ttl, "x")
	c2 := newClient(t, g.urls[2], g.urls[3])
	_, held := hold(t, ctx, c2, ttl, "q")
	queued, waited := acquireQueued(ctx, s1, "q")
	require.Equal(t, 1, <-queued)
	good := s1.Resume()

	restart(s1)
	_, err := waited()
	require.Error(t, err, "the old process's wait ends with it")
	g.Stop(1)

	wrong := good
	wrong.secret = strings.Repeat("B", len(good.secret))
	_, err = c2.ResumeSession(ctx, wrong)
	require.ErrorIs(t, err, fencelock.ErrSessionExpired)

	began := time.Now()
	s2, err := c2.ResumeSession(ctx, good)
	require.NoError(t, err)
	t.Logf("resume that adopts the session from its stopped replica: %v", time.Since(began))
	l2, err := s2.Acquire(ctx, "x")
	require.NoError(t, err)
	require.Equal(t, l1.Token(), l2.Token())

	positions, granted := acquireQueued(ctx, s2, "q")
	require.Equal(t, 1, <-positions, "the resumed Acquire waits in the old request's place")
	info, err := c2.Inspect(ctx, "q")
	require.NoError(t, err)
	require.Equal(t, 1, info.Waiters, "one request: the session never queues twice")
	grantedAfter(t, ctx, held, granted)
	require.NoError(t, s2.Close(ctx))
}
