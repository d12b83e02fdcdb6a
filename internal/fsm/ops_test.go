package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// An operator command proposed twice (a retry after a leader change while
// the first proposal committed) applies once: the retry changes nothing
// and gets the first outcome. Without an operation ID (an old entry's) it
// applies each time, as it always did.
func TestOperatorCommandAppliesOnce(t *testing.T) {
	// setup: a holds L, b waits for it.
	setup := func(t *testing.T) (h *harness, a, b uint64) {
		h = newHarness(t)
		a, b = h.open(1), h.open(2)
		h.apply(acqCmd(a, 1, "L", false), acqCmd(b, 1, "L", true))
		return h, a, b
	}

	t.Run("revoke by name", func(t *testing.T) {
		h, a, b := setup(t)
		r, evs := h.one(Command{Kind: KindRevoke, Name: "L", Op: 42})
		require.Equal(t, Result{Status: OK}, r)
		require.Equal(t, freedEv(ReasonRevoked, a, 1, "L", 3<<TokenShift), evs[0])
		tok := h.st.Lock("L").Token
		require.Equal(t, grantedEv(b, 1, "L", tok), evs[1])
		before := saveBytes(t, h.st)

		r, evs = h.one(Command{Kind: KindRevoke, Name: "L", Op: 42})
		require.Equal(t, Result{Status: OK}, r, "the retry gets the first outcome")
		require.Empty(t, evs, "the retry ends nothing: b's grant is not the one it targeted")
		require.Equal(t, b, h.st.Lock("L").Session)
		require.Equal(t, tok, h.st.Lock("L").Token)
		after := saveBytes(t, h.st)
		// The snapshots differ in the index (one byte, after the magic and
		// the version) and so in the checksum.
		body := func(b []byte) []byte { return b[len(snapshotMagic)+2 : len(b)-4] }
		require.Equal(t, body(before), body(after), "nothing changed but the index")

		// Another operation applies.
		r, evs = h.one(Command{Kind: KindRevoke, Name: "L", Op: 43})
		require.Equal(t, OK, r.Status)
		require.Equal(t, freedEv(ReasonRevoked, b, 1, "L", tok), evs[0])
	})
	t.Run("revoke by name without an ID", func(t *testing.T) {
		h, _, b := setup(t)
		h.one(Command{Kind: KindRevoke, Name: "L"})
		tok := h.st.Lock("L").Token
		r, evs := h.one(Command{Kind: KindRevoke, Name: "L"})
		require.Equal(t, OK, r.Status)
		require.Equal(t, freedEv(ReasonRevoked, b, 1, "L", tok), evs[0], "as before version 7: the successor's grant ends")
	})
	t.Run("revoke of a grant", func(t *testing.T) {
		h, _, _ := setup(t)
		tok := h.st.Lock("L").Token
		for range 2 {
			r, _ := h.one(Command{Kind: KindRevoke, Name: "L", Token: tok, Op: 7})
			require.Equal(t, Result{Status: OK}, r, "not NotHeld on the retry")
		}
		r, _ := h.one(Command{Kind: KindRevoke, Name: "L", Token: tok})
		require.Equal(t, NotHeld, r.Status, "without an ID")
	})
	t.Run("a failed revoke fails alike", func(t *testing.T) {
		h, _, b := setup(t)
		r, _ := h.one(Command{Kind: KindRevoke, Name: "M", Op: 8})
		require.Equal(t, NotHeld, r.Status)
		h.one(acqCmd(b, 2, "M", false))
		r, evs := h.one(Command{Kind: KindRevoke, Name: "M", Op: 8})
		require.Equal(t, NotHeld, r.Status, "the retry does not end the grant made since")
		require.Empty(t, evs)
		require.True(t, h.st.Lock("M").Held)
	})
	t.Run("end session", func(t *testing.T) {
		h, a, b := setup(t)
		r, evs := h.one(Command{Kind: KindEndSession, Session: a, Op: 9})
		require.Equal(t, Result{Status: OK}, r)
		require.Contains(t, evs, endedEv(ReasonRevoked, a))
		r, evs = h.one(Command{Kind: KindEndSession, Session: a, Op: 9})
		require.Equal(t, Result{Status: OK}, r, "not UnknownSession on the retry")
		require.Empty(t, evs)
		require.Equal(t, b, h.st.Lock("L").Session)
		r, _ = h.one(Command{Kind: KindEndSession, Session: a})
		require.Equal(t, UnknownSession, r.Status, "without an ID")
	})
	t.Run("revoke leadership", func(t *testing.T) {
		h, a, b := twoSessions(t)
		h.apply(campaignCmd(a, 1, "E", "a"), campaignCmd(b, 1, "E", "b"))
		for range 2 {
			r, _ := h.one(Command{Kind: KindRevoke, Election: true, Name: "E", Op: 10})
			require.Equal(t, OK, r.Status)
			e := h.st.Election("E")
			require.True(t, e.Led)
			require.Equal(t, b, e.Session, "the successor leads still")
		}
	})
	t.Run("one ID, two commands in one entry", func(t *testing.T) {
		h, _, b := setup(t)
		rs, _ := h.apply(Command{Kind: KindRevoke, Name: "L", Op: 11}, Command{Kind: KindRevoke, Name: "L", Op: 11})
		require.Equal(t, []Result{{Status: OK}, {Status: OK}}, rs)
		require.Equal(t, b, h.st.Lock("L").Session)
	})
}

// The state remembers the last OpMemory operations, forgetting the oldest
// first: a retry of a forgotten one is judged afresh. The memory, and the
// order it forgets in, survive a snapshot.
func TestOperationMemoryIsBounded(t *testing.T) {
	h := newHarness(t)
	a := h.open(1)
	h.one(acqCmd(a, 1, "L", false))
	tok := h.st.Lock("L").Token
	r, _ := h.one(Command{Kind: KindRevoke, Name: "L", Token: tok, Op: 1})
	require.Equal(t, OK, r.Status)
	// Fill the memory: operations 2 to OpMemory+1, revokes of a lock
	// nobody holds. Many per entry, to keep the test quick.
	batch := make([]Command, 0, 256)
	for op := uint64(2); op <= OpMemory+1; op++ {
		batch = append(batch, Command{Kind: KindRevoke, Name: "free", Op: op})
		if len(batch) == cap(batch) || op == OpMemory+1 {
			h.apply(batch...)
			batch = batch[:0]
		}
	}
	require.Equal(t, OpMemory, h.st.ops.len())
	_, remembered := h.st.ops.result(1)
	require.False(t, remembered, "the oldest is forgotten")
	_, remembered = h.st.ops.result(2)
	require.True(t, remembered)

	// The snapshot keeps the memory in its order: both states forget
	// alike from here on.
	restored := harnessFor(t, roundTrip(t, h.st))
	for _, hh := range []*harness{h, restored} {
		r, _ := hh.one(Command{Kind: KindRevoke, Name: "L", Token: tok, Op: 1})
		require.Equal(t, NotHeld, r.Status, "operation 1 is judged afresh")
		_, remembered = hh.st.ops.result(2)
		require.False(t, remembered, "operation 1 again pushed out operation 2")
		_, remembered = hh.st.ops.result(3)
		require.True(t, remembered)
	}
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, restored.st))
}

// A state that remembers operations restores from its snapshot to the
// same memory, and answers their retries alike.
func TestOperationMemorySnapshot(t *testing.T) {
	h, a, b := twoSessions(t)
	h.apply(acqCmd(a, 1, "L", false), acqCmd(b, 1, "L", true))
	h.one(Command{Kind: KindRevoke, Name: "L", Op: 5})
	h.one(Command{Kind: KindEndSession, Session: a, Op: 6})
	h.one(Command{Kind: KindRevoke, Name: "none", Op: 4})
	restored := harnessFor(t, roundTrip(t, h.st))
	var got []uint64
	for op := range restored.st.ops.all {
		got = append(got, op)
	}
	require.Equal(t, []uint64{5, 6, 4}, got, "in apply order")
	for _, hh := range []*harness{h, restored} {
		rs, evs := hh.apply(Command{Kind: KindRevoke, Name: "L", Op: 5}, Command{Kind: KindEndSession, Session: a, Op: 6},
			Command{Kind: KindRevoke, Name: "none", Op: 4})
		require.Equal(t, []Result{{Status: OK}, {Status: OK}, {Status: NotHeld}}, rs)
		require.Empty(t, evs)
		require.Equal(t, b, hh.st.Lock("L").Session)
	}
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, restored.st))
}
