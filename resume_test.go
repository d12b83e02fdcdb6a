package fencelock

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/clock"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/session"
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
		"flr2.1.2.3.1000.", "flr2.1.2.3.1000.b", "flr2.1.2.3.1000.b:1:2", "flr2.1.2.3.1000.B:1:2:3",
		"flr2.1.2.3.1000.b:1:0:3", "flr2.1.2.3.1000.b:1:2:0", "flr2.1.2.3.1000.b:x:2:3",
		"flr2.1.2.3.1000.b:1:2:3.b:4:5:6", "flr2.1.2.3.1000.:1:2:3", "flr1.1.2.3.1000.b:1:2:3",
		"flr2.1.2.3.1000.b:1:2:3:4", "flr2.1.2.3.1000.abcdefghijklmnopqrstuvwxyz0123456:1:2:3",
		"flr1.1.2.3.ns", "flr1.1.2.3.0ns", "flr1.1.2.3.-5ns", "flr1.1.2.3.86400000000001ns", "flr1.1.2.3.1500ms",
	} {
		_, err := ParseResumeToken(bad)
		require.ErrorIs(t, err, ErrInvalidResumeToken, bad)
	}
	require.True(t, errors.Is(json.Unmarshal([]byte(`{"T":"nope"}`), &back), ErrInvalidResumeToken))

	// A TTL that is not a whole number of milliseconds survives the text
	// exactly: the group refuses a resume whose TTL is not the session's.
	odd := tok
	odd.ttl = 1500*time.Millisecond + 7
	require.True(t, strings.HasSuffix(odd.String(), ".1500000007ns"), odd.String())
	got, err = ParseResumeToken(odd.String())
	require.NoError(t, err)
	require.Equal(t, odd, got)
	// A session with parts in other groups: one field per other part.
	multi := "flr2.feed.10000.deadbeef.1500.billing:abc:7:1234.eu-1:0:9:5"
	tok, err = ParseResumeToken(multi)
	require.NoError(t, err)
	require.Equal(t, multi, tok.String())
	require.Equal(t, uint64(1<<16), tok.SessionID())
	require.Equal(t, []session.PartToken{{GroupID: 0xfeed, Session: 1 << 16, Secret: 0xdeadbeef},
		{Group: "billing", GroupID: 0xabc, Session: 7, Secret: 0x1234}, {Group: "eu-1", Session: 9, Secret: 5}}, tok.parts())
	// Not canonical on the way in, canonical on the way out.
	tok, err = ParseResumeToken("flr2.feed.10000.deadbeef.1500.billing:0ABC:07:1234")
	require.NoError(t, err)
	require.Equal(t, "flr2.feed.10000.deadbeef.1500.billing:abc:7:1234", tok.String())
}

func FuzzParseResumeToken(f *testing.F) {
	f.Add("flr1.feed.10000.deadbeef.1500")
	f.Add("flr1.0.1.1.100")
	f.Add("flr2.feed.10000.deadbeef.1500.billing:abc:7:1234.eu-1:0:9:5")
	f.Add("flr2.1.2.3.100.b:1:2:3.b:1:2:3")
	f.Add("flr1.feed.10000.deadbeef.1500000007ns")
	f.Add("flr1.feed.10000.deadbeef.1000000ns")
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

// editToken returns the text of token with its field i (1 group, 2
// session, 3 secret, 4 TTL) replaced by v: a token edited by hand, as a
// careless or hostile holder would.
func editToken(t *testing.T, tok ResumeToken, i int, v string) ResumeToken {
	t.Helper()
	f := strings.Split(tok.String(), ".")
	f[i] = v
	edited, err := ParseResumeToken(strings.Join(f, "."))
	require.NoError(t, err, "the edited token still parses: only the group can tell")
	return edited
}

// Issue 26: a resume token's TTL is checked by the group, never trusted. A
// session with a short TTL holds L; its token's TTL is edited larger; a
// resume with it on replica 3 is refused with ErrInvalidResumeToken and
// changes nothing (the session, still renewed by its process, keeps L with
// its token). Tokens with another secret or another session's ID are
// refused too, as ErrSessionExpired. The genuine token resumes; then
// replica 3 is cut off, and the resumed holder's Lock.Done closes, no later
// than TTL − margin after its last acknowledged keep-alive, before a
// session on replica 2 is granted L.
//
// Before the fix the edited resume succeeded, the holder timed its lease
// by the edited TTL, and the session on replica 2 was granted L while the
// resumed holder's lock was still live.
func TestResumeTamperedTokenRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	const ttl = 2 * time.Second
	margin := ttl / 5 // the default
	s := newSession(t, ctx, c.node(1), WithTTL(ttl))
	l, err := s.Acquire(ctx, "L")
	require.NoError(t, err)
	bystander := newSession(t, ctx, c.node(2))
	tok := s.Resume()

	unchanged := func(what string) {
		t.Helper()
		info := inspect(t, ctx, c.node(2), "L")
		require.Equal(t, []any{true, s.ID(), l.Token()}, []any{info.Held, info.SessionID, info.Token},
			"%s: L is held as before", what)
		require.NoError(t, s.Err(), "%s: the session goes on", what)
		require.NoError(t, l.Err(), what)
		require.NoError(t, bystander.Err(), what)
		page, err := c.node(2).Sessions(ctx)
		require.NoError(t, err)
		for _, si := range page.Sessions {
			if si.ID == s.ID() {
				require.Equal(t, uint64(1), si.Owner, "%s: the session still lives on replica 1", what)
				require.Equal(t, ttl, si.TTL)
			}
		}
	}

	longer := editToken(t, tok, 4, strconv.FormatInt((10*ttl).Milliseconds(), 10))
	rs, err := c.node(3).ResumeSession(ctx, longer)
	if err == nil {
		// The resume trusted the edited TTL: the holder must still stop
		// before anyone else is granted L, and does not.
		requireResumedHolderStopsFirst(t, ctx, c, rs, ttl, margin)
	}
	require.ErrorIs(t, err, ErrInvalidResumeToken, "a TTL the group does not keep")
	require.Contains(t, err.Error(), ttl.String(), "the error names the session's TTL")
	unchanged("an edited TTL")
	_, err = c.node(3).ResumeSession(ctx, editToken(t, tok, 4, "500"))
	require.ErrorIs(t, err, ErrInvalidResumeToken, "a shorter TTL is refused as well")
	unchanged("a shorter TTL")

	_, err = c.node(3).ResumeSession(ctx, editToken(t, tok, 3, strconv.FormatUint(tok.secret^1<<40, 16)))
	require.ErrorIs(t, err, ErrSessionExpired, "another secret")
	require.NotErrorIs(t, err, ErrInvalidResumeToken, "a wrong secret learns nothing of the session")
	unchanged("another secret")
	_, err = c.node(3).ResumeSession(ctx, editToken(t, tok, 2, strconv.FormatUint(bystander.ID(), 16)))
	require.ErrorIs(t, err, ErrSessionExpired, "another session's ID with this secret")
	unchanged("another session's ID")
	_, err = c.node(3).ResumeSession(ctx, editToken(t, tok, 2, strconv.FormatUint(s.ID()+1<<40, 16)))
	require.ErrorIs(t, err, ErrSessionExpired, "a session that does not exist")
	unchanged("a session that does not exist")

	rs, err = c.node(3).ResumeSession(ctx, tok)
	require.NoError(t, err, "the genuine token resumes")
	require.Equal(t, ttl, rs.TTL())
	requireResumedHolderStopsFirst(t, ctx, c, rs, ttl, margin)
}

// requireResumedHolderStopsFirst cuts replica 3, where rs lives, off the
// group, and requires that rs's lock on L ends, by the holder's clock, no
// later than TTL − margin after the last keep-alive it had acknowledged
// (sent before the cut), and before a session on replica 2 is granted L.
func requireResumedHolderStopsFirst(t *testing.T, ctx context.Context, c *testCluster, rs *Session, ttl, margin time.Duration) {
	t.Helper()
	locks := rs.Locks()
	require.Len(t, locks, 1)
	held := locks[0]
	require.Equal(t, "L", held.Name())
	left := rs.s.Testing().Deadline().Sub(clock.Boot(rs.s.Testing().Clock()))
	require.LessOrEqual(t, left, ttl-margin, "the holder's deadline lies at most the group's TTL − margin ahead")

	c.net.Isolate(c.addr(3))
	defer c.net.Heal()
	// Every keep-alive acknowledged from now on was sent before this.
	cut, cutAt := clock.Boot(rs.s.Testing().Clock()), time.Now()
	closed := make(chan time.Time, 1)
	go func() {
		select {
		case <-held.Done():
			closed <- time.Now()
		case <-ctx.Done():
		}
	}()

	other := newSession(t, ctx, c.node(2))
	ol, err := other.Acquire(ctx, "L") // waits for the group to expire rs
	require.NoError(t, err)
	select {
	case <-held.Done():
	default:
		t.Fatalf("L was granted on replica 2 while the resumed holder's lock was live (deadline %v after the cut)",
			rs.s.Testing().Deadline().Sub(cut))
	}
	require.ErrorIs(t, held.Err(), ErrSessionExpired)
	deadline := rs.s.Testing().Deadline()
	require.False(t, deadline.After(cut.Add(ttl-margin)),
		"the holder stopped no later than TTL − margin after its last acknowledged keep-alive")
	at := <-closed
	t.Logf("the resumed holder's lock ended %v after the cut; replica 2's session was granted L %v after it",
		at.Sub(cutAt).Round(time.Millisecond), time.Since(cutAt).Round(time.Millisecond))
	require.Greater(t, ol.Token(), held.Token())
}

// A token taken once its process's node has closed (a shutdown hook that
// saves it last) or crashed still names the session's parts in named
// groups: those parts ended there only, the groups keep them, and a resume
// takes their locks back as it does the default group's.
func TestResumeTokenTakenAfterTheNodeClosed(t *testing.T) {
	for _, how := range []string{"close", "crash"} {
		t.Run(how, func(t *testing.T) {
			c := newCluster(t, 3, withGroups(GroupConfig{Name: "g", Voters: []uint64{1, 2, 3}}))
			ctx := testCtx(t)
			s := newSession(t, ctx, c.node(1), WithTTL(30*time.Second))
			named, err := s.Acquire(ctx, "x@g")
			require.NoError(t, err)
			def, err := s.Acquire(ctx, "y")
			require.NoError(t, err)
			if how == "close" {
				c.stop(1)
			} else {
				c.crash(1)
			}
			<-named.Done()
			tok := s.Resume()

			rs, err := c.node(2).ResumeSession(ctx, tok)
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
