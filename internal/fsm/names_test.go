package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tests of issue 27's state: who holds a lock (the session's name), since
// when (the time of the entry that made the grant), and who waits where.

func namedOpen(nonce uint64, name string, at uint64) Command {
	c := openCmd(nonce)
	c.Name, c.At = name, at
	return c
}

func TestSessionNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"", true}, // a session opened without one, as before version 6
		{"reindex@worker-3", true},
		{"host-ü:4711", true},
		{strings.Repeat("n", MaxSessionNameLen), true},
		{strings.Repeat("é", MaxSessionNameLen/2), true}, // 256 bytes
		{strings.Repeat("n", MaxSessionNameLen+1), false},
		{strings.Repeat("é", MaxSessionNameLen/2) + "x", false},
		{"bad\xff", false},
		{"nul\x00", false},
	} {
		t.Run(fmt.Sprintf("%.20q", tc.name), func(t *testing.T) {
			require.Equal(t, tc.ok, ValidSessionName(tc.name))
			err := CheckSessionName(tc.name)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, ErrInvalidSessionName)
			}

			h := newHarness(t)
			r, _ := h.one(namedOpen(7, tc.name, 0))
			if !tc.ok {
				require.Equal(t, Result{Status: Invalid, Value: InvalidSessionName}, r)
				require.Empty(t, h.st.Sessions(), "nothing changed")
				return
			}
			require.Equal(t, OK, r.Status)
			info, ok := h.st.Session(r.Value)
			require.True(t, ok)
			require.Equal(t, tc.name, info.Name)
			require.Equal(t, tc.name, h.st.Sessions()[0].Name)
			page, _ := h.st.SessionsPage(0, 10)
			require.Equal(t, tc.name, page[0].Name)

			// The name survives the codec (a name longer than the limit
			// does not fit it: see TestDecodeBatchErrors) and a snapshot.
			cmds, err := DecodeBatch(AppendBatch(nil, []Command{namedOpen(7, tc.name, 0)}), nil)
			require.NoError(t, err)
			require.Equal(t, tc.name, cmds[0].Name)
			got := roundTrip(t, h.st)
			info, _ = got.Session(r.Value)
			require.Equal(t, tc.name, info.Name)
		})
	}

	// A retried open gets the first attempt's session, name and all, whatever
	// name the retry carries.
	h := newHarness(t)
	r1, _ := h.one(namedOpen(9, "first", 0))
	r2, _ := h.one(namedOpen(9, "second", 0))
	require.Equal(t, r1, r2)
	info, _ := h.st.Session(r1.Value)
	require.Equal(t, "first", info.Name)
	r3, _ := h.one(namedOpen(9, "bad\xff", 0))
	require.Equal(t, r1, r3, "a retry is answered before its name is judged")
}

// Every view of a holder, waiter, candidate or leader names its session.
func TestViewsShowNames(t *testing.T) {
	h := newHarness(t)
	r, _ := h.one(namedOpen(2, "reindex@worker-3", 0))
	b := r.Value
	r, _ = h.one(namedOpen(3, "backup@worker-7", 0))
	c := r.Value

	h.one(acqCmd(b, 1, "L", false))
	h.one(acqCmd(c, 1, "L", true))
	l := h.st.Lock("L")
	require.Equal(t, "reindex@worker-3", l.Holders[0].Name)
	require.Equal(t, "reindex@worker-3", l.SessionName)
	require.Equal(t, []Waiter{{Session: c, Seq: 1, Name: "backup@worker-7", Owner: 1, Place: 1}}, h.st.Waiters("L", 10))
	page, _ := h.st.LocksPage("", "", 10, 10)
	require.Equal(t, "reindex@worker-3", page[0].Holders[0].Name)
	require.Equal(t, "backup@worker-7", page[0].Waiting[0].Name)
	require.Equal(t, []uint64{c}, page[0].Queue)

	h.one(campaignCmd(b, 2, "E", "vb"))
	h.one(campaignCmd(c, 2, "E", "vc"))
	e := h.st.Election("E")
	require.Equal(t, "reindex@worker-3", e.SessionName)
	require.Equal(t, []Candidate{{Session: c, Seq: 2, Owner: 1, Value: "vc", Name: "backup@worker-7", Place: 1}},
		h.st.Candidates("E", 10))
	leading, ok := h.st.Leading(b, 2)
	require.True(t, ok)
	require.Equal(t, "reindex@worker-3", leading.SessionName)
}

// A grant records the time of the command whose apply made it: the
// acquire itself, or whatever passed the lock on; a queued request the
// time of its own command. Without a time (an old entry), 0.
func TestGrantTimes(t *testing.T) {
	const t0 = 1_780_000_000_000_000_000
	at := func(c Command, ns uint64) Command { c.At = ns; return c }
	open := func(h *harness, nonce uint64) uint64 {
		r, _ := h.one(namedOpen(nonce, fmt.Sprint("s", nonce), t0))
		return r.Value
	}
	grantedAt := func(h *harness, name string) []uint64 {
		var out []uint64
		for _, x := range h.st.Lock(name).Holders {
			out = append(out, x.GrantedAt)
		}
		return out
	}
	queuedAt := func(h *harness, name string) []uint64 {
		var out []uint64
		for i, w := range h.st.Waiters(name, 10) {
			require.Equal(t, i+1, w.Place)
			out = append(out, w.QueuedAt)
		}
		return out
	}

	for _, tc := range []struct {
		name string
		// pass runs after A holds L (acquired at t0+1) and B waits for it
		// (queued at t0+2): it passes L on to B, or not, at t0+3.
		pass    func(h *harness, a, b uint64)
		granted []uint64 // L's holders' grant times after it
	}{
		{"release", func(h *harness, a, b uint64) {
			h.one(at(relCmd(a, 2, "L", h.st.Lock("L").Token), t0+3))
		}, []uint64{t0 + 3}},
		{"cancel of the grant", func(h *harness, a, b uint64) {
			c := cancelCmd(a, 1)
			c.Name = "L"
			h.one(at(c, t0+3))
		}, []uint64{t0 + 3}},
		{"close", func(h *harness, a, b uint64) { h.one(at(closeCmd(a), t0+3)) }, []uint64{t0 + 3}},
		{"expiry", func(h *harness, a, b uint64) {
			info, _ := h.st.Session(a)
			h.one(at(expireCmd(a, info.KeepAlive), t0+3))
		}, []uint64{t0 + 3}},
		{"revoke", func(h *harness, a, b uint64) { h.one(at(Command{Kind: KindRevoke, Name: "L"}, t0+3)) }, []uint64{t0 + 3}},
		{"revoke without a time", func(h *harness, a, b uint64) { h.one(Command{Kind: KindRevoke, Name: "L"}) }, []uint64{0}},
		{"keep-alive passes nothing on", func(h *harness, a, b uint64) { h.one(at(keepAliveCmd(a, 0), t0+3)) }, []uint64{t0 + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			a, b := open(h, 1), open(h, 2)
			r, _ := h.one(at(acqCmd(a, 1, "L", false), t0+1))
			require.Equal(t, Granted, r.Status)
			r, _ = h.one(at(acqCmd(b, 1, "L", true), t0+2))
			require.Equal(t, Queued, r.Status)
			require.Equal(t, []uint64{t0 + 1}, grantedAt(h, "L"))
			require.Equal(t, []uint64{t0 + 2}, queuedAt(h, "L"))
			tc.pass(h, a, b)
			require.Equal(t, tc.granted, grantedAt(h, "L"))
			require.Equal(t, tc.granted[0], h.st.Lock("L").GrantedAt)
			// The snapshot keeps the times.
			got := harnessFor(t, roundTrip(t, h.st))
			require.Equal(t, tc.granted, grantedAt(got, "L"))
		})
	}

	t.Run("shared holders each have their own", func(t *testing.T) {
		h := newHarness(t)
		a, b, c := open(h, 1), open(h, 2), open(h, 3)
		h.one(at(Command{Kind: KindAcquireShared, Session: a, Seq: 1, Name: "S", Wait: true}, t0+1))
		h.one(at(Command{Kind: KindAcquireShared, Session: b, Seq: 1, Name: "S", Wait: true}, t0+2))
		h.one(at(acqCmd(c, 1, "S", true), t0+3))
		h.one(at(Command{Kind: KindAcquireShared, Session: a, Seq: 2, Name: "S", Wait: true}, t0+4))
		require.Equal(t, []uint64{t0 + 1, t0 + 2}, grantedAt(h, "S"))
		require.Equal(t, []uint64{t0 + 3, t0 + 4}, queuedAt(h, "S"))
		// Both shared holders leave in one entry: C is granted at its time,
		// then A's second request when C leaves.
		tok := h.st.Lock("S").Holders
		h.apply(at(relCmd(a, 3, "S", tok[0].Token), t0+5), at(relCmd(b, 2, "S", tok[1].Token), t0+5))
		require.Equal(t, []uint64{t0 + 5}, grantedAt(h, "S"))
		require.Equal(t, c, h.st.Lock("S").Session)
		h.one(at(closeCmd(c), t0+6))
		require.Equal(t, []uint64{t0 + 6}, grantedAt(h, "S"))
	})

	t.Run("elections", func(t *testing.T) {
		h := newHarness(t)
		a, b := open(h, 1), open(h, 2)
		h.one(at(campaignCmd(a, 1, "E", "va"), t0+1))
		h.one(at(campaignCmd(b, 1, "E", "vb"), t0+2))
		require.Equal(t, uint64(t0+1), h.st.Election("E").ElectedAt)
		require.Equal(t, uint64(t0+2), h.st.Candidates("E", 1)[0].QueuedAt)
		h.one(at(resignCmd(a, 2, "E", h.st.Election("E").Token), t0+3))
		require.Equal(t, uint64(t0+3), h.st.Election("E").ElectedAt)
		require.Equal(t, uint64(t0+3), roundTrip(t, h.st).Election("E").ElectedAt)
	})

	t.Run("through the codec", func(t *testing.T) {
		h := newHarness(t)
		a := open(h, 1)
		cmds, err := DecodeBatch(AppendBatchAt(nil, t0+9, []Command{acqCmd(a, 1, "L", false)}), nil)
		require.NoError(t, err)
		h.apply(cmds...)
		require.Equal(t, []uint64{t0 + 9}, grantedAt(h, "L"))
	})
}

func TestElectionsPage(t *testing.T) {
	h := newHarness(t)
	var ids []uint64
	for i := range 4 {
		r, _ := h.one(namedOpen(uint64(i+1), fmt.Sprint("w", i), 0))
		ids = append(ids, r.Value)
	}
	names := []string{"svc/b", "svc/a", "job/x", "svc/c", "svc/a/1"}
	for i, n := range names {
		c := campaignCmd(ids[i%4], uint64(10+i), n, "v"+n)
		c.At = uint64(100 + i)
		r, _ := h.one(c)
		require.Equal(t, Granted, r.Status)
	}
	h.one(campaignCmd(ids[1], 20, "svc/b", "second"))
	h.one(campaignCmd(ids[2], 21, "svc/b", "third"))
	// An election nobody leads or campaigns in any more is not listed.
	h.one(resignCmd(ids[3], 30, "svc/c", h.st.Election("svc/c").Token))

	namesOf := func(page []ElectionInfo) []string {
		var out []string
		for _, e := range page {
			out = append(out, e.Name)
		}
		return out
	}
	for _, tc := range []struct {
		prefix, after string
		limit         int
		want          []string
		more          bool
	}{
		{"", "", 10, []string{"job/x", "svc/a", "svc/a/1", "svc/b"}, false},
		{"", "", 2, []string{"job/x", "svc/a"}, true},
		{"", "svc/a", 2, []string{"svc/a/1", "svc/b"}, false},
		{"svc/", "", 10, []string{"svc/a", "svc/a/1", "svc/b"}, false},
		{"svc/a", "", 1, []string{"svc/a"}, true},
		{"svc/", "svc/b", 10, nil, false},
		{"nope", "", 10, nil, false},
		{"", "", 0, nil, false},
	} {
		page, more := h.st.ElectionsPage(tc.prefix, tc.after, tc.limit)
		require.Equal(t, tc.want, namesOf(page), "%+v", tc)
		require.Equal(t, tc.more, more, "%+v", tc)
	}
	page, _ := h.st.ElectionsPage("svc/b", "", 1)
	require.Equal(t, ElectionInfo{Name: "svc/b", Led: true, Token: h.st.Election("svc/b").Token, Session: ids[0], Seq: 10,
		Value: "vsvc/b", Candidates: 2, SessionName: "w0", ElectedAt: 100}, page[0])
	require.Equal(t, h.st.Election("svc/b"), page[0])
}

// A grant's maximum hold is kept in its lock's lockMore (the first grant's
// in a field, the others' in a map), so that the time fits a plain lock:
// a grant that takes over a slot or a lock never inherits one.
func TestMaxHoldKeptApart(t *testing.T) {
	h := newHarness(t)
	var ids []uint64
	for i := range 4 {
		ids = append(ids, h.open(uint64(i+1)))
	}
	shared := func(s, seq, maxHold uint64) Command {
		return Command{Kind: KindAcquireShared, Session: s, Seq: seq, Name: "S", Wait: true, MaxHold: maxHold}
	}
	maxHolds := func() []uint64 {
		var out []uint64
		for _, x := range h.st.Lock("S").Holders {
			out = append(out, x.MaxHold)
		}
		return out
	}
	timed := func() map[uint64]uint64 {
		_, grants := h.st.Timers()
		out := map[uint64]uint64{}
		for _, g := range grants {
			out[g.Token] = g.MaxHold
		}
		return out
	}
	h.one(shared(ids[0], 1, 5e9)) // the first slot
	h.one(shared(ids[1], 1, 0))
	h.one(shared(ids[2], 1, 7e9))
	require.Equal(t, []uint64{5e9, 0, 7e9}, maxHolds())
	hs := h.st.Lock("S").Holders
	require.Equal(t, map[uint64]uint64{hs[0].Token: 5e9, hs[2].Token: 7e9}, timed())

	h.one(relCmd(ids[0], 2, "S", hs[0].Token))
	h.one(shared(ids[3], 1, 0)) // takes the first slot over
	require.Equal(t, []uint64{0, 7e9, 0}, maxHolds())
	require.Equal(t, map[uint64]uint64{hs[2].Token: 7e9}, timed())
	require.Equal(t, []uint64{0, 7e9, 0}, func() []uint64 {
		var out []uint64
		for _, x := range roundTrip(t, h.st).Lock("S").Holders {
			out = append(out, x.MaxHold)
		}
		return out
	}())

	r, _ := h.one(Command{Kind: KindExpireGrant, Name: "S", Token: h.st.Lock("S").Holders[2].Token, Mark: h.st.LeaderMark()})
	require.Equal(t, NotHeld, r.Status, "a grant without a maximum hold does not expire by one")
	r, _ = h.one(Command{Kind: KindExpireGrant, Name: "S", Token: hs[2].Token, Mark: h.st.LeaderMark()})
	require.Equal(t, OK, r.Status)
	require.Empty(t, timed())

	// An exclusive lock: its one grant's maximum hold, then none.
	r, _ = h.one(Command{Kind: KindAcquire, Session: ids[0], Seq: 3, Name: "X", MaxHold: 3e9})
	require.Equal(t, uint64(3e9), h.st.Lock("X").Holders[0].MaxHold)
	h.one(relCmd(ids[0], 4, "X", r.Value))
	h.one(acqCmd(ids[0], 5, "X", false))
	require.Zero(t, h.st.Lock("X").Holders[0].MaxHold)
}
