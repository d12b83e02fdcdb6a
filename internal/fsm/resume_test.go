package fsm

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

func resumeCmd(s, nonce, owner uint64) Command {
	return Command{Kind: KindResume, Session: s, Nonce: nonce, Owner: owner, Target: 1000 + owner, TTL: openCmd(0).TTL}
}

// resumeFixture: session a (nonce 7) holds lock L, leads election E and
// waits for lock M (held by b) and in election F (led by b).
func resumeFixture(t *testing.T) (h *harness, a, b uint64) {
	h = newHarness(t)
	a, b = h.open(7), h.open(8)
	r, _ := h.one(acqCmd(a, 1, "L", false))
	require.Equal(t, Granted, r.Status)
	r, _ = h.one(campaignCmd(a, 2, "E", "a"))
	require.Equal(t, Granted, r.Status)
	r, _ = h.one(acqCmd(b, 1, "M", false))
	require.Equal(t, Granted, r.Status)
	r, _ = h.one(campaignCmd(b, 2, "F", "b"))
	require.Equal(t, Granted, r.Status)
	r, _ = h.one(acqCmd(a, 3, "M", true))
	require.Equal(t, Queued, r.Status)
	r, _ = h.one(campaignCmd(a, 4, "F", "a"))
	require.Equal(t, Queued, r.Status)
	return h, a, b
}

func TestResumeKeepsGrantsAndWithdrawsRequests(t *testing.T) {
	h, a, _ := resumeFixture(t)
	l, e := h.st.Lock("L"), h.st.Election("E")

	rs, evs := h.apply(resumeCmd(a, 7, 3))
	r := rs[0]
	require.Equal(t, OK, r.Status)
	require.Greater(t, r.Value, uint64(4)+resumeGap-1, "the new floor lies past every request number used")
	require.Equal(t, []Event{
		{Kind: EventResumed, Session: a, Target: 1003},
		{Kind: EventTouched, Session: a, Index: h.idx, TTL: 1e9},
		{Kind: EventKept, Session: a, Seq: 1, Name: "L", Token: l.Token},
		{Kind: EventKept, Session: a, Seq: 2, Name: "E", Token: e.Token, Value: "a", Election: true},
	}, evs)
	info, _ := h.st.Session(a)
	require.Equal(t, SessionInfo{ID: a, TTL: 1e9, Owner: 3, KeepAlive: h.idx, Held: 1}, info)
	require.Zero(t, h.st.Lock("M").Waiters, "its queued acquire is withdrawn")
	require.Zero(t, h.st.Election("F").Candidates, "its candidacy is withdrawn")
	l.Holders[0].Owner = 3 // the holder now lives on the resuming replica
	require.Equal(t, l, h.st.Lock("L"), "the lock stays, with its token")
	require.Equal(t, e, h.st.Election("E"))

	resumed, kept := h.st.Kept(a)
	require.Equal(t, uint64(1003), resumed)
	require.Equal(t, evs[2:], kept)

	// The new incarnation numbers from the floor; a retry of the resume
	// (a duplicate of its proposal) applies nothing, however late.
	base := r.Value
	r, _ = h.one(Command{Kind: KindAcquire, Session: a, Seq: base, Floor: base, Name: "N"})
	require.Equal(t, Granted, r.Status)
	before := stateBody(t, h.st)
	r, evs = h.one(resumeCmd(a, 7, 3))
	require.Equal(t, Result{Status: OK, Value: base}, r)
	require.Empty(t, evs)
	require.Equal(t, before, stateBody(t, h.st))
	r, _ = h.one(Command{Kind: KindAcquire, Session: a, Seq: base + 1, Floor: base, Name: "O"})
	require.Equal(t, Granted, r.Status, "the new incarnation lives on")
}

func TestResumeRefusesTheOldIncarnation(t *testing.T) {
	h, a, b := resumeFixture(t)
	r, _ := h.one(resumeCmd(a, 7, 3))
	base := r.Value
	before := stateBody(t, h.st)
	for _, c := range []Command{
		keepAliveCmd(a, 5),
		{Kind: KindCloseSession, Session: a, Floor: 5},
		{Kind: KindAcquire, Session: a, Seq: 9, Floor: 5, Name: "X"},
		{Kind: KindRelease, Session: a, Seq: 9, Floor: 5, Name: "L", Token: h.st.Lock("L").Token},
		{Kind: KindResign, Session: a, Seq: 9, Floor: 5, Name: "E", Token: h.st.Election("E").Token},
		{Kind: KindCancel, Session: a, Target: 1, Floor: 5, Name: "L"},
	} {
		r, evs := h.one(c)
		require.Equal(t, UnknownSession, r.Status, c.Kind.String())
		require.Empty(t, evs)
	}
	require.Equal(t, before, stateBody(t, h.st), "nothing changed but the index")

	// Nor does a restore forget it.
	h = harnessFor(t, roundTrip(t, h.st))
	r, _ = h.one(keepAliveCmd(a, base-1))
	require.Equal(t, UnknownSession, r.Status)
	r, _ = h.one(keepAliveCmd(a, base))
	require.Equal(t, OK, r.Status)

	// The new incarnation can resume again, and an expiry or an operator
	// still ends the session.
	r, _ = h.one(resumeCmd(a, 7, 1))
	require.Equal(t, OK, r.Status)
	require.Greater(t, r.Value, base)
	r, _ = h.one(Command{Kind: KindEndSession, Session: a})
	require.Equal(t, OK, r.Status)
	r, _ = h.one(Command{Kind: KindExpire, Session: b, Target: 2})
	require.Equal(t, OK, r.Status)
}

func TestResumeNeedsTheNonce(t *testing.T) {
	h, a, b := resumeFixture(t)
	before := stateBody(t, h.st)
	for _, c := range []Command{
		resumeCmd(a, 8, 3), // b's nonce
		resumeCmd(a, 0, 3),
		resumeCmd(a, 7, 0), // no owner
		resumeCmd(b+100, 7, 3),
	} {
		r, evs := h.one(c)
		require.Equal(t, UnknownSession, r.Status, "%+v", c)
		require.Empty(t, evs)
	}
	require.Equal(t, before, stateBody(t, h.st))

	// An expired session cannot be resumed.
	r, _ := h.one(expireCmd(a, 1))
	require.Equal(t, OK, r.Status)
	r, _ = h.one(resumeCmd(a, 7, 3))
	require.Equal(t, UnknownSession, r.Status)
}

// stateBody is st's snapshot without its index and checksum, for a state
// whose index is below 128 (one varint byte): equal bodies mean nothing
// changed but the index.
func stateBody(t *testing.T, st *State) []byte {
	require.Less(t, st.Index(), uint64(128))
	b := saveBytes(t, st)
	return b[len(snapshotMagic)+2 : len(b)-4]
}

// A resume whose TTL is not the session's (a token edited, corrupted or
// mis-copied) is refused, and changes nothing: the session stays where it
// is, with its grants, its queue places and its owner. The reply names the
// session's TTL, and only to whoever knows the nonce: with a wrong nonce the
// session is unknown, whatever the TTL.
func TestResumeRefusesAnotherTTL(t *testing.T) {
	h, a, _ := resumeFixture(t)
	before := viewOf(h.st)
	ttl := openCmd(0).TTL
	for _, bad := range []uint64{ttl + 1, ttl - 1, 20 * ttl, 0} {
		c := resumeCmd(a, 7, 3)
		c.TTL = bad
		r, evs := h.one(c)
		require.Equal(t, Result{Status: Conflict, Value: ttl}, r, "TTL %d", bad)
		require.Empty(t, evs)
		c.Nonce++
		r, evs = h.one(c)
		require.Equal(t, UnknownSession, r.Status, "a wrong nonce learns nothing, TTL %d", bad)
		require.Empty(t, evs)
	}
	after := viewOf(h.st)
	before.Index = after.Index // nothing but the index moved
	require.Equal(t, before, after)
	info, _ := h.st.Session(a)
	require.Equal(t, uint64(1), info.Owner, "still the old incarnation's")
	require.Equal(t, 1, h.st.Lock("M").Waiters, "its queued acquire stays")

	// The right TTL resumes it.
	r, _ := h.one(resumeCmd(a, 7, 3))
	require.Equal(t, OK, r.Status)
}

// A version-4 resume carried no TTL: replayed from an old log, it applies
// as it did then, unchecked.
func TestResumeOfVersion4AppliesUnchecked(t *testing.T) {
	h, a, _ := resumeFixture(t)
	c := resumeCmd(a, 7, 3)
	data := asVersion(AppendBatch(nil, []Command{c}), 4)
	data = data[:len(data)-1-len(binary.AppendUvarint(nil, c.TTL))] // version 4 had no TTL (nor keep flag)
	cmds, err := DecodeBatch(data, nil)
	require.NoError(t, err)
	require.Zero(t, cmds[0].TTL)
	rs, _ := h.apply(cmds...)
	require.Equal(t, OK, rs[0].Status)
}

// A resume with Keep (an adoption's) leaves the session's queued requests
// and candidacies in their places: each is reported, granted later in its
// turn under its own number (below the new floor), and withdrawn by the
// new incarnation's Cancel; the old incarnation's commands are still
// refused.
func TestResumeWithKeepKeepsTheQueue(t *testing.T) {
	h, a, b := resumeFixture(t)
	c := h.open(9)
	r, _ := h.one(acqCmd(c, 1, "M", true)) // behind a's request 3
	require.Equal(t, Queued, r.Status)
	r, _ = h.one(campaignCmd(c, 2, "F", "c")) // behind a's candidacy 4
	require.Equal(t, Queued, r.Status)
	l, e := h.st.Lock("L"), h.st.Election("E")

	keep := resumeCmd(a, 7, 3)
	keep.Keep = true
	rs, evs := h.apply(keep)
	require.Equal(t, OK, rs[0].Status)
	base := rs[0].Value
	require.Greater(t, base, uint64(4)+resumeGap-1)
	queued := []Event{
		{Kind: EventKeptQueued, Session: a, Seq: 3, Name: "M"},
		{Kind: EventKeptQueued, Session: a, Seq: 4, Name: "F", Election: true},
	}
	require.Equal(t, []Event{
		{Kind: EventResumed, Session: a, Target: 1003},
		{Kind: EventTouched, Session: a, Index: h.idx, TTL: 1e9},
		{Kind: EventKept, Session: a, Seq: 1, Name: "L", Token: l.Token},
		{Kind: EventKept, Session: a, Seq: 2, Name: "E", Token: e.Token, Value: "a", Election: true},
		queued[0], queued[1],
	}, evs)
	_, kept := h.st.Kept(a)
	require.Equal(t, evs[2:], kept, "a restored replica learns the same")
	require.Equal(t, 1, h.st.Position(a, 3), "a's request keeps its place in M's queue")
	require.Equal(t, 2, h.st.Position(c, 1))
	require.Equal(t, 1, h.st.Position(a, 4), "a's candidacy keeps its place in F's queue")
	require.Equal(t, 2, h.st.Position(c, 2))
	info, _ := h.st.Session(a)
	require.Equal(t, uint64(3), info.Owner)
	require.Equal(t, 1, info.Waiting)

	// A retry of the resume changes nothing.
	before := stateBody(t, h.st)
	r, evs = h.one(keep)
	require.Equal(t, Result{Status: OK, Value: base}, r)
	require.Empty(t, evs)
	// The old incarnation is refused, its cancel of the kept request too.
	for _, cmd := range []Command{
		keepAliveCmd(a, 5),
		{Kind: KindAcquire, Session: a, Seq: 9, Floor: 5, Name: "X"},
		{Kind: KindAcquire, Session: a, Seq: 3, Floor: 3, Name: "M", Wait: true},
		{Kind: KindCancel, Session: a, Target: 3, Floor: 5, Name: "M"},
	} {
		r, evs := h.one(cmd)
		require.Equal(t, UnknownSession, r.Status, cmd.Kind.String())
		require.Empty(t, evs)
	}
	// The new incarnation's retry of the old number is stale: it does not
	// queue a second time.
	r, evs = h.one(Command{Kind: KindAcquire, Session: a, Seq: 3, Floor: base, Name: "M", Wait: true})
	require.Equal(t, Stale, r.Status)
	require.Empty(t, evs)
	require.Equal(t, before, stateBody(t, h.st), "nothing changed but the index")

	// b releases M: a's kept request is granted, under its own number,
	// before c's.
	rs, evs = h.apply(relCmd(b, 9, "M", h.st.Lock("M").Token))
	require.Equal(t, OK, rs[0].Status)
	m := h.st.Lock("M")
	require.Equal(t, a, m.Session)
	require.Equal(t, grantedEv(a, 3, "M", m.Token), evs[1])
	require.Equal(t, 1, h.st.Position(c, 1))
	name, token, ok := h.st.Grant(a, 3)
	require.True(t, ok)
	require.Equal(t, "M", name)
	require.Equal(t, m.Token, token)

	// The new incarnation withdraws the kept candidacy by its number.
	r, _ = h.one(Command{Kind: KindCancel, Session: a, Target: 4, Floor: base, Name: "F", Election: true})
	require.Equal(t, Cancelled, r.Status)
	require.Zero(t, h.st.Position(a, 4))
	require.Equal(t, 1, h.st.Position(c, 2))
	// And releases the kept request's grant with its token.
	r, _ = h.one(Command{Kind: KindRelease, Session: a, Seq: base, Floor: base, Name: "M", Token: m.Token})
	require.Equal(t, OK, r.Status)
	require.Equal(t, c, h.st.Lock("M").Session)

	// A restore keeps everything alike.
	h2 := harnessFor(t, roundTrip(t, h.st))
	require.Equal(t, viewOf(h.st), viewOf(h2.st))
}
