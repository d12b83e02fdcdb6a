package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An Expire applies only while the leader mark it names is the group's:
// one decided by a leader that has since been succeeded (its proposal
// forwarded, retried or delayed into the new term) is refused, so the new
// leader's full TTL for every session holds.
func TestExpireNamesTheLeaderMark(t *testing.T) {
	h := newHarness(t)
	r, evs := h.one(Command{Kind: KindLeaderStart, Owner: 1, Term: 2, Nonce: 77})
	require.Equal(t, OK, r.Status)
	require.Equal(t, []Event{{Kind: EventLeaderStarted, Index: h.idx, Owner: 1, Term: 2, Group: 77}}, evs)
	first := h.idx
	require.Equal(t, first, h.st.LeaderMark())
	a := h.open(1)
	ka := h.idx

	h.one(Command{Kind: KindLeaderStart, Owner: 2, Term: 3}) // a new leader took office
	r, evs = h.one(Command{Kind: KindExpire, Session: a, Target: ka, Mark: first})
	require.Equal(t, NotApplied, r.Status, "the old leader's expiry is refused")
	require.Empty(t, evs)
	_, alive := h.st.Session(a)
	require.True(t, alive)

	r, _ = h.one(Command{Kind: KindExpire, Session: a, Target: ka, Mark: h.st.LeaderMark()})
	require.Equal(t, OK, r.Status, "the current leader's expiry applies")
	_, alive = h.st.Session(a)
	require.False(t, alive)
}

func TestLeaderStartNeedsAnOwner(t *testing.T) {
	h := newHarness(t)
	r, evs := h.one(Command{Kind: KindLeaderStart, Term: 1})
	require.Equal(t, Invalid, r.Status)
	require.Empty(t, evs)
	require.Zero(t, h.st.LeaderMark())
}

// Version-1 entries knew no leader mark: replayed from an old log, their
// Expire applies as it did then.
func TestVersion1ExpireIgnoresTheMark(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	ka := h.idx
	h.one(Command{Kind: KindLeaderStart, Owner: 2, Term: 3})
	r, _ := h.one(Command{Kind: KindExpire, Session: a, Target: ka, v1: true})
	require.Equal(t, OK, r.Status)
}

// The mark survives a snapshot.
func TestLeaderMarkSnapshotted(t *testing.T) {
	h := newHarness(t)
	h.open(1)
	h.one(Command{Kind: KindLeaderStart, Owner: 2, Term: 3})
	mark := h.st.LeaderMark()
	h.open(2)
	st, err := DecodeSnapshot(saveBytes(t, h.st))
	require.NoError(t, err)
	require.Equal(t, mark, st.LeaderMark())
}

// The first LeaderStart's nonce is the group's ID for good; it survives
// snapshots.
func TestGroupIDIsSetOnce(t *testing.T) {
	h := newHarness(t)
	require.Zero(t, h.st.GroupID())
	h.one(Command{Kind: KindLeaderStart, Owner: 1, Term: 2, Nonce: 0}) // an older leader's, without one
	require.Zero(t, h.st.GroupID())
	h.one(Command{Kind: KindLeaderStart, Owner: 1, Term: 3, Nonce: 41})
	_, evs := h.one(Command{Kind: KindLeaderStart, Owner: 2, Term: 4, Nonce: 42})
	require.Equal(t, uint64(41), h.st.GroupID())
	require.Equal(t, uint64(41), evs[0].Group, "the event names the group's ID, not the proposal's nonce")
	st, err := DecodeSnapshot(saveBytes(t, h.st))
	require.NoError(t, err)
	require.Equal(t, uint64(41), st.GroupID())
}

// An operator's Revoke ends a lock's grant whoever holds it (only the one
// named, if a token is given) and grants the queue head in the same entry;
// the holder learns it as ReasonRevoked.
func TestRevoke(t *testing.T) {
	h, a, b := twoSessions(t)
	g, _ := h.one(acqCmd(a, 1, "L", false))
	h.one(acqCmd(b, 1, "L", true))
	r, _ := h.one(Command{Kind: KindRevoke, Name: "L", Token: g.Value + 1})
	require.Equal(t, NotHeld, r.Status, "a token that is not the grant's changes nothing")
	r, evs := h.one(Command{Kind: KindRevoke, Name: "L", Token: g.Value})
	require.Equal(t, OK, r.Status)
	require.Equal(t, freedEv(ReasonRevoked, a, 1, "L", g.Value), evs[0])
	require.Equal(t, EventGranted, evs[1].Kind)
	require.Equal(t, b, evs[1].Session)
	require.Greater(t, evs[1].Token, g.Value)
	r, _ = h.one(Command{Kind: KindRevoke, Name: "nobody-holds-it"})
	require.Equal(t, NotHeld, r.Status)
	r, _ = h.one(Command{Kind: KindRevoke, Name: ""})
	require.Equal(t, Invalid, r.Status)

	e, _ := h.one(campaignCmd(a, 2, "E", "v"))
	r, evs = h.one(Command{Kind: KindRevoke, Election: true, Name: "E"})
	require.Equal(t, OK, r.Status)
	require.Equal(t, Event{Kind: EventDeposed, Reason: ReasonRevoked, Session: a, Seq: 2, Token: e.Value, Name: "E"}, evs[0])
}

// An operator's EndSession ends any session as an expiry would, with
// ReasonRevoked.
func TestEndSession(t *testing.T) {
	h, a, b := twoSessions(t)
	h.one(acqCmd(a, 1, "L", false))
	h.one(acqCmd(b, 1, "L", true))
	r, evs := h.one(Command{Kind: KindEndSession, Session: a})
	require.Equal(t, OK, r.Status)
	require.Equal(t, EventSessionEnded, evs[len(evs)-1].Kind)
	require.Equal(t, ReasonRevoked, evs[len(evs)-1].Reason)
	require.Equal(t, b, h.st.Lock("L").Session, "its lock passed on")
	r, _ = h.one(Command{Kind: KindEndSession, Session: a})
	require.Equal(t, UnknownSession, r.Status)
}
