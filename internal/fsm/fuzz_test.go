package fsm

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// The fuzz targets run their seeds as ordinary tests; run them with
// go test ./fsm/ -run='^$' -fuzz=FuzzApply (and so on) to search further.

const (
	fuzzS0 = 1 << TokenShift // the sessions fuzzBase opens
	fuzzS1 = fuzzS0 + 1
	fuzzS2 = fuzzS0 + 2
)

// fuzzBase returns a small state for decoded commands to act on: three
// sessions, a held lock with a waiter, and a second held lock.
func fuzzBase(t *testing.T) *harness {
	h := newHarness(t)
	rs, _ := h.apply(openCmd(1), openCmd(2), openCmd(3))
	require.Equal(t, []Result{{Status: OK, Value: fuzzS0}, {Status: OK, Value: fuzzS1}, {Status: OK, Value: fuzzS2}}, rs)
	h.apply(acqCmd(fuzzS0, 1, "a", false), acqCmd(fuzzS1, 1, "a", true), acqCmd(fuzzS2, 1, "b", false))
	return h
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add(AppendBatch(nil, everyKind()))
	f.Add(AppendBatch(nil, []Command{
		{Kind: KindRelease, Session: fuzzS0, Seq: 2, Name: "a", Token: 2 << TokenShift},
		{Kind: KindAcquire, Session: fuzzS2, Seq: 2, Name: "a", Wait: true},
		{Kind: KindCancel, Session: fuzzS1, Target: 1},
		{Kind: KindExpire, Session: fuzzS2, Target: 1},
		{Kind: KindCloseSession, Session: fuzzS0},
		{Kind: KindKeepAlive, Session: fuzzS1, Floor: 5},
		{Kind: KindOpenSession, Nonce: 2, TTL: 1},
		{Kind: KindOpenSession, Nonce: 9, TTL: 1},
	}))
	f.Add(AppendBatch(nil, []Command{{Kind: KindAcquire, Session: fuzzS2, Seq: 1, Name: "a", Wait: true}}))
	f.Add([]byte{codecVersion, 0, 1, byte(KindCloseSession), 0x80, 0x80, 0x04})
	f.Add([]byte{codecVersion, 0, 0})
	f.Add([]byte{})
	// Version 6: a stamped entry, named opens (one not UTF-8), an acquire
	// and a release that passes a lock on at that time.
	f.Add(AppendBatchAt(nil, 1_780_000_000_000_000_000, []Command{
		{Kind: KindOpenSession, Nonce: 7, TTL: 1, Name: "reindex@worker-3"},
		{Kind: KindOpenSession, Nonce: 8, TTL: 1, Name: "bad\xff"},
		{Kind: KindAcquire, Session: fuzzS2, Seq: 2, Name: "a", Wait: true},
		{Kind: KindRelease, Session: fuzzS0, Seq: 2, Name: "a", Token: 2 << TokenShift},
	}))
	// Version 8: a resume that keeps the waiter of "a" in its place, and
	// the release that grants it under its old number; one that does not
	// keep; and a version-7 resume, which has no keep flag.
	f.Add(AppendBatch(nil, []Command{
		{Kind: KindResume, Session: fuzzS1, Nonce: 2, Owner: 2, Target: 1, TTL: openCmd(0).TTL, Keep: true},
		{Kind: KindRelease, Session: fuzzS0, Seq: 2, Name: "a", Token: 2 << TokenShift},
		{Kind: KindCancel, Session: fuzzS1, Target: 1, Floor: 1, Name: "a"},
		{Kind: KindResume, Session: fuzzS2, Nonce: 3, Owner: 3, Target: 2, TTL: openCmd(0).TTL},
	}))
	v7 := AppendBatch(nil, []Command{{Kind: KindResume, Session: fuzzS1, Nonce: 2, Owner: 2, Target: 1, TTL: openCmd(0).TTL}})
	f.Add(append([]byte{7}, v7[1:len(v7)-1]...)) // without the keep flag
	// Version 7: operator commands with operation IDs, each twice (a
	// retry); version 6: a revoke and an end without one.
	f.Add(AppendBatch(nil, []Command{
		{Kind: KindRevoke, Name: "a", Op: 1}, {Kind: KindRevoke, Name: "a", Op: 1},
		{Kind: KindEndSession, Session: fuzzS2, Op: 2}, {Kind: KindEndSession, Session: fuzzS2, Op: 2},
		{Kind: KindRevoke, Name: "b", Token: 2 << TokenShift, Op: 3}, {Kind: KindRevoke, Name: "b", Token: 2 << TokenShift, Op: 3},
	}))
	f.Add([]byte{6, 0, 2, byte(KindRevoke), 0, 0, 1, 'a', byte(KindEndSession), 0x80, 0x80, 0x04})
	// Version 5: an entry without a time.
	f.Add(asVersion(AppendBatch(nil, []Command{{Kind: KindAcquire, Session: fuzzS2, Seq: 2, Name: "b", Wait: true}}), 5))
	// Version 4: a resume without its TTL, a revoke.
	f.Add([]byte{4, 2, byte(KindResume), 1, 2, 3, 4, byte(KindRevoke), 0, 0, 1, 'a'})
	// Version 9: the gate raised, with a grant in the same entry; raises
	// that change nothing or are refused; a gate in a version-8 entry; a
	// gate, and an entry, newer than this build reads.
	f.Add(AppendBatch(nil, []Command{{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}},
		{Kind: KindAcquire, Session: fuzzS2, Seq: 2, Name: "b", Wait: true}}))
	f.Add(AppendBatch(nil, []Command{{Kind: KindGate, Gate: Baseline}, {Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 6}},
		{Kind: KindGate, Gate: Gate{Codec: 8, Snapshot: 7}}}))
	f.Add([]byte{8, 0, 1, byte(KindGate), 9, 7})
	f.Add([]byte{codecVersion, 0, 1, byte(KindGate), codecVersion + 1, 7})
	f.Add([]byte{codecVersion + 1, 0, 1, byte(KindCloseSession), 1})
	f.Add(AppendBatch(nil, groupTableCommands())) // version 9's group table
	// Version 10: opens with their parents; the same at gate 9, without;
	// the raise to 10.
	parts := []Command{{Kind: KindOpenSession, Nonce: 41, TTL: 1e9, Owner: 2, Name: "p", Parent: fuzzS2},
		{Kind: KindOpenSession, Nonce: 42, TTL: 1e9, Owner: 3, Parent: math.MaxUint64}}
	f.Add(AppendBatch(nil, parts))
	if b, err := AppendEntry(nil, Gate{Codec: 9, Snapshot: 7}, 0, parts); err == nil {
		f.Add(b)
	}
	f.Add([]byte{9, 0, 1, byte(KindGate), 10, 8})
	f.Add([]byte{10, 0, 1, byte(KindOpenSession), 1, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		cmds, err := DecodeBatch(data, nil)
		if err != nil {
			requireRefused(t, err)
			return
		}
		require.NotEmpty(t, cmds)
		require.LessOrEqual(t, len(cmds), MaxBatch)
		enc := AppendBatch(nil, cmds)
		again, err := DecodeBatch(enc, nil)
		require.NoError(t, err)
		if data[0] == codecVersion {
			// An older entry re-encodes as the newest version, which
			// decodes under the newest rules: equal only for today's.
			require.Equal(t, cmds, again)
		}
		require.Equal(t, enc, AppendBatch(nil, again))
		if int(data[0]) >= Baseline.Codec {
			// A group whose gate is the entry's version writes it so, or
			// at the version a raise it carries raises the gate to.
			want := data[0]
			for _, c := range cmds {
				if c.Kind == KindGate {
					want = max(want, byte(c.Gate.Codec))
				}
			}
			same, err := AppendEntry(nil, Gate{Codec: int(data[0]), Snapshot: gateSnapshot}, cmds[0].At, cmds)
			require.NoError(t, err)
			require.Equal(t, want, same[0])
			back, err := DecodeBatch(same, nil)
			require.NoError(t, err)
			require.Equal(t, cmds, back)
		}

		h := fuzzBase(t)
		h.apply(cmds...) // checks the invariants
		roundTrip(t, h.st)
	})
}

func FuzzDecodeResults(f *testing.F) {
	f.Add(AppendResults(nil, nil))
	f.Add(AppendResults(nil, []Result{{Status: Refused, Value: 2, Refused: []uint64{3, 1 << 40}}}))
	f.Add(AppendResults(nil, []Result{{Status: OK, Value: 1 << TokenShift}, {Status: Granted, Value: 1<<63 + 5}, {Status: Queued, Value: 0}, {Status: LimitExceeded, Value: 0}}))
	f.Add([]byte{1, 0, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := DecodeResults(data, nil)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			return
		}
		require.LessOrEqual(t, len(rs), MaxBatch)
		enc := AppendResults(nil, rs)
		again, err := DecodeResults(enc, nil)
		require.NoError(t, err)
		require.Equal(t, len(rs), len(again))
		if len(rs) > 0 {
			require.Equal(t, rs, again)
		}
		require.Equal(t, enc, AppendResults(nil, again))
	})
}

func FuzzRestore(f *testing.F) {
	rich := saveBytes(f, buildRich(f).st)
	f.Add(saveBytes(f, New()))
	f.Add(rich)
	f.Add(rich[:len(rich)-4]) // a body: the target also tries it with a checksum
	f.Add(validImage().body())
	f.Add(validImage().bytes())
	h := newHarness(f)
	newDriver(rand.New(rand.NewPCG(11, 12))).drive(h, 100)
	random := saveBytes(f, h.st)
	f.Add(random)
	f.Add(random[:len(random)-4])
	f.Add([]byte("FLSN"))
	f.Add(saveBytes(f, timedState(f)))
	f.Add(saveBytes(f, raisedState(f))) // version 7
	f.Add(gatedImage().bytes())
	f.Add(saveBytes(f, groupTableState(f))) // version 7's group table
	f.Add(saveBytes(f, parentState(f)))     // version 8's parents
	f.Add(parentImage().bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, withCRC(slices.Clone(data))} {
			st, err := DecodeSnapshot(in)
			st2, err2 := Restore(bytes.NewReader(in))
			require.Equal(t, err, err2)
			if err != nil {
				requireRefused(t, err)
				require.Nil(t, st)
				continue
			}
			require.NoError(t, checkInvariants(st, false))
			first := saveBytes(t, st)
			require.Equal(t, first, saveBytes(t, st2))
			again, err := DecodeSnapshot(first)
			require.NoError(t, err)
			require.Equal(t, first, saveBytes(t, again))
		}
	})
}

func FuzzApply(f *testing.F) {
	rng := rand.New(rand.NewPCG(21, 22))
	for _, n := range []int{8, 64, 512, 2048} {
		seed := make([]byte, n)
		for i := range seed {
			seed[i] = byte(rng.Uint32())
		}
		f.Add(seed)
	}
	f.Add(bytes.Repeat([]byte{6}, 64))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		src := &byteSource{b: data}
		d := newDriver(src)
		a, b := newHarness(t), newHarness(t)
		var c *harness
		for i := 0; len(src.b) > 0 && i < 512; i++ {
			cmds := d.entry()
			ra, ea := a.applyAlike(i, cmds, b, c) // invariants, one holder per lock, rising tokens
			d.observe(cmds, ra, ea)
			if i == 8 {
				c = harnessFor(t, roundTrip(t, a.st))
			}
		}
		a.requireConverged(b, c)
	})
}

// timedState has a lock under a lock-delay with a waiter, a delayed
// semaphore nobody holds, and grants (and a waiter) with maximum holds.
func timedState(tb testing.TB) *State {
	h := newHarness(tb)
	a, b := h.openDelayed(1, 7e9), h.open(2)
	h.one(acqCmd(a, 1, "delayed", true))
	h.one(Command{Kind: KindAcquireShared, Session: a, Seq: 2, Name: "sem", Permits: 2, Wait: true})
	h.one(Command{Kind: KindAcquire, Session: b, Seq: 1, Name: "delayed", Wait: true, MaxHold: 2e9})
	h.one(Command{Kind: KindAcquire, Session: b, Seq: 2, Name: "timed", Wait: true, MaxHold: 3e9})
	h.one(Command{Kind: KindCampaign, Session: b, Seq: 3, Name: "E", Value: "v", Wait: true, MaxHold: 4e9})
	h.one(Command{Kind: KindExpire, Session: a, Target: 1})
	return h.st
}
