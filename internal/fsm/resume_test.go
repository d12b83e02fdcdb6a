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
	require.Equal(t, SessionInfo{ID: a, TTL: 1e9, Owner: 3, KeepAlive: h.idx, Held: 1, Base: r.Value}, info)
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
	data = data[:len(data)-2-len(binary.AppendUvarint(nil, c.TTL))] // version 4 had no TTL (nor keep flag, nor fence)
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

// fencedResume is replica owner's fenced adoption of session s (nonce) under
// epoch; parent 0 for a session's default part, else the session's ID.
func fencedResume(s, nonce, owner, epoch, parent uint64) Command {
	c := resumeCmd(s, nonce, owner)
	c.Keep, c.Fence, c.Epoch, c.Parent = true, true, epoch, parent
	return c
}

// TestFencedAdoptionIsCompareAndSet: two replicas adopt one session at once,
// each naming the epoch it read. The first resume moves it; the second,
// on the same epoch, changes nothing (NotApplied, with the epoch now), and
// the superseded copies' commands (the first owner's, and the loser's, who
// never owned it) are refused. A later adoption that read the new epoch
// moves it again: the loser tries again on what it reads.
func TestFencedAdoptionIsCompareAndSet(t *testing.T) {
	h, a, _ := resumeFixture(t)
	info, _ := h.st.Session(a)
	require.Zero(t, info.Base, "never adopted: epoch 0")
	old := info.Base

	r, _ := h.one(fencedResume(a, 7, 2, old, 0))
	require.Equal(t, OK, r.Status)
	won := r.Value
	require.Greater(t, won, old)

	before := stateBody(t, h.st)
	r, evs := h.one(fencedResume(a, 7, 3, old, 0))
	require.Equal(t, Result{Status: NotApplied, Value: won}, r, "the loser of the race changes nothing")
	require.Empty(t, evs)
	require.Equal(t, before, stateBody(t, h.st))
	info, _ = h.st.Session(a)
	require.Equal(t, uint64(2), info.Owner, "the winner owns it")

	// Every command of a superseded copy is refused: the first owner's
	// keep-alive, acquire, release and close, numbered below the winner's
	// floor, and its replica's keep-alive batch.
	tok := h.st.Lock("L").Token
	for _, c := range []Command{
		keepAliveCmd(a, 5),
		{Kind: KindAcquire, Session: a, Seq: 6, Floor: 5, Name: "Z"},
		{Kind: KindRelease, Session: a, Seq: 7, Floor: 5, Name: "L", Token: tok},
		{Kind: KindCloseSession, Session: a, Floor: 5},
	} {
		r, _ := h.one(c)
		require.Equal(t, UnknownSession, r.Status, "%v of the superseded copy", c.Kind)
	}
	r, _ = h.one(Command{Kind: KindKeepAliveBatch, Owner: 1, Renew: []Renewal{{Session: a, Floor: 5}}})
	require.Equal(t, Refused, r.Status)
	l := h.st.Lock("L")
	require.True(t, l.Held)
	require.Equal(t, tok, l.Token, "the lock stays the session's, with its token")

	// The loser reads again and adopts on the epoch it reads now.
	r, _ = h.one(fencedResume(a, 7, 3, won, 0))
	require.Equal(t, OK, r.Status)
	require.Greater(t, r.Value, won)
	r, _ = h.one(keepAliveCmd(a, won))
	require.Equal(t, UnknownSession, r.Status, "the first winner is superseded in turn")
}

// TestFencedPartFollowsTheLatestAdoption: a session's part in a named group
// ends with the adopter that won the session's default part last, whatever
// order its group applies the adopters' resumes in: a resume under an
// older epoch (a slow adopter's, applied after the newer one) changes
// nothing, so it can never take the part back, and its copy's close of the
// part is refused; the part's lock stays held with its token.
func TestFencedPartFollowsTheLatestAdoption(t *testing.T) {
	h := newHarness(t)
	parent := uint64(99 << TokenShift) // the session's ID in its default group
	open := openCmd(17)
	open.Parent = parent
	r, _ := h.one(open)
	part := r.Value
	r, _ = h.one(acqCmd(part, 1, "x", false))
	require.Equal(t, Granted, r.Status)
	tok := r.Value
	const older, newer = 1 << 32, 2 << 32 // two adoptions' epochs, in their default group's order

	r, _ = h.one(fencedResume(part, 17, 3, newer, parent))
	require.Equal(t, OK, r.Status)
	winnerFloor := r.Value
	info, _ := h.st.Session(part)
	require.Equal(t, uint64(newer), info.Epoch)

	for _, epoch := range []uint64{older, newer} {
		r, evs := h.one(fencedResume(part, 17, 2, epoch, parent))
		require.Equal(t, Result{Status: NotApplied, Value: newer}, r, "a resume under epoch %d", epoch)
		require.Empty(t, evs)
	}
	info, _ = h.st.Session(part)
	require.Equal(t, uint64(3), info.Owner, "the part stays with the latest adopter")

	// The first owner's copy (floor 1) cannot close the part or free x.
	r, _ = h.one(Command{Kind: KindCloseSession, Session: part, Floor: 1})
	require.Equal(t, UnknownSession, r.Status)
	l := h.st.Lock("x")
	require.True(t, l.Held)
	require.Equal(t, tok, l.Token)
	require.Equal(t, part, l.Session)

	// The winner acts on it.
	r, _ = h.one(keepAliveCmd(part, winnerFloor))
	require.Equal(t, OK, r.Status)
}

// TestFencedResumeNeedsVersion11: a fenced resume is written only once the
// group's gate is 11; below, it fails with ErrVersionGated (and the
// adopter resumes unfenced), and an unfenced resume is written as before.
func TestFencedResumeNeedsVersion11(t *testing.T) {
	c := fencedResume(5, 7, 2, 0, 0)
	_, err := AppendEntry(nil, Gate{Codec: 10, Snapshot: 8}, 0, []Command{c})
	require.ErrorIs(t, err, ErrVersionGated)
	plain := resumeCmd(5, 7, 2)
	plain.Keep = true
	ten, err := AppendEntry(nil, Gate{Codec: 10, Snapshot: 8}, 0, []Command{plain})
	require.NoError(t, err)
	require.Equal(t, byte(10), ten[0])

	data, err := AppendEntry(nil, Gate{Codec: 11, Snapshot: 9}, 0, []Command{c, fencedResume(6, 8, 3, 1<<32, 5)})
	require.NoError(t, err)
	cmds, err := DecodeBatch(data, nil)
	require.NoError(t, err)
	require.True(t, cmds[0].Fence)
	require.Equal(t, uint64(0), cmds[0].Epoch)
	require.Equal(t, uint64(1<<32), cmds[1].Epoch)
	require.Equal(t, uint64(5), cmds[1].Parent)
	require.False(t, Gate{Codec: 11, Snapshot: 8}.Valid(), "snapshots of version 8 would lose the parts' epochs")
}
