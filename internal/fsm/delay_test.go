package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const testDelay = 5_000_000_000 // 5s, in nanoseconds

// openDelayed opens a session with a lock-delay and returns its ID.
func (h *harness) openDelayed(nonce, delay uint64) uint64 {
	h.tb.Helper()
	c := openCmd(nonce)
	c.Delay = delay
	r, _ := h.one(c)
	require.Equal(h.tb, OK, r.Status)
	return r.Value
}

func delayedEv(why Reason, s, seq uint64, name string, token, delay uint64) Event {
	return Event{Kind: EventDelayed, Reason: why, Session: s, Seq: seq, Name: name, Token: token, TTL: delay}
}

// The expiry of a session with a lock-delay frees its lock into a delayed
// state: the queue's head is granted only when the leader's Undelay names
// the delay, never by the expiry itself, and nobody else gets the lock
// meanwhile (not a try-acquire, not a new waiter).
func TestLockDelayAfterExpiry(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.openDelayed(1, testDelay), h.open(2), h.open(3)
	r, _ := h.one(acqCmd(a, 1, "L", true))
	tokA := r.Value
	r, _ = h.one(acqCmd(b, 1, "L", true))
	require.Equal(t, Queued, r.Status)

	r, evs := h.one(expireCmd(a, 1))
	require.Equal(t, OK, r.Status)
	require.Equal(t, []Event{
		freedEv(ReasonExpired, a, 1, "L", tokA),
		delayedEv(ReasonExpired, a, 1, "L", tokA, testDelay),
		endedEv(ReasonExpired, a),
	}, evs)
	info := h.st.Lock("L")
	require.Equal(t, LockInfo{Name: "L", Waiters: 1, Delayed: true, Delay: testDelay}, info)

	// Nobody gets it while delayed.
	r, _ = h.one(acqCmd(c, 1, "L", false))
	require.Equal(t, Locked, r.Status)
	r, _ = h.one(acqCmd(c, 2, "L", true))
	require.Equal(t, Queued, r.Status)
	require.Equal(t, NotHeld, mustOne(h, Command{Kind: KindRevoke, Name: "L"}).Status)

	// A late or wrong Undelay changes nothing: another token, another
	// leader's mark.
	require.Equal(t, NotApplied, mustOne(h, Command{Kind: KindUndelay, Name: "L", Token: tokA + 1}).Status)
	require.Equal(t, NotApplied, mustOne(h, Command{Kind: KindUndelay, Name: "L", Token: tokA, Mark: 7}).Status)
	require.Equal(t, Invalid, mustOne(h, Command{Kind: KindUndelay, Name: "", Token: tokA}).Status)
	require.True(t, h.st.Lock("L").Delayed)

	// The snapshot keeps the delay.
	restored := harnessFor(t, roundTrip(t, h.st))
	delays, _ := restored.st.Timers()
	require.Equal(t, []Delay{{Name: "L", Token: tokA, Delay: testDelay}}, delays)

	for _, x := range []*harness{h, restored} {
		r, evs = x.one(Command{Kind: KindUndelay, Name: "L", Token: tokA})
		require.Equal(t, OK, r.Status)
		tokB := x.st.Lock("L").Token
		require.Greater(t, tokB, tokA, "tokens still rise")
		require.Equal(t, []Event{
			{Kind: EventUndelayed, Name: "L", Token: tokA},
			grantedEv(b, 1, "L", tokB),
		}, evs)
		// A second Undelay is late: nothing to end.
		r, _ = x.one(Command{Kind: KindUndelay, Name: "L", Token: tokA})
		require.Equal(t, NotApplied, r.Status)
	}
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, restored.st))
}

func mustOne(h *harness, c Command) Result {
	h.tb.Helper()
	r, _ := h.one(c)
	return r
}

// A release, a close and a cancel of a grant delay nothing: only an end the
// holder did not choose does. An operator's EndSession and (from version 5)
// Revoke do, like an expiry.
func TestLockDelayOnlyOnInvoluntaryEnd(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     func(h *harness, s, tok uint64) Command
		delayed bool
	}{
		{"release", func(_ *harness, s, tok uint64) Command { return relCmd(s, 2, "L", tok) }, false},
		{"close", func(_ *harness, s, _ uint64) Command { return closeCmd(s) }, false},
		{"cancel", func(_ *harness, s, _ uint64) Command { return cancelCmd(s, 1) }, false},
		{"revoke", func(_ *harness, _, tok uint64) Command { return Command{Kind: KindRevoke, Name: "L", Token: tok} }, true},
		{"revoke-any", func(_ *harness, _, _ uint64) Command { return Command{Kind: KindRevoke, Name: "L"} }, true},
		{"revoke-v4", func(_ *harness, _, tok uint64) Command {
			return Command{Kind: KindRevoke, Name: "L", Token: tok, pre5: true}
		}, false},
		{"expire", func(_ *harness, s, _ uint64) Command { return expireCmd(s, 1) }, true},
		{"end-session", func(_ *harness, s, _ uint64) Command { return Command{Kind: KindEndSession, Session: s} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a, b := h.openDelayed(1, testDelay), h.open(2)
			tok := mustOne(h, acqCmd(a, 1, "L", true)).Value
			require.Equal(t, Queued, mustOne(h, acqCmd(b, 1, "L", true)).Status)
			r, _ := h.one(tc.end(h, a, tok))
			require.Equal(t, tc.delayed, r.Status == OK && h.st.Lock("L").Delayed, "%v", r)
			info := h.st.Lock("L")
			if tc.delayed {
				require.False(t, info.Held)
			} else {
				require.Equal(t, b, info.Session, "the queue's head is granted at once")
			}
		})
	}
}

// Zero means zero: a session without a lock-delay passes its locks on in
// the entry that expires it. A delay above MaxLockDelay is refused.
func TestLockDelayZeroAndBound(t *testing.T) {
	h, a, b := twoSessions(t)
	h.one(acqCmd(a, 1, "L", true))
	h.one(acqCmd(b, 1, "L", true))
	h.one(expireCmd(a, 1))
	require.Equal(t, b, h.st.Lock("L").Session)

	c := openCmd(3)
	c.Delay = MaxLockDelay + 1
	require.Equal(t, Invalid, mustOne(h, c).Status)
	c.Delay = MaxLockDelay
	require.Equal(t, OK, mustOne(h, c).Status)
	s, ok := h.st.Session(mustOne(h, c).Value) // a retried open
	require.True(t, ok)
	require.Equal(t, uint64(MaxLockDelay), s.Delay)
}

// A shared lock delayed by one holder's expiry keeps its other holders,
// admits nobody new, and stays delayed (not forgotten) after they release;
// a second expiry restarts the delay for the longer of the two.
func TestLockDelaySharedHolders(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.openDelayed(1, testDelay), h.openDelayed(2, 2*testDelay), h.open(3)
	tokA := mustOne(h, Command{Kind: KindAcquireShared, Session: a, Seq: 1, Name: "L", Wait: true}).Value
	tokB := mustOne(h, Command{Kind: KindAcquireShared, Session: b, Seq: 1, Name: "L", Wait: true}).Value
	tokC := mustOne(h, Command{Kind: KindAcquireShared, Session: c, Seq: 1, Name: "L", Wait: true}).Value
	h.one(expireCmd(a, 1))
	info := h.st.Lock("L")
	require.True(t, info.Delayed)
	require.Len(t, info.Holders, 2)
	// A shared request the holders would admit waits: the lock is delayed.
	d := h.open(4)
	require.Equal(t, Locked, mustOne(h, Command{Kind: KindAcquireShared, Session: d, Seq: 1, Name: "L"}).Status)
	require.Equal(t, Queued, mustOne(h, Command{Kind: KindAcquireShared, Session: d, Seq: 2, Name: "L", Wait: true}).Status)

	_, evs := h.one(expireCmd(b, 2))
	require.Contains(t, evs, delayedEv(ReasonExpired, b, 1, "L", tokB, 2*testDelay))
	require.Equal(t, uint64(2*testDelay), h.st.Lock("L").Delay)
	// The first delay's Undelay is late now.
	require.Equal(t, NotApplied, mustOne(h, Command{Kind: KindUndelay, Name: "L", Token: tokA}).Status)
	h.one(relCmd(c, 2, "L", tokC))
	info = h.st.Lock("L")
	require.Equal(t, LockInfo{Name: "L", Waiters: 1, Delayed: true, Delay: 2 * testDelay}, info)
	roundTrip(t, h.st)

	require.Equal(t, OK, mustOne(h, Command{Kind: KindUndelay, Name: "L", Token: tokB}).Status)
	require.Equal(t, d, h.st.Lock("L").Session)
}

// A delayed semaphore nobody holds survives a snapshot, and a delayed
// lock nobody waits for is forgotten once its delay ends.
func TestLockDelayFreeLockForgotten(t *testing.T) {
	h := newHarness(t)
	a := h.openDelayed(1, testDelay)
	tok := mustOne(h, Command{Kind: KindAcquireShared, Session: a, Seq: 1, Name: "S", Permits: 2, Wait: true}).Value
	tok2 := mustOne(h, acqCmd(a, 2, "L", true)).Value
	h.one(Command{Kind: KindEndSession, Session: a})
	require.Equal(t, LockInfo{Name: "S", Shared: true, Permits: 2, Delayed: true, Delay: testDelay}, h.st.Lock("S"))
	_, locks, _ := h.st.Counts()
	require.Equal(t, 2, locks)
	page, _ := h.st.LocksPage("", "", 10, 10)
	require.Len(t, page, 2)
	require.Zero(t, page[0].Owner)
	h = harnessFor(t, roundTrip(t, h.st))
	// The semaphore's count still holds while it is delayed.
	b := h.open(2)
	require.Equal(t, Conflict, mustOne(h, Command{Kind: KindAcquireShared, Session: b, Seq: 1, Name: "S", Permits: 3}).Status)
	h.one(Command{Kind: KindUndelay, Name: "S", Token: tok})
	h.one(Command{Kind: KindUndelay, Name: "L", Token: tok2})
	_, locks, _ = h.st.Counts()
	require.Zero(t, locks)
}

// Elections have no lock-delay: the next candidate leads in the entry that
// expires the leader.
func TestLockDelayNotForElections(t *testing.T) {
	h := newHarness(t)
	a, b := h.openDelayed(1, testDelay), h.open(2)
	h.one(Command{Kind: KindCampaign, Session: a, Seq: 1, Name: "E", Wait: true})
	h.one(Command{Kind: KindCampaign, Session: b, Seq: 1, Name: "E", Wait: true})
	h.one(expireCmd(a, 1))
	require.Equal(t, b, h.st.Election("E").Session)
}

// A grant with a maximum hold ends when the leader's ExpireGrant names it,
// and passes to the queue's head in the same entry; a late ExpireGrant (the
// grant released, another token) or one of another leader frees nothing,
// and a grant without a maximum hold never ends so.
func TestMaxHold(t *testing.T) {
	h, a, b := twoSessions(t)
	acq := acqCmd(a, 1, "L", true)
	acq.MaxHold = 3e9
	r, evs := h.one(acq)
	require.Equal(t, Granted, r.Status)
	tokA := r.Value
	g := grantedEv(a, 1, "L", tokA)
	g.MaxHold = 3e9
	require.Equal(t, []Event{g}, evs)
	require.Equal(t, uint64(3e9), h.st.Lock("L").Holders[0].MaxHold)
	acqB := acqCmd(b, 1, "L", true)
	acqB.MaxHold = 4e9
	require.Equal(t, Queued, mustOne(h, acqB).Status)

	_, grants := roundTrip(t, h.st).Timers()
	require.Equal(t, []TimedGrant{{Name: "L", Token: tokA, MaxHold: 3e9}}, grants)

	require.Equal(t, NotApplied, mustOne(h, Command{Kind: KindExpireGrant, Name: "L", Token: tokA, Mark: 9}).Status)
	require.Equal(t, NotHeld, mustOne(h, Command{Kind: KindExpireGrant, Name: "L", Token: tokA + 1}).Status)
	require.Equal(t, NotHeld, mustOne(h, Command{Kind: KindExpireGrant, Name: "L", Token: tokA, Election: true}).Status)
	r, evs = h.one(Command{Kind: KindExpireGrant, Name: "L", Token: tokA})
	require.Equal(t, OK, r.Status)
	tokB := h.st.Lock("L").Token
	require.Greater(t, tokB, tokA)
	gb := grantedEv(b, 1, "L", tokB)
	gb.MaxHold = 4e9
	require.Equal(t, []Event{freedEv(ReasonMaxHold, a, 1, "L", tokA), gb}, evs)
	require.Equal(t, NotHeld, mustOne(h, Command{Kind: KindExpireGrant, Name: "L", Token: tokA}).Status, "late")

	// Without a maximum hold, never.
	c := h.open(3)
	tokC := mustOne(h, acqCmd(c, 1, "M", true)).Value
	require.Equal(t, NotHeld, mustOne(h, Command{Kind: KindExpireGrant, Name: "M", Token: tokC}).Status)
	require.True(t, h.st.Lock("M").Held)

	// Bounded.
	bad := acqCmd(c, 2, "N", true)
	bad.MaxHold = MaxHoldLimit + 1
	require.Equal(t, Invalid, mustOne(h, bad).Status)
	badC := Command{Kind: KindCampaign, Session: c, Seq: 3, Name: "E", MaxHold: MaxHoldLimit + 1}
	require.Equal(t, Invalid, mustOne(h, badC).Status)
}

// A leadership with a maximum hold ends like a lock's: the next candidate
// leads with a larger token. The end of a maximum hold delays nothing, even
// for a session with a lock-delay: its holder stopped first.
func TestMaxHoldCampaignAndNoDelay(t *testing.T) {
	h := newHarness(t)
	a, b := h.openDelayed(1, testDelay), h.open(2)
	r, _ := h.one(Command{Kind: KindCampaign, Session: a, Seq: 1, Name: "E", Value: "a", Wait: true, MaxHold: 1e9})
	tokA := r.Value
	h.one(Command{Kind: KindCampaign, Session: b, Seq: 1, Name: "E", Value: "b", Wait: true})
	r, evs := h.one(Command{Kind: KindExpireGrant, Name: "E", Election: true, Token: tokA})
	require.Equal(t, OK, r.Status)
	require.Equal(t, EventDeposed, evs[0].Kind)
	require.Equal(t, ReasonMaxHold, evs[0].Reason)
	e := h.st.Election("E")
	require.Equal(t, b, e.Session)
	require.Greater(t, e.Token, tokA)

	acq := acqCmd(a, 2, "L", true)
	acq.MaxHold = 1e9
	tok := mustOne(h, acq).Value
	h.one(acqCmd(b, 2, "L", true))
	h.one(Command{Kind: KindExpireGrant, Name: "L", Token: tok})
	require.False(t, h.st.Lock("L").Delayed)
	require.Equal(t, b, h.st.Lock("L").Session)
}

// A resumed session does not keep a grant with a maximum hold (its new
// incarnation cannot know how long it has left), and keeps the others.
func TestResumeEndsMaxHoldGrants(t *testing.T) {
	h, a, b := twoSessions(t)
	timed := acqCmd(a, 1, "T", true)
	timed.MaxHold = 1e9
	tokT := mustOne(h, timed).Value
	tokK := mustOne(h, acqCmd(a, 2, "K", true)).Value
	h.one(acqCmd(b, 1, "T", true))
	r, evs := h.one(Command{Kind: KindResume, Session: a, Nonce: 1, Owner: 2, Target: 9, TTL: openCmd(0).TTL})
	require.Equal(t, OK, r.Status)
	require.Contains(t, evs, freedEv(ReasonMaxHold, a, 1, "T", tokT))
	require.Equal(t, b, h.st.Lock("T").Session)
	_, kept := h.st.Kept(a)
	require.Len(t, kept, 1)
	require.Equal(t, tokK, kept[0].Token)
}

// A resume that withdraws the exclusive request at the head of a queue
// lets the shared requests behind it in, as a cancel would.
func TestResumeWithdrawalGrantsBehind(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.open(1), h.open(2), h.open(3)
	h.one(Command{Kind: KindAcquireShared, Session: b, Seq: 1, Name: "L", Wait: true})
	require.Equal(t, Queued, mustOne(h, acqCmd(a, 1, "L", true)).Status)
	require.Equal(t, Queued, mustOne(h, Command{Kind: KindAcquireShared, Session: c, Seq: 1, Name: "L", Wait: true}).Status)
	h.one(Command{Kind: KindResume, Session: a, Nonce: 1, Owner: 2, Target: 9, TTL: openCmd(0).TTL})
	require.Len(t, h.st.Lock("L").Holders, 2, "c is granted beside b")
}

// From version 5 an operator's revoke of a lock whose holder's session has
// a lock-delay delays it, as an EndSession does: the queue's head waits for
// the leader's Undelay. A shared lock revoked whole takes the longest of its
// holders' delays; an election is never delayed. The same revokes in a
// version-4 entry, as an old log replays them, free the lock at once.
func TestRevokeAppliesLockDelay(t *testing.T) {
	setup := func(t *testing.T) (h *harness, a, b, tok uint64) {
		h = newHarness(t)
		a, b = h.openDelayed(1, testDelay), h.open(2)
		tok = mustOne(h, acqCmd(a, 1, "L", true)).Value
		require.Equal(t, Queued, mustOne(h, acqCmd(b, 1, "L", true)).Status)
		return h, a, b, tok
	}
	t.Run("version 5", func(t *testing.T) {
		h, a, b, tok := setup(t)
		r, evs := h.one(Command{Kind: KindRevoke, Name: "L", Token: tok})
		require.Equal(t, OK, r.Status)
		require.Equal(t, []Event{
			freedEv(ReasonRevoked, a, 1, "L", tok),
			delayedEv(ReasonRevoked, a, 1, "L", tok, testDelay),
		}, evs)
		require.Equal(t, LockInfo{Name: "L", Waiters: 1, Delayed: true, Delay: testDelay}, h.st.Lock("L"))
		info, ok := h.st.Session(a)
		require.True(t, ok, "the session lives on: only its grant was revoked")
		require.Zero(t, info.Held)
		r, evs = h.one(Command{Kind: KindUndelay, Name: "L", Token: tok})
		require.Equal(t, OK, r.Status)
		require.Equal(t, b, h.st.Lock("L").Session)
		require.Equal(t, grantedEv(b, 1, "L", h.st.Lock("L").Token), evs[1])
	})
	t.Run("version 4 replayed", func(t *testing.T) {
		h, _, b, tok := setup(t)
		// A revoke's encoding did not change in versions 5 and 6; version
		// 7 appended its operation ID (0: one byte).
		data := AppendBatch(nil, []Command{{Kind: KindRevoke, Name: "L", Token: tok}})
		data = asVersion(data[:len(data)-1], 4)
		cmds, err := DecodeBatch(data, nil)
		require.NoError(t, err)
		rs, _ := h.apply(cmds...)
		require.Equal(t, OK, rs[0].Status)
		info := h.st.Lock("L")
		require.False(t, info.Delayed)
		require.Equal(t, b, info.Session, "granted on at once, as version 4 did")
	})
	t.Run("shared, whole", func(t *testing.T) {
		h := newHarness(t)
		a, b, c := h.openDelayed(1, testDelay), h.openDelayed(2, 2*testDelay), h.open(3)
		for _, s := range []uint64{a, b, c} {
			require.Equal(t, Granted, mustOne(h, Command{Kind: KindAcquireShared, Session: s, Seq: 1, Name: "L", Wait: true}).Status)
		}
		d := h.open(4)
		require.Equal(t, Queued, mustOne(h, acqCmd(d, 1, "L", true)).Status)
		require.Equal(t, OK, mustOne(h, Command{Kind: KindRevoke, Name: "L"}).Status)
		require.Equal(t, LockInfo{Name: "L", Waiters: 1, Delayed: true, Delay: 2 * testDelay}, h.st.Lock("L"))
		delays, _ := h.st.Timers()
		require.Len(t, delays, 1)
		require.Equal(t, OK, mustOne(h, Command{Kind: KindUndelay, Name: "L", Token: delays[0].Token}).Status)
		require.Equal(t, d, h.st.Lock("L").Session)
	})
	t.Run("election", func(t *testing.T) {
		h := newHarness(t)
		a, b := h.openDelayed(1, testDelay), h.open(2)
		require.Equal(t, Granted, mustOne(h, campaignCmd(a, 1, "E", "a")).Status)
		require.Equal(t, Queued, mustOne(h, campaignCmd(b, 1, "E", "b")).Status)
		require.Equal(t, OK, mustOne(h, Command{Kind: KindRevoke, Name: "E", Election: true}).Status)
		require.Equal(t, b, h.st.Election("E").Session)
	})
}
