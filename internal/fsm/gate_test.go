package fsm

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// raisedState is buildRich's state with its gate raised to version 9: it
// saves as a version-7 snapshot.
func raisedState(tb testing.TB) *State {
	h := buildRich(tb)
	h.apply(Command{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}})
	return h.st
}

// parentState is raisedState raised to version 10 (snapshots 8), with
// parts opened with their parents (Command.Parent) that hold and wait.
func parentState(tb testing.TB) *State {
	h := buildRich(tb)
	h.apply(Command{Kind: KindGate, Gate: Gate{Codec: 10, Snapshot: 8}})
	rs, _ := h.apply(Command{Kind: KindOpenSession, Nonce: 31, TTL: 1e9, Owner: 2, Parent: 5 << TokenShift},
		Command{Kind: KindOpenSession, Nonce: 32, TTL: 1e9, Owner: 3, Parent: math.MaxUint64})
	p, q := rs[0].Value, rs[1].Value
	h.apply(acqCmd(p, 1, "parted", false), acqCmd(q, 1, "parted", true), acqCmd(q, 2, "alpha", true))
	return h.st
}

// parentImage is gatedImage as a version-8 snapshot, gate 10/8, whose
// sessions have parents.
func parentImage() snapImage {
	im := gatedImage()
	im.version, im.gate = 8, [2]uint64{10, 8}
	im.sessions[0].parent, im.sessions[1].parent = 5<<TokenShift, math.MaxUint64
	return im
}

// gatedImage is validImage as a version-7 snapshot, its gate raised.
func gatedImage() snapImage {
	im := validImage()
	im.version, im.gate = 7, [2]uint64{9, 7}
	return im
}

func TestGateRaises(t *testing.T) {
	h := newHarness(t)
	require.Equal(t, Baseline, h.st.Gate(), "a new group writes the baseline")
	require.Equal(t, Gate{Codec: 8, Snapshot: 6}, Baseline)
	require.Equal(t, Gate{Codec: codecVersion, Snapshot: snapshotVersion}, Reads())

	// Nothing the gate already allows changes it; a raise to a gate the
	// group may not write is refused; neither says anything.
	r, evs := h.one(Command{Kind: KindGate, Gate: Baseline})
	require.Equal(t, Result{Status: OK, Value: 8}, r)
	require.Empty(t, evs)
	for _, g := range []Gate{
		{Codec: 9, Snapshot: 6},                   // a version-6 snapshot would lower it again
		{Codec: 7, Snapshot: 7},                   // below the baseline
		{Codec: 9},                                // likewise
		{Codec: 10, Snapshot: 7},                  // a version-7 snapshot would lose the sessions' parents
		{Codec: 11, Snapshot: 8},                  // beyond what this build reads
		{Codec: 9, Snapshot: snapshotVersion + 1}, // likewise
	} {
		r, evs := h.one(Command{Kind: KindGate, Gate: g})
		require.Equal(t, Invalid, r.Status, "%v", g)
		require.Empty(t, evs)
		require.Equal(t, Baseline, h.st.Gate())
	}

	r, evs = h.one(Command{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}})
	require.Equal(t, Result{Status: OK, Value: 9}, r)
	require.Equal(t, []Event{{Kind: EventGateRaised, Index: h.idx, Gate: Gate{Codec: 9, Snapshot: 7}}}, evs)
	require.Equal(t, Gate{Codec: 9, Snapshot: 7}, h.st.Gate())

	// It never falls: an older raise that commits late changes nothing.
	for _, g := range []Gate{Baseline, {Codec: 8, Snapshot: 7}, {Codec: 9, Snapshot: 7}} {
		r, evs := h.one(Command{Kind: KindGate, Gate: g})
		require.Equal(t, Result{Status: OK, Value: 9}, r)
		require.Empty(t, evs)
		require.Equal(t, Gate{Codec: 9, Snapshot: 7}, h.st.Gate())
	}
}

// The gate decides what Save writes: version 6 (the baseline's, which an
// older build restores) until it is raised, then version 7, which keeps
// it; both restore to the same state, and what was saved.
func TestGateDecidesTheSnapshotVersion(t *testing.T) {
	h := buildRich(t)
	base := saveBytes(t, h.st)
	require.Equal(t, byte(6), base[len(snapshotMagic)])
	restored, err := DecodeSnapshot(base)
	require.NoError(t, err)
	require.Equal(t, Baseline, restored.Gate())
	require.Equal(t, base, saveBytes(t, restored))

	h.apply(Command{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}})
	raised := saveBytes(t, h.st)
	require.Equal(t, byte(7), raised[len(snapshotMagic)])
	restored, err = DecodeSnapshot(raised)
	require.NoError(t, err)
	require.Equal(t, Gate{Codec: 9, Snapshot: 7}, restored.Gate())
	require.Equal(t, raised, saveBytes(t, restored))
	require.Equal(t, viewOf(h.st), viewOf(restored))
	roundTrip(t, h.st)
}

func TestRestoreGate(t *testing.T) {
	im := gatedImage()
	data := im.bytes()
	st, err := DecodeSnapshot(data)
	require.NoError(t, err)
	require.Equal(t, Gate{Codec: 9, Snapshot: 7}, st.Gate())
	require.Equal(t, data, saveBytes(t, st), "Save writes exactly the documented format")
	old := validImage()
	old.version, old.table = 6, nil // version 6: no gate, no table
	st, err = DecodeSnapshot(old.bytes())
	require.NoError(t, err)
	require.Equal(t, Baseline, st.Gate())

	for _, g := range [][2]uint64{{9, 6}, {9, 8}, {7, 7}, {0, 0}, {9, 0}} {
		im.gate = g
		_, err := DecodeSnapshot(im.bytes())
		require.ErrorIs(t, err, ErrCorrupt, "gate %v", g)
		_, err = refDecodeSnapshot(im.bytes())
		require.ErrorIs(t, err, ErrCorrupt, "gate %v (the reference)", g)
	}
	im.gate = [2]uint64{codecVersion + 1, 7}
	_, err = DecodeSnapshot(im.bytes())
	require.ErrorIs(t, err, ErrVersionTooNew)
	require.EqualError(t, err, "log version 12; this build reads up to 11")
	im = gatedImage()
	im.version = snapshotVersion + 1
	_, err = DecodeSnapshot(im.bytes())
	require.ErrorIs(t, err, ErrVersionTooNew)
	require.EqualError(t, err, "snapshot version 10; this build reads up to 9")
}

func TestMinCodec(t *testing.T) {
	for k := KindOpenSession; k <= maxKind; k++ {
		require.Positive(t, MinCodec(k), "%v has a version: every kind is in the table", k)
		require.LessOrEqual(t, MinCodec(k), codecVersion, "%v", k)
	}
	require.Zero(t, MinCodec(0))
	require.Zero(t, MinCodec(maxKind+1))
	require.Zero(t, MinCodec(255))
	require.Equal(t, 9, MinCodec(KindGate))
	require.Equal(t, 10, NeedsCodec(&Command{Kind: KindGate, Gate: Gate{Codec: 10, Snapshot: 7}}))
	require.Equal(t, 4, NeedsCodec(&Command{Kind: KindKeepAliveBatch}))
}

// AppendEntry writes the group's gate: version 8 and no kind newer at the
// baseline, whatever this build reads; a raise in the version it raises
// to; and never a version it has no layout for.
func TestAppendEntryHonoursTheGate(t *testing.T) {
	cmds := []Command{openCmd(1), {Kind: KindKeepAliveBatch, Owner: 1, Renew: []Renewal{{Session: 1}}}}
	b, err := AppendEntry(nil, Baseline, 5, cmds)
	require.NoError(t, err)
	require.Equal(t, byte(8), b[0])
	b, err = AppendEntry(nil, Gate{Codec: 9, Snapshot: 7}, 5, cmds)
	require.NoError(t, err)
	require.Equal(t, byte(9), b[0])

	raise := Command{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}}
	b, err = AppendEntry([]byte("prefix"), Baseline, 5, append(cmds, raise))
	require.NoError(t, err)
	require.Equal(t, byte(9), b[len("prefix")], "the raise is the first entry of its version")
	got, err := DecodeBatch(b[len("prefix"):], nil)
	require.NoError(t, err)
	require.Equal(t, raise.Gate, got[2].Gate)

	for _, tc := range []struct {
		g    Gate
		cmds []Command
		msg  string
	}{
		{Baseline, []Command{openCmd(1), {Kind: KindGate}}, "gate needs log version 9; the group writes 8"},
		{Gate{Codec: 7, Snapshot: 6}, cmds, "this build writes log versions 8 to 11, not 7"},
		{Gate{Codec: 12, Snapshot: 9}, cmds, "not 12"},
		{Baseline, []Command{{Kind: KindGate, Gate: Gate{Codec: 12, Snapshot: 9}}}, "not 12"},
		{Baseline, []Command{{Kind: maxKind + 1}}, "needs log version 0"},
	} {
		b, err := AppendEntry([]byte("x"), tc.g, 0, tc.cmds)
		require.ErrorIs(t, err, ErrVersionGated)
		require.ErrorContains(t, err, tc.msg)
		require.Equal(t, []byte("x"), b)
	}
}

// A session's parent (Command.Parent) is kept once the group writes
// version 10, and saved in version 8: below, the state keeps none, and
// saves as before.
func TestParentNeedsGate10(t *testing.T) {
	h := newHarness(t)
	h.apply(Command{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}})
	r, _ := h.one(Command{Kind: KindOpenSession, Nonce: 1, TTL: 1e9, Owner: 1, Parent: 5 << TokenShift})
	info, ok := h.st.Session(r.Value)
	require.True(t, ok)
	require.Zero(t, info.Parent, "at gate 9, unknown")
	nine := saveBytes(t, h.st)
	require.Equal(t, byte(7), nine[len(snapshotMagic)])

	h.apply(Command{Kind: KindGate, Gate: Gate{Codec: 10, Snapshot: 8}})
	r, _ = h.one(Command{Kind: KindOpenSession, Nonce: 2, TTL: 1e9, Owner: 1, Parent: 5 << TokenShift})
	h.one(acqCmd(r.Value, 1, "l", false))
	info, _ = h.st.Session(r.Value)
	require.Equal(t, uint64(5<<TokenShift), info.Parent)
	l := h.st.Lock("l")
	require.Equal(t, uint64(5<<TokenShift), l.Parent)
	require.Equal(t, uint64(5<<TokenShift), l.Holders[0].Parent)
	require.Equal(t, r.Value, l.Session, "the part's own ID stays")
	ten := saveBytes(t, h.st)
	require.Equal(t, byte(8), ten[len(snapshotMagic)])
	restored := roundTrip(t, h.st)
	info, _ = restored.Session(r.Value)
	require.Equal(t, uint64(5<<TokenShift), info.Parent)

	im := parentImage()
	st, err := DecodeSnapshot(im.bytes())
	require.NoError(t, err)
	require.Equal(t, im.bytes(), saveBytes(t, st), "Save writes exactly the documented format")
	a, _ := st.Session(imgA)
	b, _ := st.Session(imgB)
	require.Equal(t, []uint64{5 << TokenShift, math.MaxUint64}, []uint64{a.Parent, b.Parent})
	require.Equal(t, uint64(5<<TokenShift), st.Lock("alpha").Parent)
	require.Equal(t, uint64(math.MaxUint64), st.Waiters("alpha", 10)[0].Parent)
	_, err = refDecodeSnapshot(im.bytes())
	require.NoError(t, err)
}
