package fsm

import (
	"bytes"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"weak"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/stretchr/testify/require"
)

type applied struct {
	index  uint64
	events []Event
}

// recorder is an Observer that copies what it is told.
type recorder struct {
	applied  []applied
	restored []*State
}

func (r *recorder) Applied(index uint64, _ []Command, events []Event) {
	var copied []Event // nil when there are none, however the state keeps its buffer
	if len(events) > 0 {
		copied = slices.Clone(events)
	}
	r.applied = append(r.applied, applied{index, copied})
}

func (r *recorder) Restored(st *State) { r.restored = append(r.restored, st) }

func newMachine(t *testing.T, obs Observer) sm.IStateMachine {
	t.Helper()
	m := NewStateMachine(obs)(1, 1)
	require.NotNil(t, m)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

// update applies cmds as the entry at index and decodes the results.
func update(t *testing.T, m sm.IStateMachine, index uint64, cmds ...Command) []Result {
	t.Helper()
	res, err := m.Update(sm.Entry{Index: index, Cmd: AppendBatch(nil, cmds)})
	require.NoError(t, err)
	require.Equal(t, uint64(len(cmds)), res.Value)
	rs, err := DecodeResults(res.Data, nil)
	require.NoError(t, err)
	require.Len(t, rs, len(cmds))
	return rs
}

func lookupState(t *testing.T, m sm.IStateMachine) *State {
	t.Helper()
	v, err := m.Lookup(Query(func(st *State) any { return st }))
	require.NoError(t, err)
	return v.(*State)
}

func TestMachineUpdate(t *testing.T) {
	obs := &recorder{}
	m := newMachine(t, obs)
	rs := update(t, m, 1, openCmd(1), openCmd(2))
	a, b := rs[0].Value, rs[1].Value
	require.Equal(t, []Result{{Status: OK, Value: 1 << TokenShift}, {Status: OK, Value: 1<<TokenShift + 1}}, rs)

	rs = update(t, m, 2, acqCmd(a, 1, "L", true), acqCmd(b, 1, "L", true), acqCmd(b, 2, "M", false))
	require.Equal(t, []Result{{Status: Granted, Value: 2 << TokenShift}, {Status: Queued, Value: 0}, {Status: Granted, Value: 2<<TokenShift + 1}}, rs)

	rs = update(t, m, 3, keepAliveCmd(a, 0))
	require.Equal(t, []Result{{Status: OK}}, rs)

	require.Equal(t, []applied{
		{1, []Event{{Kind: EventTouched, Session: a, Index: 1, TTL: 1e9}, {Kind: EventTouched, Session: b, Index: 1, TTL: 1e9}}},
		{2, []Event{grantedEv(a, 1, "L", 2<<TokenShift), {Kind: EventQueued, Session: b, Seq: 1, Name: "L"}, grantedEv(b, 2, "M", 2<<TokenShift+1)}},
		{3, []Event{{Kind: EventTouched, Session: a, Index: 3, TTL: 1e9}}},
	}, obs.applied)

	// An entry that causes no events is still reported.
	update(t, m, 4, relCmd(a, 9, "nope", 1))
	require.Len(t, obs.applied, 4)
	require.Equal(t, uint64(4), obs.applied[3].index)
	require.Empty(t, obs.applied[3].events)

	st := lookupState(t, m)
	require.Equal(t, uint64(4), st.Index())
	require.Equal(t, LockInfo{Name: "L", Held: true, Token: 2 << TokenShift, Session: a, Seq: 1, Waiters: 1, Holders: []Holder{{Session: a, Seq: 1, Token: 2 << TokenShift, Owner: 1}}}, st.Lock("L"))
}

func TestMachineCorruptEntry(t *testing.T) {
	obs := &recorder{}
	m := newMachine(t, obs)
	rs := update(t, m, 1, openCmd(1))
	a := rs[0].Value
	update(t, m, 2, acqCmd(a, 1, "L", false))
	before := saveBytes(t, lookupState(t, m))
	nApplied := len(obs.applied)

	valid := AppendBatch(nil, []Command{acqCmd(a, 2, "M", false)})
	// A good command, then garbage: nothing of the entry may be applied.
	partial := AppendBatch(nil, []Command{closeCmd(a)})
	partial[2] = 2 // the count, after the version and the time (0)
	partial = append(partial, 0xff)
	for i, cmd := range [][]byte{
		nil,
		{},
		append(slices.Clone(valid), 0),
		valid[:len(valid)-1],
		partial,
	} {
		index := uint64(3 + i)
		res, err := m.Update(sm.Entry{Index: index, Cmd: cmd})
		require.NoError(t, err, "a corrupt entry is skipped, not an error")
		require.Equal(t, CorruptEntry, res.Value)
		require.Nil(t, res.Data)

		// Nothing but the applied index changed.
		st := lookupState(t, m)
		require.Equal(t, index, st.Index())
		old, err := DecodeSnapshot(before)
		require.NoError(t, err)
		old.index = index
		require.Equal(t, saveBytes(t, old), saveBytes(t, st))
	}
	for _, a := range obs.applied[nApplied:] {
		require.Empty(t, a.events, "a skipped entry reports no events")
	}

	// The machine goes on normally.
	rs = update(t, m, 20, acqCmd(a, 2, "M", false))
	require.Equal(t, Result{Status: Granted, Value: 20 << TokenShift}, rs[0])
}

// tooNewRecorder is a recorder that is also told of what is too new.
type tooNewRecorder struct {
	recorder
	tooNew []error
	at     []uint64
}

func (r *tooNewRecorder) TooNew(index uint64, err error) {
	r.tooNew, r.at = append(r.tooNew, err), append(r.at, index)
}

// An entry of a log version this build does not read, or one that raises
// the gate beyond it, is no corruption to skip: the group writes it, and a
// replica that went on without it would hold another state than its
// group's. Update fails, which stops the replica (Dragonboat stops on an
// error from Update), and changes nothing; the observer hears of it first.
// A snapshot too new fails its restore alike.
func TestMachineStopsAtWhatIsTooNew(t *testing.T) {
	obs := &tooNewRecorder{}
	m := newMachine(t, obs)
	a := update(t, m, 1, openCmd(1))[0].Value
	update(t, m, 2, acqCmd(a, 1, "L", false))
	before := saveBytes(t, lookupState(t, m))
	for i, tc := range []struct {
		entry []byte
		msg   string
	}{
		{[]byte{codecVersion + 1, 0, 1, byte(KindCloseSession), 1}, "entry 3: log version 12; this build reads up to 11"},
		{[]byte{codecVersion, 0, 1, byte(KindGate), codecVersion + 1, 9}, "entry 4: log version 12; this build reads up to 11"},
		{[]byte{codecVersion, 0, 1, byte(KindGate), codecVersion, snapshotVersion + 1}, "entry 5: snapshot version 10; this build reads up to 9"},
	} {
		index := uint64(3 + i)
		_, err := m.Update(sm.Entry{Index: index, Cmd: tc.entry})
		require.ErrorIs(t, err, ErrVersionTooNew)
		require.NotErrorIs(t, err, ErrCorrupt)
		require.EqualError(t, err, tc.msg)
		require.Equal(t, before, saveBytes(t, lookupState(t, m)), "nothing applied, not even the index")
		require.Len(t, obs.tooNew, i+1)
		require.Equal(t, err, obs.tooNew[i])
		require.Equal(t, index, obs.at[i])
	}
	require.Len(t, obs.applied, 2, "nothing reported applied")

	var buf bytes.Buffer
	raised := New()
	raised.Apply(1, []Command{{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}}})
	require.NoError(t, raised.Save(&buf))
	future := slices.Clone(buf.Bytes())
	future[len(snapshotMagic)] = snapshotVersion + 1
	err := m.RecoverFromSnapshot(bytes.NewReader(future), nil, nil)
	require.ErrorIs(t, err, ErrVersionTooNew)
	require.EqualError(t, err, "snapshot version 10; this build reads up to 9")
	require.Len(t, obs.tooNew, 4)
	require.Equal(t, uint64(0), obs.at[3])
}

func TestMachineSnapshotRoundTrip(t *testing.T) {
	obs1, obs2 := &recorder{}, &recorder{}
	m1, m2 := newMachine(t, obs1), newMachine(t, obs2)
	d := newDriver(rand.New(rand.NewPCG(3, 4)))
	index := uint64(0)
	for range 200 {
		var cmds []Command
		for _, c := range d.entry() {
			if c.Kind >= KindOpenSession && c.Kind <= maxKind { // the codec cannot carry unknown kinds
				cmds = append(cmds, c)
			}
		}
		if len(cmds) == 0 {
			continue
		}
		index++
		rs := update(t, m1, index, cmds...)
		d.observe(cmds, rs, obs1.applied[len(obs1.applied)-1].events)
	}

	var buf bytes.Buffer
	require.NoError(t, m1.SaveSnapshot(&buf, nil, nil))
	snap := slices.Clone(buf.Bytes())
	require.NoError(t, m2.RecoverFromSnapshot(bytes.NewReader(snap), nil, nil))
	require.Len(t, obs2.restored, 1)
	st2 := lookupState(t, m2)
	require.Same(t, st2, obs2.restored[0], "Restored gets the machine's new state")
	require.Equal(t, snap, saveBytes(t, st2))
	require.Equal(t, viewOf(lookupState(t, m1)), viewOf(st2))
	require.Empty(t, obs2.applied)

	// Both go on alike.
	for range 50 {
		var cmds []Command
		for _, c := range d.entry() {
			if c.Kind >= KindOpenSession && c.Kind <= maxKind {
				cmds = append(cmds, c)
			}
		}
		if len(cmds) == 0 {
			continue
		}
		index++
		r1, r2 := update(t, m1, index, cmds...), update(t, m2, index, cmds...)
		require.Equal(t, r1, r2)
		require.Equal(t, obs1.applied[len(obs1.applied)-1], obs2.applied[len(obs2.applied)-1])
		d.observe(cmds, r1, obs1.applied[len(obs1.applied)-1].events)
	}
	require.Equal(t, saveBytes(t, lookupState(t, m1)), saveBytes(t, lookupState(t, m2)))

	// A corrupt snapshot is an error, and leaves the machine without a
	// state: it refuses everything rather than answer from a state it no
	// longer has (Dragonboat stops the replica on the error anyway).
	bad := slices.Clone(snap)
	bad[len(bad)/2] ^= 1
	nApplied := len(obs2.applied)
	require.ErrorIs(t, m2.RecoverFromSnapshot(bytes.NewReader(bad), nil, nil), ErrCorrupt)
	require.Len(t, obs2.restored, 1)
	_, err := m2.Lookup(Query(func(st *State) any { return st }))
	require.ErrorIs(t, err, errNoState)
	_, err = m2.Update(sm.Entry{Index: index + 1, Cmd: AppendBatch(nil, []Command{openCmd(99)})})
	require.ErrorIs(t, err, errNoState)
	require.ErrorIs(t, m2.SaveSnapshot(&buf, nil, nil), errNoState)
	require.Len(t, obs2.applied, nApplied, "a refused update reports nothing")
	// A good snapshot brings it back.
	require.NoError(t, m2.RecoverFromSnapshot(bytes.NewReader(snap), nil, nil))
	require.Equal(t, snap, saveBytes(t, lookupState(t, m2)))
}

func TestMachineWithoutObserver(t *testing.T) {
	m := newMachine(t, nil)
	rs := update(t, m, 1, openCmd(1))
	require.Equal(t, OK, rs[0].Status)
	var buf bytes.Buffer
	require.NoError(t, m.SaveSnapshot(&buf, nil, nil))
	m2 := newMachine(t, nil)
	require.NoError(t, m2.RecoverFromSnapshot(&buf, nil, nil))
	require.Equal(t, viewOf(lookupState(t, m)), viewOf(lookupState(t, m2)))
	res, err := m.Update(sm.Entry{Index: 2, Cmd: []byte{9}})
	require.NoError(t, err)
	require.Equal(t, CorruptEntry, res.Value)
}

func TestMachineLookup(t *testing.T) {
	m := newMachine(t, nil)
	rs := update(t, m, 1, openCmd(1))
	update(t, m, 2, acqCmd(rs[0].Value, 1, "L", false))

	v, err := m.Lookup(Query(func(st *State) any { return st.Lock("L") }))
	require.NoError(t, err)
	require.Equal(t, LockInfo{Name: "L", Held: true, Token: 2 << TokenShift, Session: rs[0].Value, Seq: 1, Holders: []Holder{{Session: rs[0].Value, Seq: 1, Token: 2 << TokenShift, Owner: 1}}}, v)

	for _, q := range []any{
		nil,
		"L",
		func(st *State) any { return st }, // not converted to Query
		42,
	} {
		v, err := m.Lookup(q)
		require.ErrorIs(t, err, ErrBadQuery)
		require.Nil(t, v)
	}
}

// RecoverFromSnapshot lets go of the state it replaces before it reads the
// snapshot: the garbage collector may free the old state while the new one
// is built.
func TestRecoverFreesOldStateFirst(t *testing.T) {
	m := newMachine(t, nil)
	rs := update(t, m, 1, openCmd(1), openCmd(2))
	update(t, m, 2, acqCmd(rs[0].Value, 1, "L", false), acqCmd(rs[1].Value, 1, "M", false))
	old := weak.Make(m.(*machine).st)

	data := saveBytes(t, buildRich(t).st)
	var freedDuringRead, sawRead bool
	r := &hookReader{r: bytes.NewReader(data), first: func() {
		sawRead = true
		runtime.GC()
		runtime.GC()
		freedDuringRead = old.Value() == nil
	}}
	require.NoError(t, m.RecoverFromSnapshot(r, nil, nil))
	require.True(t, sawRead)
	require.True(t, freedDuringRead, "the old state was still reachable while the snapshot was read")
	require.Equal(t, data, saveBytes(t, lookupState(t, m)))
}

// hookReader calls first before its first read.
type hookReader struct {
	r     io.Reader
	first func()
}

func (h *hookReader) Read(p []byte) (int, error) {
	if h.first != nil {
		f := h.first
		h.first = nil
		f()
	}
	return h.r.Read(p)
}

// RecoverFromSnapshot forces a collection before it reads the snapshot only
// for a state at least collectAbove large (by its last snapshot): a
// collection costs what the whole process keeps live, and a follower that
// recovers slower than its leader compacts never catches up.
func TestRecoverCollectsOnlyForALargeState(t *testing.T) {
	forced := func() uint32 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.NumForcedGC
	}
	m := newMachine(t, nil)
	update(t, m, 1, openCmd(1), openCmd(2))
	var buf bytes.Buffer
	require.NoError(t, m.SaveSnapshot(&buf, nil, nil))
	snap := slices.Clone(buf.Bytes())
	require.Equal(t, int64(len(snap)), m.(*machine).size)

	before := forced()
	require.NoError(t, m.RecoverFromSnapshot(bytes.NewReader(snap), nil, nil))
	require.Equal(t, before, forced(), "a small state's recovery forced a collection")
	require.Equal(t, int64(len(snap)), m.(*machine).size, "the size of the restored state")

	defer func(was int64) { collectAbove = was }(collectAbove)
	collectAbove = int64(len(snap))
	before = forced()
	require.NoError(t, m.RecoverFromSnapshot(bytes.NewReader(snap), nil, nil))
	require.Greater(t, forced(), before, "a large state's recovery did not collect it first")
}
