package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func sharedCmd(s, seq uint64, name string, wait bool) Command {
	return Command{Kind: KindAcquireShared, Session: s, Seq: seq, Name: name, Wait: wait}
}

func semCmd(s, seq uint64, name string, permits uint64, wait bool) Command {
	return Command{Kind: KindAcquireShared, Session: s, Seq: seq, Name: name, Wait: wait, Permits: permits}
}

func sharedGrantedEv(s, seq uint64, name string, token, permits uint64) Event {
	return Event{Kind: EventGranted, Session: s, Seq: seq, Token: token, Name: name, Shared: true, Permits: permits}
}

func sharedFreedEv(why Reason, s, seq uint64, name string, token, permits uint64) Event {
	return Event{Kind: EventFreed, Reason: why, Session: s, Seq: seq, Token: token, Name: name, Shared: true, Permits: permits}
}

func holderSessions(info LockInfo) []uint64 {
	var out []uint64
	for _, h := range info.Holders {
		out = append(out, h.Session)
	}
	return out
}

// Consecutive shared requests at the head are granted together; a shared
// request behind a queued exclusive one waits for it (no writer
// starvation); modes switch in queue order, each grant with a larger token.
func TestSharedExclusiveFairModeSwitching(t *testing.T) {
	h := newHarness(t)
	var ss []uint64
	for i := range 7 {
		ss = append(ss, h.open(uint64(i+1)))
	}
	a, b, w, c, d, x, e := ss[0], ss[1], ss[2], ss[3], ss[4], ss[5], ss[6]

	rs, _ := h.apply(sharedCmd(a, 1, "L", true), sharedCmd(b, 1, "L", true))
	require.Equal(t, Granted, rs[0].Status)
	require.Equal(t, Granted, rs[1].Status)
	require.Greater(t, rs[1].Value, rs[0].Value)
	ta, tb := rs[0].Value, rs[1].Value
	info := h.st.Lock("L")
	require.True(t, info.Shared)
	require.Equal(t, []uint64{a, b}, holderSessions(info))
	require.Equal(t, ta, info.Token, "the oldest grant is the lock's Token")

	// An exclusive request queues; shared ones behind it queue too.
	rs, _ = h.apply(acqCmd(w, 1, "L", true), sharedCmd(c, 1, "L", true), sharedCmd(d, 1, "L", true),
		acqCmd(x, 1, "L", true), sharedCmd(e, 1, "L", true))
	for _, r := range rs {
		require.Equal(t, Queued, r.Status)
	}
	r, _ := h.one(sharedCmd(e, 2, "L", false))
	require.Equal(t, Locked, r.Status, "a try-shared does not overtake the queued writer")

	// The first reader leaves: the writer still waits for the second.
	r, evs := h.one(relCmd(a, 2, "L", ta))
	require.Equal(t, OK, r.Status)
	require.Equal(t, []Event{sharedFreedEv(ReasonReleased, a, 1, "L", ta, 0)}, evs)

	// The second leaves: the writer alone is granted.
	r, evs = h.one(relCmd(b, 2, "L", tb))
	require.Equal(t, OK, r.Status)
	tw := h.st.Lock("L").Token
	require.Greater(t, tw, tb, "the writer's token is above every reader's before it")
	require.Equal(t, []Event{sharedFreedEv(ReasonReleased, b, 1, "L", tb, 0), grantedEv(w, 1, "L", tw)}, evs)
	require.False(t, h.st.Lock("L").Shared)
	require.Equal(t, 4, h.st.Lock("L").Waiters)

	// The writer leaves: the two readers at the head are granted together,
	// in the same entry, and stop at the next writer.
	r, evs = h.one(relCmd(w, 2, "L", tw))
	require.Equal(t, OK, r.Status)
	info = h.st.Lock("L")
	require.Equal(t, []uint64{c, d}, holderSessions(info))
	tc, td := info.Holders[0].Token, info.Holders[1].Token
	require.Greater(t, tc, tw)
	require.Greater(t, td, tc)
	require.Equal(t, []Event{freedEv(ReasonReleased, w, 1, "L", tw),
		sharedGrantedEv(c, 1, "L", tc, 0), sharedGrantedEv(d, 1, "L", td, 0)}, evs)
	require.Equal(t, 2, info.Waiters)

	// Both readers end: the second writer, then the last reader.
	h.apply(relCmd(c, 2, "L", tc), relCmd(d, 2, "L", td))
	info = h.st.Lock("L")
	require.Equal(t, []uint64{x}, holderSessions(info))
	h.one(relCmd(x, 2, "L", info.Token))
	info = h.st.Lock("L")
	require.Equal(t, []uint64{e}, holderSessions(info))
	require.Zero(t, info.Waiters)
	require.True(t, info.Shared)
	// Nobody waits: a new shared request joins at once.
	r, _ = h.one(sharedCmd(a, 3, "L", false))
	require.Equal(t, Granted, r.Status)
	roundTrip(t, h.st)
}

// An exclusive try fails while readers hold; a shared request waits while
// a writer holds.
func TestSharedAndExclusiveExcludeEachOther(t *testing.T) {
	h, a, b := twoSessions(t)
	r, _ := h.one(sharedCmd(a, 1, "L", false))
	require.Equal(t, Granted, r.Status)
	r, _ = h.one(acqCmd(b, 1, "L", false))
	require.Equal(t, Locked, r.Status)
	r, _ = h.one(acqCmd(b, 2, "W", false))
	require.Equal(t, Granted, r.Status)
	r, _ = h.one(sharedCmd(a, 2, "W", false))
	require.Equal(t, Locked, r.Status)
	r, _ = h.one(sharedCmd(a, 3, "W", true))
	require.Equal(t, Queued, r.Status)
	// The same session may hold a lock in shared mode twice.
	r, _ = h.one(sharedCmd(a, 4, "L", false))
	require.Equal(t, Granted, r.Status)
	require.Len(t, h.st.Lock("L").Holders, 2)
	roundTrip(t, h.st)
}

// Cancelling the exclusive head of the queue lets the shared requests
// behind it join the readers at once.
func TestCancelledWriterLetsReadersIn(t *testing.T) {
	for _, how := range []string{"cancel", "end-session"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t)
			a, w, c := h.open(1), h.open(2), h.open(3)
			h.one(sharedCmd(a, 1, "L", true))
			h.apply(acqCmd(w, 1, "L", true), sharedCmd(c, 1, "L", true))
			require.Equal(t, 2, h.st.Lock("L").Waiters)
			if how == "cancel" {
				r, _ := h.one(cancelCmd(w, 1))
				require.Equal(t, Cancelled, r.Status)
			} else {
				h.one(Command{Kind: KindEndSession, Session: w})
			}
			info := h.st.Lock("L")
			require.Equal(t, []uint64{a, c}, holderSessions(info))
			require.Zero(t, info.Waiters)
		})
	}
}

// Release, Cancel, Expire, EndSession and Revoke end one holder's grant
// and leave the others'.
func TestSharedHoldersEndOneByOne(t *testing.T) {
	h := newHarness(t)
	a, b, c, d, w := h.open(1), h.open(2), h.open(3), h.open(4), h.open(5)
	rs, _ := h.apply(sharedCmd(a, 1, "L", true), sharedCmd(b, 1, "L", true), sharedCmd(c, 1, "L", true),
		sharedCmd(d, 1, "L", true), sharedCmd(d, 2, "L", true), acqCmd(w, 1, "L", true))
	require.Equal(t, Queued, rs[5].Status)
	tb, tc := rs[1].Value, rs[2].Value

	r, evs := h.one(Command{Kind: KindRevoke, Name: "L", Token: tb})
	require.Equal(t, OK, r.Status)
	require.Equal(t, []Event{sharedFreedEv(ReasonRevoked, b, 1, "L", tb, 0)}, evs)
	r, _ = h.one(Command{Kind: KindRevoke, Name: "L", Token: tb})
	require.Equal(t, NotHeld, r.Status, "a revoked grant is not current")

	r, evs = h.one(cancelCmd(c, 1))
	require.Equal(t, Cancelled, r.Status)
	require.Equal(t, []Event{sharedFreedEv(ReasonCancelled, c, 1, "L", tc, 0)}, evs)

	ka := h.st.sessions[a].keepAlive
	r, evs = h.one(expireCmd(a, ka))
	require.Equal(t, OK, r.Status)
	require.Equal(t, []Event{sharedFreedEv(ReasonExpired, a, 1, "L", rs[0].Value, 0), endedEv(ReasonExpired, a)}, evs)
	require.Equal(t, []uint64{d, d}, holderSessions(h.st.Lock("L")))

	// The session holding the lock twice ends: both grants end, in token
	// order, and the writer is granted after the second.
	_, evs = h.one(closeCmd(d))
	tw := h.st.Lock("L").Token
	require.Equal(t, []Event{sharedFreedEv(ReasonClosed, d, 1, "L", rs[3].Value, 0),
		sharedFreedEv(ReasonClosed, d, 2, "L", rs[4].Value, 0),
		grantedEv(w, 1, "L", tw), endedEv(ReasonClosed, d)}, evs)
	roundTrip(t, h.st)
}

// Revoke without a token ends every current holder of a shared lock, then
// the queue is granted.
func TestRevokeAllSharedHolders(t *testing.T) {
	h := newHarness(t)
	a, b, w := h.open(1), h.open(2), h.open(3)
	rs, _ := h.apply(sharedCmd(a, 1, "L", true), sharedCmd(b, 1, "L", true), acqCmd(w, 1, "L", true))
	r, evs := h.one(Command{Kind: KindRevoke, Name: "L"})
	require.Equal(t, OK, r.Status)
	tw := h.st.Lock("L").Token
	require.Equal(t, []Event{sharedFreedEv(ReasonRevoked, a, 1, "L", rs[0].Value, 0),
		sharedFreedEv(ReasonRevoked, b, 1, "L", rs[1].Value, 0), grantedEv(w, 1, "L", tw)}, evs)
	r, _ = h.one(relCmd(a, 2, "L", rs[0].Value))
	require.Equal(t, NotHeld, r.Status)
}

// A semaphore admits permits holders, FIFO, a token each; a request naming
// another count fails with Conflict and changes nothing.
func TestSemaphore(t *testing.T) {
	h := newHarness(t)
	var ss []uint64
	for i := range 5 {
		ss = append(ss, h.open(uint64(i+1)))
	}
	rs, evs := h.apply(semCmd(ss[0], 1, "S", 2, true), semCmd(ss[1], 1, "S", 2, true), semCmd(ss[2], 1, "S", 2, true))
	require.Equal(t, []Status{Granted, Granted, Queued}, []Status{rs[0].Status, rs[1].Status, rs[2].Status})
	require.Equal(t, []Event{sharedGrantedEv(ss[0], 1, "S", rs[0].Value, 2), sharedGrantedEv(ss[1], 1, "S", rs[1].Value, 2)}, evs)
	info := h.st.Lock("S")
	require.Equal(t, uint64(2), info.Permits)
	require.True(t, info.Shared)
	require.Equal(t, 1, info.Waiters)

	r, _ := h.one(semCmd(ss[3], 1, "S", 2, false))
	require.Equal(t, Locked, r.Status, "full")

	before := saveBytes(t, h.st)
	for _, c := range []Command{
		semCmd(ss[3], 2, "S", 3, true),
		semCmd(ss[3], 3, "S", 1, false),
		sharedCmd(ss[3], 4, "S", true),
		acqCmd(ss[3], 5, "S", true),
	} {
		r, evs := h.one(c)
		require.Equal(t, Result{Status: Conflict, Value: 2}, r, "%+v", c)
		require.Empty(t, evs)
	}
	after := saveBytes(t, h.st)
	require.Equal(t, len(before), len(after)-4*3, "only the four replies were added")
	require.Equal(t, Result{Status: Conflict, Value: 2}, h.st.sessions[ss[3]].replies[2])

	// A lock conflicts with a semaphore's request too.
	h.one(acqCmd(ss[4], 1, "M", false))
	r, _ = h.one(semCmd(ss[3], 6, "M", 2, false))
	require.Equal(t, Result{Status: Conflict, Value: 0}, r)

	// A holder leaves: the head of the queue takes its permit.
	r, evs = h.one(relCmd(ss[0], 2, "S", rs[0].Value))
	require.Equal(t, OK, r.Status)
	t2 := h.st.Lock("S").Holders[1].Token
	require.Greater(t, t2, rs[1].Value)
	require.Equal(t, []Event{sharedFreedEv(ReasonReleased, ss[0], 1, "S", rs[0].Value, 2), sharedGrantedEv(ss[2], 1, "S", t2, 2)}, evs)
	require.Equal(t, []uint64{ss[1], ss[2]}, holderSessions(h.st.Lock("S")))
	roundTrip(t, h.st)

	// Once the semaphore is gone, its name takes any count.
	h.apply(relCmd(ss[1], 2, "S", rs[1].Value), relCmd(ss[2], 2, "S", t2))
	require.False(t, h.st.Lock("S").Held)
	r, _ = h.one(semCmd(ss[3], 7, "S", 5, false))
	require.Equal(t, Granted, r.Status)
	require.Equal(t, uint64(5), h.st.Lock("S").Permits)
}

func TestSemaphoreInvalidCounts(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	r, _ := h.one(semCmd(a, 1, "S", MaxHoldersPerLock+1, true))
	require.Equal(t, Invalid, r.Status)
	r, _ = h.one(Command{Kind: KindAcquire, Session: a, Seq: 2, Name: "S", Permits: 2})
	require.Equal(t, Invalid, r.Status, "an exclusive request names no permits")
	r, _ = h.one(semCmd(a, 3, "", 2, true))
	require.Equal(t, Invalid, r.Status)
	r, _ = h.one(semCmd(a, 4, "S", MaxHoldersPerLock, false))
	require.Equal(t, Granted, r.Status)
}

// A shared lock admits at most MaxHoldersPerLock holders; beyond, requests
// wait like any the holders do not admit.
func TestSharedHoldersBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 grants")
	}
	h := newHarness(t)
	var ss []uint64
	for i := range MaxHoldersPerLock/MaxLocksPerSession + 1 {
		ss = append(ss, h.open(uint64(i+1)))
	}
	seq := uint64(0)
	for n := 0; n < MaxHoldersPerLock; {
		var cmds []Command
		for ; len(cmds) < MaxBatch && n < MaxHoldersPerLock; n++ {
			seq++
			cmds = append(cmds, Command{Kind: KindAcquireShared, Session: ss[0], Seq: seq, Floor: seq, Name: "L"})
		}
		rs, _ := h.apply(cmds...)
		for _, r := range rs {
			require.Equal(t, Granted, r.Status)
		}
	}
	require.Len(t, h.st.Lock("L").Holders, MaxHoldersPerLock)
	r, _ := h.one(sharedCmd(ss[1], 1, "L", false))
	require.Equal(t, Locked, r.Status)
	r, _ = h.one(sharedCmd(ss[1], 2, "L", true))
	require.Equal(t, Queued, r.Status)
	tok := h.st.Lock("L").Token
	r, _ = h.one(Command{Kind: KindRelease, Session: ss[0], Seq: seq + 1, Floor: seq + 1, Name: "L", Token: tok})
	require.Equal(t, OK, r.Status)
	require.Zero(t, h.st.Lock("L").Waiters)
	require.Equal(t, ss[1], h.st.Lock("L").Holders[MaxHoldersPerLock-1].Session)
}

// Restore rejects snapshots whose shared holders break the rules.
func TestRestoreRejectsBadSharedLocks(t *testing.T) {
	good := validImage()
	good.locks[1].shared = true
	good.locks[1].more = [][3]uint64{{imgA, 7, 100<<TokenShift + 5}}
	good.locks[1].token = 100<<TokenShift + 4
	st, err := DecodeSnapshot(good.bytes())
	require.NoError(t, err)
	require.NoError(t, checkInvariants(st, true))
	require.Equal(t, good.bytes(), saveBytes(t, st))
	require.Equal(t, []uint64{imgB, imgA}, holderSessions(st.Lock("beta")))
	require.Equal(t, 2, st.sessions[imgA].held.n)

	for _, tc := range []struct {
		name   string
		mutate func(im *snapImage)
	}{
		{"two exclusive holders", func(im *snapImage) { im.locks[1].shared = false }},
		{"holders out of token order", func(im *snapImage) { im.locks[1].more[0][2] = 100<<TokenShift + 3 }},
		{"holders share a token", func(im *snapImage) { im.locks[1].more[0][2] = im.locks[1].token }},
		{"holder of an unknown session", func(im *snapImage) { im.locks[1].more[0][0] = 9 }},
		{"request holds twice", func(im *snapImage) { im.locks[1].more[0][1] = 2 }},
		{"exclusive semaphore", func(im *snapImage) { im.locks[1].shared, im.locks[1].permits = false, 2 }},
		{"exclusive waiter of a semaphore", func(im *snapImage) {
			im.locks[0].permits, im.locks[0].shared = 1, true
			im.locks[0].queueShared = []bool{true, false}
		}},
		{"queue head admitted", func(im *snapImage) {
			im.locks[0].shared = true
			im.locks[0].queueShared = []bool{true, false}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := good
			im.locks = []snapLock{good.locks[0], good.locks[1]}
			im.locks[1].more = [][3]uint64{good.locks[1].more[0]}
			tc.mutate(&im)
			_, err := DecodeSnapshot(im.bytes())
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}
