package fsm

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAcquireFreeLockIsGranted(t *testing.T) {
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprint("wait=", wait), func(t *testing.T) {
			h := newHarness(t)
			a := h.open(1)
			r, evs := h.one(acqCmd(a, 1, "job", wait))
			require.Equal(t, Granted, r.Status)
			require.Equal(t, h.idx<<TokenShift, r.Value, "first token of an entry is index<<TokenShift")
			require.Equal(t, []Event{grantedEv(a, 1, "job", r.Value)}, evs)
			require.Equal(t, LockInfo{Name: "job", Held: true, Token: r.Value, Session: a, Seq: 1, Holders: []Holder{{Session: a, Seq: 1, Token: r.Value, Owner: 1}}}, h.st.Lock("job"))
			name, tok, ok := h.st.Grant(a, 1)
			require.True(t, ok)
			require.Equal(t, "job", name)
			require.Equal(t, r.Value, tok)
			require.True(t, h.st.Holds(a, "job", r.Value))
			require.False(t, h.st.Holds(a, "job", r.Value+1))
			require.False(t, h.st.Queued(a, 1))
			info, ok := h.st.Session(a)
			require.True(t, ok)
			require.Equal(t, 1, info.Held)
			require.Equal(t, 0, info.Waiting)
			ns, nl, nw := h.st.Counts()
			require.Equal(t, [3]int{1, 1, 0}, [3]int{ns, nl, nw})
		})
	}
}

func TestAcquireHeldLock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		wait    bool
		want    Status
		waiters int
	}{
		{"try-acquire fails at once", false, Locked, 0},
		{"acquire queues", true, Queued, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, a, b := twoSessions(t)
			g, _ := h.one(acqCmd(a, 1, "job", false))
			require.Equal(t, Granted, g.Status)

			r, evs := h.one(acqCmd(b, 1, "job", tc.wait))
			require.Equal(t, Result{Status: tc.want}, r)
			require.Empty(t, evs)
			require.Equal(t, LockInfo{Name: "job", Held: true, Token: g.Value, Session: a, Seq: 1, Waiters: tc.waiters, Holders: []Holder{{Session: a, Seq: 1, Token: g.Value, Owner: 1}}}, h.st.Lock("job"))
			require.Equal(t, tc.wait, h.st.Queued(b, 1))
			_, _, ok := h.st.Grant(b, 1)
			require.False(t, ok)
			info, _ := h.st.Session(b)
			require.Equal(t, tc.waiters, info.Waiting)
			require.Equal(t, 0, info.Held)
			_, _, nw := h.st.Counts()
			require.Equal(t, tc.waiters, nw)
		})
	}
}

func TestFIFOGrantOrder(t *testing.T) {
	h := newHarness(t)
	var ss []uint64
	for n := range uint64(5) {
		ss = append(ss, h.open(100+n))
	}
	g, _ := h.one(acqCmd(ss[0], 1, "L", true))
	require.Equal(t, Granted, g.Status)

	// Queue in an order unrelated to the session IDs.
	order := []uint64{ss[3], ss[1], ss[4], ss[2]}
	for i, s := range order {
		r, evs := h.one(acqCmd(s, 1, "L", true))
		require.Equal(t, Queued, r.Status)
		require.Empty(t, evs)
		require.Equal(t, i+1, h.st.Lock("L").Waiters)
	}

	holder, tok := ss[0], g.Value
	for i, next := range order {
		rs, evs := h.apply(relCmd(holder, 2, "L", tok))
		require.Equal(t, []Result{{Status: OK}}, rs)
		want := h.idx << TokenShift
		require.Equal(t, []Event{
			freedEv(ReasonReleased, holder, 1, "L", tok),
			grantedEv(next, 1, "L", want),
		}, evs, "exactly one grant per release, to the head only")
		require.Equal(t, LockInfo{Name: "L", Held: true, Token: want, Session: next, Seq: 1, Waiters: len(order) - i - 1, Holders: []Holder{{Session: next, Seq: 1, Token: want, Owner: 1}}}, h.st.Lock("L"))
		require.False(t, h.st.Queued(next, 1))
		for _, later := range order[i+1:] {
			require.True(t, h.st.Queued(later, 1))
		}
		holder, tok = next, want
	}
	rs, evs := h.apply(relCmd(holder, 2, "L", tok))
	require.Equal(t, []Result{{Status: OK}}, rs)
	require.Equal(t, []Event{freedEv(ReasonReleased, holder, 1, "L", tok)}, evs)
	require.Equal(t, LockInfo{Name: "L"}, h.st.Lock("L"))
	ns, nl, nw := h.st.Counts()
	require.Equal(t, [3]int{5, 0, 0}, [3]int{ns, nl, nw})
}

func TestReleaseChainInOneEntry(t *testing.T) {
	// A release grants the queue head in the same entry, so the new holder
	// can release in a later command of that entry.
	h := newHarness(t)
	a, b, c := h.open(1), h.open(2), h.open(3)
	g, _ := h.one(acqCmd(a, 1, "L", false))
	h.apply(acqCmd(b, 1, "L", true), acqCmd(c, 1, "L", true))
	idx := h.idx + 1
	t1, t2 := idx<<TokenShift, idx<<TokenShift+1
	rs, evs := h.apply(relCmd(a, 2, "L", g.Value), relCmd(b, 2, "L", t1))
	require.Equal(t, []Result{{Status: OK}, {Status: OK}}, rs)
	require.Equal(t, []Event{
		freedEv(ReasonReleased, a, 1, "L", g.Value),
		grantedEv(b, 1, "L", t1),
		freedEv(ReasonReleased, b, 1, "L", t1),
		grantedEv(c, 1, "L", t2),
	}, evs)
	require.Equal(t, LockInfo{Name: "L", Held: true, Token: t2, Session: c, Seq: 1, Holders: []Holder{{Session: c, Seq: 1, Token: t2, Owner: 1}}}, h.st.Lock("L"))
}

func TestTokensRiseAcrossLocksAndEntries(t *testing.T) {
	h, a, b := twoSessions(t)
	perLock := map[string]uint64{}
	seen := map[uint64]bool{}
	held := map[string]uint64{}
	seq := map[uint64]uint64{a: 0, b: 0}
	for i := range 60 {
		s := []uint64{a, b}[i%2]
		name := fmt.Sprint("lock-", i%3)
		idx := h.idx + 1 + uint64(i%4)*3 // gaps in the index, as with other entries in between
		prev := h.st.LastToken()
		seq[s]++
		var rs []Result
		if tok, ok := held[name]; ok {
			holder := h.st.Lock(name).Session
			seq[holder]++
			rs, _ = h.applyAt(idx, relCmd(holder, seq[holder], name, tok), acqCmd(s, seq[s], name, false))
			require.Equal(t, OK, rs[0].Status)
			rs = rs[1:]
		} else {
			rs, _ = h.applyAt(idx, acqCmd(s, seq[s], name, false))
		}
		require.Equal(t, Granted, rs[0].Status)
		tok := rs[0].Value
		require.Equal(t, max(prev+1, idx<<TokenShift), tok)
		require.Greater(t, tok, perLock[name], "per lock")
		require.False(t, seen[tok], "unique across locks")
		seen[tok], perLock[name], held[name] = true, tok, tok
	}
}

func TestTokensManyGrantsInOneEntry(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	var cmds []Command
	for i := range 200 {
		cmds = append(cmds, acqCmd(a, uint64(i+1), fmt.Sprint("l", i), false))
	}
	idx := h.idx + 1
	rs, evs := h.apply(cmds...)
	require.Len(t, evs, len(cmds))
	for i, r := range rs {
		require.Equal(t, Result{Status: Granted, Value: idx<<TokenShift + uint64(i)}, r)
		require.Equal(t, grantedEv(a, uint64(i+1), fmt.Sprint("l", i), r.Value), evs[i])
	}
	r, _ := h.one(acqCmd(a, 1000, "next", false))
	require.Equal(t, (idx+1)<<TokenShift, r.Value)
}

func TestTokensStayIncreasingPastTheShift(t *testing.T) {
	// More grants in one entry than fit below the next index's range: the
	// next entry's tokens continue above them. (A plain State: the harness's
	// checks would be slow at this size.)
	// The grants are spread over sessions to stay under MaxLocksPerSession.
	st := New()
	n := 1<<TokenShift + 100
	opens := make([]Command, (n+MaxLocksPerSession-1)/MaxLocksPerSession)
	for i := range opens {
		opens[i] = openCmd(uint64(i + 1))
	}
	rs, _ := st.Apply(1, opens)
	a := rs[0].Value
	cmds := make([]Command, n)
	for i := range cmds {
		seq := uint64(i/len(rs) + 1)
		cmds[i] = Command{Kind: KindAcquire, Session: rs[i%len(rs)].Value, Seq: seq, Floor: seq, Name: fmt.Sprint(i)}
	}
	rs, evs := st.Apply(2, cmds)
	require.Len(t, evs, n)
	for i, r := range rs {
		if want := 2<<TokenShift + uint64(i); r.Status != Granted || r.Value != want || evs[i].Token != want {
			t.Fatalf("grant %d: %+v, event %+v, want token %d", i, r, evs[i], want)
		}
	}
	last := st.LastToken()
	require.Equal(t, 2<<TokenShift+uint64(n)-1, last)
	require.Greater(t, last, uint64(3<<TokenShift))
	require.NoError(t, checkInvariants(st, true))

	// A restored copy (the snapshot is large enough to be written in several
	// chunks) continues from the same token.
	data := saveBytes(t, st)
	restored, err := DecodeSnapshot(data)
	require.NoError(t, err)
	require.Equal(t, data, saveBytes(t, restored))
	for _, s := range []*State{st, restored} {
		rs, _ := s.Apply(3, []Command{{Kind: KindAcquire, Session: a, Seq: uint64(n + 1), Floor: uint64(n + 1), Name: "next"}})
		require.Equal(t, Result{Status: Granted, Value: last + 1}, rs[0])
	}
	require.Equal(t, saveBytes(t, st), saveBytes(t, restored))
}

func TestTokensContinueAfterRestore(t *testing.T) {
	// A snapshot whose last token is above the next index's range.
	im := validImage()
	im.lastToken = 200 << TokenShift
	st, err := DecodeSnapshot(im.bytes())
	require.NoError(t, err)
	hi := harnessFor(t, st)
	r, _ := hi.one(acqCmd(imgA, 50, "fresh", false))
	require.Equal(t, Result{Status: Granted, Value: 200<<TokenShift + 1}, r)

	h := buildRich(t)
	last := h.st.LastToken()
	restored := harnessFor(t, roundTrip(t, h.st))
	a := h.st.Sessions()[0].ID
	for _, hh := range []*harness{h, restored} {
		r, _ := hh.one(acqCmd(a, 100, "fresh", false))
		require.Equal(t, Granted, r.Status)
		require.Greater(t, r.Value, last)
		require.Equal(t, max(last+1, hh.idx<<TokenShift), r.Value)
	}
}

func TestReleaseNeedsCurrentToken(t *testing.T) {
	h, a, b := twoSessions(t)
	rx, _ := h.one(acqCmd(a, 1, "x", false))
	ry, _ := h.one(acqCmd(b, 1, "y", false))
	tx, ty := rx.Value, ry.Value
	h.one(acqCmd(b, 2, "x", true))

	seq := uint64(10) // every case is a new request, so it is really applied
	for _, tc := range []struct {
		name string
		cmd  func(seq uint64) Command
	}{
		{"wrong token", func(seq uint64) Command { return relCmd(a, seq, "x", tx+1) }},
		{"zero token", func(seq uint64) Command { return relCmd(a, seq, "x", 0) }},
		{"older token", func(seq uint64) Command { return relCmd(a, seq, "x", tx-1) }},
		{"other session with the token", func(seq uint64) Command { return relCmd(b, seq, "x", tx) }},
		{"token of another lock", func(seq uint64) Command { return relCmd(a, seq, "y", tx) }},
		{"another session's lock and token", func(seq uint64) Command { return relCmd(a, seq, "y", ty) }},
		{"lock nobody holds", func(seq uint64) Command { return relCmd(a, seq, "nope", tx) }},
		{"invalid name", func(seq uint64) Command { return relCmd(a, seq, "", tx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seq++
			before := viewOf(h.st)
			r, evs := h.one(tc.cmd(seq))
			require.Equal(t, Result{Status: NotHeld}, r)
			require.Empty(t, evs)
			after := viewOf(h.st)
			before.Index = after.Index
			require.Equal(t, before, after, "a failed release changes nothing")
			require.Equal(t, Result{Status: NotHeld}, h.st.sessions[tc.cmd(seq).Session].replies[seq])
		})
	}

	// A late release of a grant that has passed on never frees the successor.
	r, _ := h.one(relCmd(a, 100, "x", tx))
	require.Equal(t, OK, r.Status)
	tb := h.st.Lock("x").Token
	require.Equal(t, b, h.st.Lock("x").Session)
	r, evs := h.one(relCmd(a, 101, "x", tx))
	require.Equal(t, NotHeld, r.Status)
	require.Empty(t, evs)
	require.Equal(t, LockInfo{Name: "x", Held: true, Token: tb, Session: b, Seq: 2, Holders: []Holder{{Session: b, Seq: 2, Token: tb, Owner: 1}}}, h.st.Lock("x"))
}

func TestDedupAcquire(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmd  func(a uint64) Command
		want Status
	}{
		{"granted", func(a uint64) Command { return acqCmd(a, 7, "free", false) }, Granted},
		{"queued", func(a uint64) Command { return acqCmd(a, 7, "busy", true) }, Queued},
		{"locked", func(a uint64) Command { return acqCmd(a, 7, "busy", false) }, Locked},
		{"invalid", func(a uint64) Command { return acqCmd(a, 7, "", true) }, Invalid},
	} {
		for _, sameEntry := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/same-entry=%v", tc.name, sameEntry), func(t *testing.T) {
				h, a, b := twoSessions(t)
				h.one(acqCmd(b, 1, "busy", false))
				cmd := tc.cmd(a)
				var first, second Result
				var evs []Event
				if sameEntry {
					rs, e := h.apply(cmd, cmd)
					first, second, evs = rs[0], rs[1], e
				} else {
					first, evs = h.one(cmd)
					snap, last := saveBytes(t, h.st), h.st.LastToken()
					var e2 []Event
					second, e2 = h.one(cmd)
					require.Empty(t, e2, "a retry reports nothing")
					require.Equal(t, last, h.st.LastToken())
					// Only the index moved: restoring the old snapshot at the
					// new index gives the same bytes.
					old, err := DecodeSnapshot(snap)
					require.NoError(t, err)
					old.index = h.idx
					require.Equal(t, saveBytes(t, old), saveBytes(t, h.st), "a retry changes nothing")
				}
				require.Equal(t, tc.want, first.Status)
				require.Equal(t, first, second)
				grants, wantGrants, wantWaiters := 0, 0, 0
				for _, e := range evs {
					if e.Kind == EventGranted {
						grants++
					}
				}
				switch tc.want {
				case Granted:
					wantGrants = 1
				case Queued:
					wantWaiters = 1
				}
				require.Equal(t, wantGrants, grants, "granted at most once")
				require.Equal(t, wantWaiters, h.st.Lock("busy").Waiters, "queued at most once")
			})
		}
	}
}

func TestDedupLockedStaysLockedAfterTheLockFrees(t *testing.T) {
	h, a, b := twoSessions(t)
	g, _ := h.one(acqCmd(b, 1, "busy", false))
	r, _ := h.one(acqCmd(a, 1, "busy", false))
	require.Equal(t, Locked, r.Status)
	h.one(relCmd(b, 2, "busy", g.Value))
	r, evs := h.one(acqCmd(a, 1, "busy", false))
	require.Equal(t, Result{Status: Locked}, r, "a retry returns the first reply")
	require.Empty(t, evs)
	require.Equal(t, LockInfo{Name: "busy"}, h.st.Lock("busy"))
}

func TestDedupQueuedThenGranted(t *testing.T) {
	h, a, b := twoSessions(t)
	g, _ := h.one(acqCmd(b, 1, "L", false))
	r, _ := h.one(acqCmd(a, 5, "L", true))
	require.Equal(t, Queued, r.Status)
	_, evs := h.one(relCmd(b, 2, "L", g.Value))
	tok := h.idx << TokenShift
	require.Contains(t, evs, grantedEv(a, 5, "L", tok))

	// The retry, even with other fields, returns the grant and changes nothing.
	for _, retry := range []Command{acqCmd(a, 5, "L", true), acqCmd(a, 5, "L", false), acqCmd(a, 5, "other", true)} {
		r, evs = h.one(retry)
		require.Equal(t, Result{Status: Granted, Value: tok}, r)
		require.Empty(t, evs)
		require.Equal(t, LockInfo{Name: "L", Held: true, Token: tok, Session: a, Seq: 5, Holders: []Holder{{Session: a, Seq: 5, Token: tok, Owner: 1}}}, h.st.Lock("L"))
		require.Equal(t, LockInfo{Name: "other"}, h.st.Lock("other"))
	}
}

func TestDedupRelease(t *testing.T) {
	// A retried release returns its first reply and does not free a later
	// grant of the same lock.
	h := newHarness(t)
	a := h.open(1)
	g, _ := h.one(acqCmd(a, 1, "L", false))
	r, _ := h.one(relCmd(a, 2, "L", g.Value))
	require.Equal(t, OK, r.Status)
	g2, _ := h.one(acqCmd(a, 3, "L", false))
	require.Equal(t, Granted, g2.Status)
	r, evs := h.one(relCmd(a, 2, "L", g.Value))
	require.Equal(t, Result{Status: OK}, r)
	require.Empty(t, evs)
	require.Equal(t, LockInfo{Name: "L", Held: true, Token: g2.Value, Session: a, Seq: 3, Holders: []Holder{{Session: a, Seq: 3, Token: g2.Value, Owner: 1}}}, h.st.Lock("L"))
}

func TestStaleBelowFloor(t *testing.T) {
	for _, tc := range []struct {
		name string
		cmds func(a uint64) []Command
	}{
		{"floor from keep-alive", func(a uint64) []Command {
			return []Command{keepAliveCmd(a, 5), acqCmd(a, 3, "x", true)}
		}},
		{"floor from an earlier request", func(a uint64) []Command {
			return []Command{{Kind: KindAcquire, Session: a, Seq: 5, Floor: 5, Name: "y"}, acqCmd(a, 4, "x", true)}
		}},
		{"floor in the same command", func(a uint64) []Command {
			return []Command{{Kind: KindAcquire, Session: a, Seq: 3, Floor: 5, Name: "x"}}
		}},
		{"floor from a cancel", func(a uint64) []Command {
			return []Command{{Kind: KindCancel, Session: a, Target: 9, Floor: 5}, acqCmd(a, 3, "x", true)}
		}},
		{"stale release", func(a uint64) []Command {
			return []Command{keepAliveCmd(a, 5), relCmd(a, 4, "x", 1)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a := h.open(1)
			cmds := tc.cmds(a)
			rs, _ := h.apply(cmds...)
			require.Equal(t, Result{Status: Stale}, rs[len(rs)-1])
			require.Equal(t, LockInfo{Name: "x"}, h.st.Lock("x"), "a stale request changes nothing")
			require.NotContains(t, h.st.sessions[a].replies, cmds[len(cmds)-1].Seq)
			// A lower floor later does not lower the session's floor.
			r, _ := h.one(Command{Kind: KindAcquire, Session: a, Seq: 3, Floor: 1, Name: "x"})
			require.Equal(t, Stale, r.Status)
		})
	}
}

func TestFloorForgetsReplies(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	r1, _ := h.one(acqCmd(a, 1, "x", false))
	r2, _ := h.one(acqCmd(a, 2, "y", false))
	h.one(relCmd(a, 3, "nope", 1))
	replies := func() []uint64 { return slices.Sorted(maps.Keys(h.st.sessions[a].replies)) }
	require.Equal(t, []uint64{1, 2, 3}, replies())

	h.one(keepAliveCmd(a, 2))
	require.Equal(t, []uint64{2, 3}, replies())
	r, _ := h.one(acqCmd(a, 1, "x", false))
	require.Equal(t, Stale, r.Status, "the reply to 1 is forgotten")
	r, _ = h.one(acqCmd(a, 2, "y", false))
	require.Equal(t, r2, r, "the reply to 2 is kept")

	h.one(Command{Kind: KindRelease, Session: a, Seq: 4, Floor: 4, Name: "x", Token: r1.Value})
	require.Equal(t, []uint64{4}, replies())
	// The grants themselves are not forgotten.
	require.True(t, h.st.Lock("y").Held)
	require.False(t, h.st.Lock("x").Held)
}

// TestRepliesNeverEvicted: a session's replies at or above its floor are
// kept however many there are; a request beyond MaxPendingPerSession is
// refused, changes nothing and is not remembered, and once the client moves
// its floor on the session takes requests again.
func TestRepliesNeverEvicted(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	cmds := make([]Command, MaxPendingPerSession)
	for i := range cmds {
		cmds[i] = Command{Kind: KindRelease, Session: a, Seq: uint64(i + 1), Floor: 1, Name: "nope", Token: 1}
	}
	h.apply(cmds...)
	next := uint64(MaxPendingPerSession + 1)
	r, evs := h.one(Command{Kind: KindAcquire, Session: a, Seq: next, Floor: 1, Name: "x"})
	require.Equal(t, limitExceeded(LimitPendingRequests), r)
	require.Empty(t, evs)
	require.False(t, h.st.Lock("x").Held, "the refused request changed nothing")
	keys := slices.Sorted(maps.Keys(h.st.sessions[a].replies))
	require.Len(t, keys, MaxPendingPerSession)
	require.Equal(t, uint64(1), keys[0], "no reply was evicted to make room")

	r, _ = h.one(Command{Kind: KindAcquire, Session: a, Seq: next, Floor: next, Name: "x"})
	require.Equal(t, Granted, r.Status, "with the floor moved on, the same request applies")
}

// TestRepliesAreEvictedUnderVersion1 keeps the rule a version-1 log was
// applied by: beyond maxRepliesV1 the oldest reply is forgotten.
func TestRepliesAreEvictedUnderVersion1(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	n := maxRepliesV1 + 10
	cmds := make([]Command, n)
	for i := range cmds {
		cmds[i] = relCmd(a, uint64(i+1), "nope", 1)
		cmds[i].v1 = true
	}
	h.apply(cmds...)
	keys := slices.Sorted(maps.Keys(h.st.sessions[a].replies))
	require.Len(t, keys, maxRepliesV1)
	require.Equal(t, uint64(11), keys[0], "the oldest replies are forgotten first")
	require.Equal(t, uint64(n), keys[len(keys)-1])
}

// TestRetriedProclaimAppliesOnce is the reply-cache case of the hardening
// issue: a Proclaim whose reply the client did not get stays below the
// other requests it makes meanwhile; after MaxPendingPerSession of them
// its retry must still find the first reply and not set the value back.
func TestRetriedProclaimAppliesOnce(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	g, _ := h.one(campaignCmd(a, 1, "E", "v0"))
	proclaim := func(seq uint64, value string) Command {
		return Command{Kind: KindProclaim, Session: a, Seq: seq, Floor: 2, Name: "E", Token: g.Value, Value: value}
	}
	r, _ := h.one(proclaim(2, "v1")) // its reply is lost: the floor stays at 2
	require.Equal(t, OK, r.Status)
	r, _ = h.one(proclaim(3, "v2"))
	require.Equal(t, OK, r.Status)
	cmds := make([]Command, MaxPendingPerSession)
	for i := range cmds {
		cmds[i] = Command{Kind: KindRelease, Session: a, Seq: uint64(i + 4), Floor: 2, Name: "none", Token: 1}
	}
	h.apply(cmds...)
	r, evs := h.one(proclaim(2, "v1")) // the retry
	require.Equal(t, OK, r.Status)
	require.Empty(t, evs, "the retry changed nothing")
	require.Equal(t, "v2", h.st.Election("E").Value, "the value does not go back")
}

// TestDelayedAcquireAfterItsCancel: an Acquire that arrives after its own
// Cancel (the client gave up on it, the cancel overtook it) finds the
// Cancelled reply and queues no ghost waiter, however many requests came
// in between.
func TestDelayedAcquireAfterItsCancel(t *testing.T) {
	h, a, b := twoSessions(t)
	h.one(acqCmd(a, 1, "L", false))
	r, _ := h.one(Command{Kind: KindCancel, Session: b, Target: 1, Floor: 1, Name: "L"})
	require.Equal(t, NotApplied, r.Status, "nothing to withdraw yet")
	cmds := make([]Command, MaxPendingPerSession-1)
	for i := range cmds {
		cmds[i] = Command{Kind: KindRelease, Session: b, Seq: uint64(i + 2), Floor: 1, Name: "none", Token: 1}
	}
	h.apply(cmds...)
	r, _ = h.one(Command{Kind: KindAcquire, Session: b, Seq: 1, Floor: 1, Name: "L", Wait: true})
	require.Equal(t, Result{Status: Cancelled}, r)
	require.Equal(t, 0, h.st.Lock("L").Waiters, "no ghost waiter")
}

// TestRetryAfterReplyEvictionKeepsOneWaiter: under version 1 rules (an old
// log replayed), a session whose floor stays at a queued request (its client still waits for it) makes maxRepliesV1 further
// requests, so the queued request's reply is evicted; then the queued
// request is retried. The retry must not queue the same request a second
// time. (This fails until apply.go stops re-applying a request that is still
// queued or holding: the duplicate waiter desynchronises the session's
// waits from the queue, Save writes a snapshot Restore rejects, and once the
// session ends the lock is granted to the dead session for good.)
func TestRetryAfterReplyEvictionKeepsOneWaiter(t *testing.T) {
	st := New()
	rs, _ := st.Apply(1, []Command{openCmd(1), openCmd(2)})
	a, b := rs[0].Value, rs[1].Value
	rs, _ = st.Apply(2, []Command{acqCmd(a, 1, "L", false), acqCmd(b, 1, "L", true)})
	require.Equal(t, []Result{{Status: Granted, Value: 2 << TokenShift}, {Status: Queued}}, rs)
	cmds := make([]Command, maxRepliesV1)
	for i := range cmds {
		cmds[i] = relCmd(b, uint64(i+2), "other", 1) // floor stays at 1
		cmds[i].v1 = true                            // only version 1 evicts
	}
	st.Apply(3, cmds)

	retry := acqCmd(b, 1, "L", true)
	retry.v1 = true
	rs, _ = st.Apply(4, []Command{retry})
	require.Equal(t, Result{Status: Queued}, rs[0])
	require.Equal(t, 1, st.Lock("L").Waiters, "request 1 of b is queued once")
	require.NoError(t, checkInvariants(st, true))
	_, err := DecodeSnapshot(saveBytes(t, st))
	require.NoError(t, err, "Save must write a snapshot Restore accepts")

	_, evs := st.Apply(5, []Command{closeCmd(b), relCmd(a, 2, "L", 2<<TokenShift)})
	require.Equal(t, []Event{{Kind: EventUnqueued, Session: b, Seq: 1, Name: "L"}, endedEv(ReasonClosed, b),
		freedEv(ReasonReleased, a, 1, "L", 2<<TokenShift)}, evs)
	require.Equal(t, LockInfo{Name: "L"}, st.Lock("L"), "no grant to the ended session")
}

// The queue events report every change of a lock's queue, in order: a
// waiter joining, leaving (cancelled) and leaving for its grant.
func TestQueueEvents(t *testing.T) {
	st := New()
	rs, _ := st.Apply(1, []Command{openCmd(1), openCmd(2), openCmd(3)})
	a, b, c := rs[0].Value, rs[1].Value, rs[2].Value
	st.Apply(2, []Command{acqCmd(a, 1, "L", false)})
	_, evs := st.Apply(3, []Command{acqCmd(b, 1, "L", true), acqCmd(c, 1, "L", true)})
	require.Equal(t, []Event{{Kind: EventQueued, Session: b, Seq: 1, Name: "L"}, {Kind: EventQueued, Session: c, Seq: 1, Name: "L"}}, evs)
	_, evs = st.Apply(4, []Command{cancelCmd(b, 1)})
	require.Equal(t, []Event{{Kind: EventUnqueued, Session: b, Seq: 1, Name: "L"}}, evs)
	_, evs = st.Apply(5, []Command{relCmd(a, 2, "L", 2<<TokenShift)})
	require.Equal(t, []Event{freedEv(ReasonReleased, a, 1, "L", 2<<TokenShift),
		{Kind: EventUnqueued, Session: c, Seq: 1, Name: "L"}, grantedEv(c, 1, "L", 5<<TokenShift)}, evs)
}

func TestCancelQueuedWaiter(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.open(1), h.open(2), h.open(3)
	g, _ := h.one(acqCmd(a, 1, "L", false))
	h.apply(acqCmd(b, 1, "L", true), acqCmd(c, 1, "L", true))

	r, evs := h.one(cancelCmd(b, 1))
	require.Equal(t, Result{Status: Cancelled}, r)
	require.Empty(t, evs, "withdrawing a waiter reports nothing")
	require.False(t, h.st.Queued(b, 1))
	require.Equal(t, 1, h.st.Lock("L").Waiters)

	_, evs = h.one(relCmd(a, 2, "L", g.Value))
	require.Equal(t, []Event{
		freedEv(ReasonReleased, a, 1, "L", g.Value),
		grantedEv(c, 1, "L", h.idx<<TokenShift),
	}, evs, "the cancelled waiter is skipped")
}

func TestCancelGrantedRequestReleases(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.open(1), h.open(2), h.open(3)
	g, _ := h.one(acqCmd(a, 1, "L", false))
	h.apply(acqCmd(b, 7, "L", true), acqCmd(c, 1, "L", true))
	h.one(relCmd(a, 2, "L", g.Value))
	tb := h.idx << TokenShift
	require.True(t, h.st.Holds(b, "L", tb))

	// The grant raced ahead of the cancel: the cancel releases it and the
	// next head is granted in the same entry.
	r, evs := h.one(cancelCmd(b, 7))
	require.Equal(t, Result{Status: Cancelled}, r)
	tc := h.idx << TokenShift
	require.Equal(t, []Event{
		freedEv(ReasonCancelled, b, 7, "L", tb),
		grantedEv(c, 1, "L", tc),
	}, evs)
	require.Equal(t, LockInfo{Name: "L", Held: true, Token: tc, Session: c, Seq: 1, Holders: []Holder{{Session: c, Seq: 1, Token: tc, Owner: 1}}}, h.st.Lock("L"))

	// Cancelling the last holder forgets the lock.
	_, evs = h.one(cancelCmd(c, 1))
	require.Equal(t, []Event{freedEv(ReasonCancelled, c, 1, "L", tc)}, evs)
	_, nl, _ := h.st.Counts()
	require.Zero(t, nl)
}

func TestCancelNothing(t *testing.T) {
	h, a, b := twoSessions(t)
	h.one(acqCmd(a, 1, "L", false))
	locked, _ := h.one(acqCmd(b, 1, "L", false))
	require.Equal(t, Locked, locked.Status)
	for _, cmd := range []Command{
		cancelCmd(b, 99), // never sent
		cancelCmd(b, 1),  // failed try-acquire
		cancelCmd(b, 99), // again
	} {
		before := viewOf(h.st)
		r, evs := h.one(cmd)
		require.Equal(t, Result{Status: NotApplied}, r)
		require.Empty(t, evs)
		after := viewOf(h.st)
		before.Index = after.Index
		require.Equal(t, before, after)
	}
	r, _ := h.one(cancelCmd(12345, 1))
	require.Equal(t, UnknownSession, r.Status)
}

func TestCancelBelowFloorStillWithdraws(t *testing.T) {
	h, a, b := twoSessions(t)
	h.one(acqCmd(a, 1, "L", false))
	h.one(acqCmd(b, 1, "L", true))
	h.one(keepAliveCmd(b, 10))
	r, _ := h.one(cancelCmd(b, 1))
	require.Equal(t, Cancelled, r.Status)
	require.False(t, h.st.Queued(b, 1))
	require.Empty(t, h.st.sessions[b].replies, "no reply is kept below the floor")
}

// TestCancelGuardsAgainstGhostGrants covers a delayed duplicate of an acquire
// applied after its cancel: it must not queue or grant anything.
func TestCancelGuardsAgainstGhostGrants(t *testing.T) {
	for _, tc := range []struct {
		name   string
		aHolds bool // session a holds L throughout
		sent   bool // the acquire was applied before the cancel
		first  Status
		cancel Status
	}{
		{"cancel before the acquire, lock held", true, false, 0, NotApplied},
		{"cancel before the acquire, lock free", false, false, 0, NotApplied},
		{"cancel of a queued request", true, true, Queued, Cancelled},
		{"cancel of a granted request", false, true, Granted, Cancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, a, b := twoSessions(t)
			if tc.aHolds {
				r, _ := h.one(acqCmd(a, 1, "L", false))
				require.Equal(t, Granted, r.Status)
			}
			if tc.sent {
				r, _ := h.one(acqCmd(b, 5, "L", true))
				require.Equal(t, tc.first, r.Status)
			}
			r, _ := h.one(cancelCmd(b, 5))
			require.Equal(t, Result{Status: tc.cancel}, r)

			before := viewOf(h.st)
			r, evs := h.one(acqCmd(b, 5, "L", true))
			require.Equal(t, Result{Status: Cancelled}, r, "the duplicate finds the cancel's reply")
			require.Empty(t, evs)
			after := viewOf(h.st)
			before.Index = after.Index
			require.Equal(t, before, after, "the duplicate changes nothing")
			require.False(t, h.st.Queued(b, 5))
			_, _, ok := h.st.Grant(b, 5)
			require.False(t, ok)
			require.Equal(t, tc.aHolds, h.st.Lock("L").Held)
		})
	}

	t.Run("cancel and duplicate in one entry", func(t *testing.T) {
		h := newHarness(t)
		b := h.open(2)
		rs, evs := h.apply(cancelCmd(b, 5), acqCmd(b, 5, "L", true))
		require.Equal(t, []Result{{Status: NotApplied}, {Status: Cancelled}}, rs)
		require.Empty(t, evs)
		require.False(t, h.st.Lock("L").Held)
	})
}

func TestOpenSession(t *testing.T) {
	h := newHarness(t)
	r, evs := h.one(Command{Kind: KindOpenSession, Nonce: 42, TTL: 5e9, Owner: 3})
	require.Equal(t, Result{Status: OK, Value: h.idx << TokenShift}, r, "session IDs derive from the index")
	id := r.Value
	require.Equal(t, []Event{{Kind: EventTouched, Session: id, Index: h.idx, TTL: 5e9}}, evs)
	info, ok := h.st.Session(id)
	require.True(t, ok)
	require.Equal(t, SessionInfo{ID: id, TTL: 5e9, Owner: 3, KeepAlive: h.idx}, info)

	// A retried open returns the same session and changes nothing.
	r, evs = h.one(Command{Kind: KindOpenSession, Nonce: 42, TTL: 7e9, Owner: 9})
	require.Equal(t, Result{Status: OK, Value: id}, r)
	require.Empty(t, evs)
	info2, _ := h.st.Session(id)
	require.Equal(t, info, info2)
	ns, _, _ := h.st.Counts()
	require.Equal(t, 1, ns)

	// Several opens in one entry, one of them a retry.
	idx := h.idx + 1
	rs, _ := h.apply(openCmd(7), openCmd(42), openCmd(8), openCmd(7))
	require.Equal(t, []Result{
		{Status: OK, Value: idx << TokenShift},
		{Status: OK, Value: id},
		{Status: OK, Value: idx<<TokenShift + 1},
		{Status: OK, Value: idx << TokenShift},
	}, rs)

	// After the session ends its nonce opens a new one.
	h.one(closeCmd(id))
	r, _ = h.one(Command{Kind: KindOpenSession, Nonce: 42, TTL: 5e9, Owner: 3})
	require.Equal(t, OK, r.Status)
	require.Greater(t, r.Value, rs[2].Value)
	var ids []uint64
	for _, s := range h.st.Sessions() {
		ids = append(ids, s.ID)
	}
	require.Equal(t, []uint64{rs[0].Value, rs[2].Value, r.Value}, ids, "ordered by ID")
}

func TestKeepAlive(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	h.applyAt(50, keepAliveCmd(a, 0))
	info, _ := h.st.Session(a)
	require.Equal(t, uint64(50), info.KeepAlive)
	rs, evs := h.applyAt(60, keepAliveCmd(a, 0))
	require.Equal(t, []Result{{Status: OK}}, rs)
	require.Equal(t, []Event{{Kind: EventTouched, Session: a, Index: 60, TTL: 1e9}}, evs)
	info, _ = h.st.Session(a)
	require.Equal(t, uint64(60), info.KeepAlive)
}

func TestExpire(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target func(keepAlive uint64) uint64
		want   Status
	}{
		{"older keep-alive", func(k uint64) uint64 { return k - 1 }, NotApplied},
		{"much older keep-alive", func(k uint64) uint64 { return 0 }, NotApplied},
		{"latest keep-alive", func(k uint64) uint64 { return k }, OK},
		{"newer than the latest", func(k uint64) uint64 { return k + 5 }, OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a := h.open(1)
			h.applyAt(20, keepAliveCmd(a, 0))
			h.applyAt(30, keepAliveCmd(a, 0))
			r, evs := h.one(expireCmd(a, tc.target(30)))
			require.Equal(t, Result{Status: tc.want}, r)
			_, alive := h.st.Session(a)
			if tc.want == NotApplied {
				require.Empty(t, evs)
				require.True(t, alive)
			} else {
				require.Equal(t, []Event{endedEv(ReasonExpired, a)}, evs)
				require.False(t, alive)
			}
		})
	}
}

func TestEndSessionFreesEverything(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(h *harness, v uint64) Command
		why  Reason
	}{
		{"close", func(h *harness, v uint64) Command { return closeCmd(v) }, ReasonClosed},
		{"expire", func(h *harness, v uint64) Command {
			info, _ := h.st.Session(v)
			return expireCmd(v, info.KeepAlive)
		}, ReasonExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			v, p, q := h.open(1), h.open(2), h.open(3)
			px, _ := h.one(acqCmd(p, 3, "x", false))
			// v takes c, a, b in that order: name order differs from token order.
			rs, _ := h.apply(acqCmd(v, 1, "c", false), acqCmd(v, 2, "a", false), acqCmd(v, 3, "b", false))
			tc1, ta, tb := rs[0].Value, rs[1].Value, rs[2].Value
			h.apply(acqCmd(p, 1, "a", true), acqCmd(p, 2, "c", true), acqCmd(q, 1, "a", true))
			h.apply(acqCmd(v, 4, "x", true), acqCmd(v, 5, "x", true), acqCmd(v, 6, "c", true))
			require.Equal(t, 2, h.st.Lock("x").Waiters)
			require.Equal(t, 2, h.st.Lock("a").Waiters)
			require.Equal(t, 2, h.st.Lock("c").Waiters)

			r, evs := h.one(tc.end(h, v))
			require.Equal(t, Result{Status: OK}, r)
			base := h.idx << TokenShift
			require.Equal(t, []Event{
				freedEv(tc.why, v, 2, "a", ta),
				grantedEv(p, 1, "a", base),
				freedEv(tc.why, v, 3, "b", tb),
				freedEv(tc.why, v, 1, "c", tc1),
				grantedEv(p, 2, "c", base+1),
				endedEv(tc.why, v),
			}, evs)

			_, alive := h.st.Session(v)
			require.False(t, alive)
			require.Equal(t, LockInfo{Name: "x", Held: true, Token: px.Value, Session: p, Seq: 3, Holders: []Holder{{Session: p, Seq: 3, Token: px.Value, Owner: 1}}}, h.st.Lock("x"))
			require.Equal(t, LockInfo{Name: "a", Held: true, Token: base, Session: p, Seq: 1, Waiters: 1, Holders: []Holder{{Session: p, Seq: 1, Token: base, Owner: 1}}}, h.st.Lock("a"))
			require.Equal(t, LockInfo{Name: "b"}, h.st.Lock("b"))
			require.Equal(t, LockInfo{Name: "c", Held: true, Token: base + 1, Session: p, Seq: 2, Holders: []Holder{{Session: p, Seq: 2, Token: base + 1, Owner: 1}}}, h.st.Lock("c"))
			ns, nl, nw := h.st.Counts()
			require.Equal(t, [3]int{2, 3, 1}, [3]int{ns, nl, nw})

			for _, cmd := range []Command{keepAliveCmd(v, 0), closeCmd(v), expireCmd(v, h.idx), acqCmd(v, 9, "z", true), relCmd(v, 9, "a", ta), cancelCmd(v, 1)} {
				r, evs := h.one(cmd)
				require.Equal(t, Result{Status: UnknownSession}, r, cmd.Kind.String())
				require.Empty(t, evs)
			}
		})
	}
}

func TestUnknownSession(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	for _, k := range []Kind{KindKeepAlive, KindCloseSession, KindAcquire, KindRelease, KindCancel, KindExpire} {
		for _, s := range []uint64{0, a + 1, ^uint64(0)} {
			r, evs := h.one(Command{Kind: k, Session: s, Seq: 1, Name: "x", Target: 1, Token: 1})
			require.Equal(t, Result{Status: UnknownSession}, r, "%v session %d", k, s)
			require.Empty(t, evs)
		}
	}
	ns, nl, _ := h.st.Counts()
	require.Equal(t, [2]int{1, 0}, [2]int{ns, nl})
}

func TestInvalidCommands(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	for _, tc := range []struct {
		name string
		cmd  Command
	}{
		{"ttl 0", Command{Kind: KindOpenSession, Nonce: 9, TTL: 0}},
		{"nonce 0", Command{Kind: KindOpenSession, Nonce: 0, TTL: 1}},
		{"empty name", acqCmd(a, 1, "", true)},
		{"name too long", acqCmd(a, 2, strings.Repeat("n", MaxNameLen+1), true)},
		{"invalid utf-8", acqCmd(a, 3, "a\xffb", true)},
		{"truncated utf-8", acqCmd(a, 4, "\xe2\x82", true)},
		{"nul", acqCmd(a, 5, "a\x00b", false)},
		{"kind 0", Command{Kind: 0, Session: a}},
		{"kind 8", Command{Kind: maxKind + 1, Session: a}},
		{"kind 255", Command{Kind: 255, Session: a, Seq: 9, Name: "x"}},
		{"kind 0, unknown session", Command{Kind: 0, Session: 77}},
		{"kind 200, unknown session", Command{Kind: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := viewOf(h.st)
			r, evs := h.one(tc.cmd)
			require.Equal(t, Result{Status: Invalid}, r)
			require.Empty(t, evs)
			after := viewOf(h.st)
			before.Index = after.Index
			require.Equal(t, before, after)
		})
	}

	for i, name := range []string{strings.Repeat("n", MaxNameLen), "🔒/räume", " ", "a/b\tc"} {
		r, _ := h.one(acqCmd(a, uint64(100+i), name, false))
		require.Equal(t, Granted, r.Status, "%q", name)
	}
}

func TestSameSessionRequestsExcludeEachOther(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	g, _ := h.one(acqCmd(a, 1, "L", true))
	require.Equal(t, Granted, g.Status)
	r, _ := h.one(acqCmd(a, 2, "L", true))
	require.Equal(t, Queued, r.Status, "a second request of the holder's session waits")
	r, _ = h.one(acqCmd(a, 3, "L", false))
	require.Equal(t, Locked, r.Status)
	info, _ := h.st.Session(a)
	require.Equal(t, [2]int{1, 1}, [2]int{info.Held, info.Waiting})

	_, evs := h.one(relCmd(a, 4, "L", g.Value))
	t2 := h.idx << TokenShift
	require.Equal(t, []Event{freedEv(ReasonReleased, a, 1, "L", g.Value), grantedEv(a, 2, "L", t2)}, evs)
	name, tok, ok := h.st.Grant(a, 2)
	require.True(t, ok)
	require.Equal(t, "L", name)
	require.Equal(t, t2, tok)
	_, _, ok = h.st.Grant(a, 1)
	require.False(t, ok)
}

func TestApplyEmptyEntry(t *testing.T) {
	h := buildRich(t)
	before := saveBytes(t, h.st)
	rs, evs := h.st.Apply(h.idx+1, nil)
	require.Empty(t, rs)
	require.Empty(t, evs)
	require.Equal(t, h.idx+1, h.st.Index())
	old, err := DecodeSnapshot(before)
	require.NoError(t, err)
	old.index = h.idx + 1
	require.Equal(t, saveBytes(t, old), saveBytes(t, h.st))
}

func TestStringers(t *testing.T) {
	for k, want := range map[Kind]string{0: "unknown", KindOpenSession: "open-session", KindKeepAlive: "keep-alive",
		KindCloseSession: "close-session", KindAcquire: "acquire", KindRelease: "release", KindCancel: "cancel",
		KindExpire: "expire", KindCampaign: "campaign", KindResign: "resign", KindProclaim: "proclaim",
		KindLeaderStart: "leader-start", KindRevoke: "revoke", KindEndSession: "end-session", KindResume: "resume", KindAcquireShared: "acquire-shared",
		KindUndelay: "undelay", KindExpireGrant: "expire-grant", KindKeepAliveBatch: "keep-alive-batch", KindGate: "gate", KindSeal: "seal",
		maxKind + 1: "unknown", 255: "unknown"} {
		require.Equal(t, want, k.String())
	}
	for s, want := range map[Status]string{0: "unknown", OK: "ok", Granted: "granted", Queued: "queued",
		Locked: "locked", NotHeld: "not-held", UnknownSession: "unknown-session", Cancelled: "cancelled",
		Stale: "stale", Invalid: "invalid", NotApplied: "not-applied", LimitExceeded: "limit-exceeded",
		Conflict: "conflict", Refused: "refused", Dropped: "dropped", 15: "unknown", 255: "unknown"} {
		require.Equal(t, want, s.String())
	}
	for r, want := range map[Reason]string{0: "unknown", ReasonReleased: "released", ReasonCancelled: "cancelled",
		ReasonExpired: "expired", ReasonClosed: "closed", ReasonRevoked: "revoked", ReasonMaxHold: "max-hold", 7: "unknown"} {
		require.Equal(t, want, r.String())
	}
}

func TestValidName(t *testing.T) {
	for name, want := range map[string]bool{
		"":                                      false,
		"a":                                     true,
		strings.Repeat("x", MaxNameLen):         true,
		strings.Repeat("x", MaxNameLen+1):       false,
		strings.Repeat("é", MaxNameLen/2):       true,
		"x" + strings.Repeat("é", MaxNameLen/2): false,
		"\xff":                                  false,
		"ok\x00":                                false,
		"\x00":                                  false,
		"tab\tand\nnewline":                     true,
	} {
		require.Equal(t, want, ValidName(name), "%q", name)
	}
}

// A Cancel that names its lock (as clients send it) finds a granted target
// by that name; a name that is not the target's lock frees nothing.
func TestCancelByNameFindsTheGrant(t *testing.T) {
	h, a, b := twoSessions(t)
	g, _ := h.one(acqCmd(a, 1, "L", false))
	h.one(acqCmd(a, 2, "M", false))
	h.one(acqCmd(b, 1, "L", true))

	r, evs := h.one(Command{Kind: KindCancel, Session: a, Target: 1, Name: "M"})
	require.Equal(t, Result{Status: NotApplied}, r, "request 1 does not hold M")
	require.Empty(t, evs)

	r, evs = h.one(Command{Kind: KindCancel, Session: a, Target: 1, Name: "L"})
	require.Equal(t, Result{Status: Cancelled}, r)
	require.Equal(t, []Event{
		freedEv(ReasonCancelled, a, 1, "L", g.Value),
		grantedEv(b, 1, "L", h.idx<<TokenShift),
	}, evs)
	require.True(t, h.st.Lock("M").Held, "the session's other lock stays")
}

// A keep-alive batch renews, at its entry's index, the sessions its replica
// owns, and refuses the others: unknown, another replica's, or renewed by
// an incarnation from before the session's resume.
func TestKeepAliveBatch(t *testing.T) {
	h := newHarness(t)
	a, b, c := h.open(1), h.open(2), h.open(3)
	// c moves to replica 3; replica 1 renewing it is its old holder.
	r, _ := h.one(resumeCmd(c, 3, 3))
	require.Equal(t, OK, r.Status)
	base := r.Value
	d := h.open(4)
	gone := d + 1<<TokenShift
	r, _ = h.one(acqCmd(a, 1, "L", false))
	require.Equal(t, Granted, r.Status)

	batch := Command{Kind: KindKeepAliveBatch, Owner: 1, Renew: []Renewal{
		{Session: a, Floor: 2}, {Session: b, Floor: 1}, {Session: c, Floor: base}, {Session: d, Floor: 1}, {Session: gone, Floor: 1}}}
	rs, evs := h.applyAt(90, batch)
	require.Equal(t, []Result{{Status: Refused, Value: 2, Refused: []uint64{c, gone}}}, rs)
	require.Equal(t, []Event{{Kind: EventRenewed, Owner: 1, Index: 90, Sessions: []uint64{a, b, d}}}, evs)
	for _, s := range []uint64{a, b, d} {
		info, _ := h.st.Session(s)
		require.Equal(t, uint64(90), info.KeepAlive, "session %d renewed", s)
	}
	info, _ := h.st.Session(c)
	require.Less(t, info.KeepAlive, uint64(90), "another replica's session is not renewed")
	// The floor moved as a keep-alive's would: request 1's reply is gone,
	// so its retry is stale.
	r, _ = h.one(acqCmd(a, 1, "L", false))
	require.Equal(t, Stale, r.Status)

	// c's own replica renews it, but not with a floor from before its resume.
	rs, _ = h.apply(Command{Kind: KindKeepAliveBatch, Owner: 3, Renew: []Renewal{{Session: c, Floor: base - 1}}})
	require.Equal(t, []Result{{Status: Refused, Value: 1, Refused: []uint64{c}}}, rs)
	rs, evs = h.applyAt(95, Command{Kind: KindKeepAliveBatch, Owner: 3, Renew: []Renewal{{Session: c, Floor: base}}})
	require.Equal(t, []Result{{Status: OK}}, rs)
	require.Equal(t, []Event{{Kind: EventRenewed, Owner: 3, Index: 95, Sessions: []uint64{c}}}, evs)

	// An expiry that names the keep-alive before the batch is overruled.
	r, _ = h.one(Command{Kind: KindExpire, Session: a, Target: 89, Mark: h.st.LeaderMark()})
	require.Equal(t, NotApplied, r.Status)
	r, _ = h.one(Command{Kind: KindExpire, Session: a, Target: 90, Mark: h.st.LeaderMark()})
	require.Equal(t, OK, r.Status)

	for _, bad := range []Command{
		{Kind: KindKeepAliveBatch, Owner: 0, Renew: []Renewal{{Session: b, Floor: 1}}},
		{Kind: KindKeepAliveBatch, Owner: 1},
		{Kind: KindKeepAliveBatch, Owner: 1, Renew: make([]Renewal, MaxRenewals+1)},
	} {
		rs, evs := h.apply(bad)
		require.Equal(t, []Result{{Status: Invalid}}, rs)
		require.Empty(t, evs)
	}
}
