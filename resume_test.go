package fencelock

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/session"
)

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

// A resume that applies right after the group granted the old incarnation's
// queued request keeps that grant, and the resumed Session lists it: in the
// default group and in a named one, whichever of the grant and the resume
// the replica applies first. The fault checker once saw a resumed session
// whose Locks lacked a grant its group had kept (leader-crash scenario).
func TestResumeKeepsAGrantJustMade(t *testing.T) {
	c := newCluster(t, 3, withGroups(GroupConfig{Name: "b", Voters: []uint64{1, 2, 3}}))
	ctx := testCtx(t)
	var kept, withdrawn int
	for i := range 32 {
		name := "x"
		if i%2 == 1 {
			name = "x@b"
		}
		h := newSession(t, ctx, c.node(2))
		hl, err := h.Acquire(ctx, name)
		require.NoError(t, err)
		s := newSession(t, ctx, c.node(1), WithTTL(30*time.Second))
		queued := make(chan error, 1)
		go func() {
			_, err := s.Acquire(ctx, name)
			queued <- err
		}()
		waitWaiters(t, ctx, c.node(3), name, 1)
		released := make(chan error, 1)
		go func() { released <- hl.Release(ctx) }()
		if i%4 >= 2 {
			require.NoError(t, <-released) // the grant applies before the resume
		}
		group := ""
		if i%2 == 1 {
			group = "b"
		}
		lose := i%8 >= 4 // the resume's first reply is lost: it applies twice
		if lose {
			c.node(3).host.Shard(group).TestingLoseReplies(fsm.KindResume, 1)
		}
		rs, err := c.node(3).ResumeSession(ctx, s.Resume())
		require.NoError(t, err, "round %d", i)
		if i%4 < 2 {
			require.NoError(t, <-released)
		}
		info := inspect(t, ctx, c.node(3), name)
		var listed []uint64
		for _, l := range rs.Locks() {
			listed = append(listed, l.Token())
		}
		if lose {
			require.Zero(t, c.node(3).host.Shard(group).TestingLostReplies(fsm.KindResume), "round %d: the resume proposed again", i)
		}
		part, ok := rs.s.PartID(group) // a named group knows the session by its part's ID there
		require.True(t, ok, "round %d: the resumed session has no part in group %q", i, group)
		if info.Held && info.PartID == part {
			kept++
			require.Equal(t, []uint64{info.Token}, listed, "round %d: the group kept %s for the session, its Locks must list it", i, name)
			require.NoError(t, rs.Locks()[0].Release(ctx))
		} else {
			withdrawn++
			require.False(t, info.Held, "round %d: %s held by another session's part %d", i, name, info.PartID)
			require.Empty(t, listed, "round %d: the group holds nothing for the session", i)
		}
		require.NoError(t, rs.Close(ctx))
		// The old incarnation's queued call ends one way or another; what
		// matters is that it ends.
		select {
		case err := <-queued:
			_ = err
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the old incarnation's acquire never ended", i)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := s.Close(cctx); err != nil && !errors.Is(err, ErrSessionExpired) && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("round %d: old incarnation's close: %v", i, err)
		}
		cancel()
		require.NoError(t, h.Close(ctx))
	}
	t.Logf("kept %d, withdrawn %d", kept, withdrawn)
	require.NotZero(t, kept, "no round kept a grant: the test exercised nothing")
}
