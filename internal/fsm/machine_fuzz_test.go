package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/stretchr/testify/require"
)

// FuzzMachine drives the Dragonboat adapter with bytes as they would arrive
// from the log or from a peer's snapshot stream: an entry that does not
// decode is skipped (only the applied index moves), one of a version this
// build does not read is an error that changes nothing, one that does is
// applied exactly as State.Apply would, and a snapshot that does not decode
// is an error that leaves the machine with no state, refusing everything
// after (RecoverFromSnapshot lets the old state go before it reads the
// snapshot). Never a panic, never half a state.
func FuzzMachine(f *testing.F) {
	f.Add(AppendBatch(nil, everyKind()), []byte(nil))
	f.Add([]byte{codecVersion, 0, 1, byte(KindOpenSession), 1, 1, 1, 0, 0}, saveBytes(f, buildRich(f).st))
	f.Add(AppendBatch(nil, []Command{{Kind: KindUndelay, Name: "delayed", Token: 6 << TokenShift}}), saveBytes(f, timedState(f)))
	f.Add([]byte{0xff}, []byte("FLSN\x01"))
	f.Add(AppendBatch(nil, []Command{{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}}}), saveBytes(f, raisedState(f)))
	f.Add([]byte{codecVersion + 1, 0, 1, byte(KindCloseSession), 1}, gatedImage().bytes())
	f.Add(AppendBatchAt(nil, 1_780_000_000_000_000_000, []Command{{Kind: KindOpenSession, Nonce: 9, TTL: 1, Name: "w@h"}}),
		validImage().bytes())
	f.Fuzz(func(t *testing.T, entry, snapshot []byte) {
		m := NewStateMachine(nil)(1, 1)
		base := update(t, m, 1, openCmd(1), openCmd(2))
		update(t, m, 2, acqCmd(base[0].Value, 1, "L", false), acqCmd(base[1].Value, 1, "L", true))
		before := saveBytes(t, lookupState(t, m))

		twin, err := DecodeSnapshot(before)
		require.NoError(t, err)
		res, err := m.Update(sm.Entry{Index: 3, Cmd: entry})
		cmds, derr := DecodeBatch(entry, nil)
		if errors.Is(derr, ErrVersionTooNew) {
			// Not skipped: the replica stops there, its state untouched.
			require.ErrorIs(t, err, ErrVersionTooNew)
			require.Equal(t, before, saveBytes(t, lookupState(t, m)))
			return
		}
		require.NoError(t, err)
		if derr != nil {
			require.Equal(t, CorruptEntry, res.Value)
			twin.index = 3
		} else {
			want, _ := twin.Apply(3, cmds)
			got, err := DecodeResults(res.Data, nil)
			require.NoError(t, err)
			require.Equal(t, want, got)
		}
		after := saveBytes(t, lookupState(t, m))
		require.Equal(t, saveBytes(t, twin), after)

		rerr := m.RecoverFromSnapshot(bytes.NewReader(snapshot), nil, nil)
		if rerr != nil {
			_, err := m.Lookup(Query(func(st *State) any { return st }))
			require.ErrorIs(t, err, errNoState, "a failed restore left a state to read")
			_, err = m.Update(sm.Entry{Index: 4, Cmd: entry})
			require.ErrorIs(t, err, errNoState, "a failed restore left a state to update")
			require.ErrorIs(t, m.SaveSnapshot(io.Discard, nil, nil), errNoState)
		} else {
			require.Equal(t, saveBytes(t, mustDecode(t, snapshot)), saveBytes(t, lookupState(t, m)))
		}
		require.NoError(t, m.Close())
	})
}

func mustDecode(t *testing.T, data []byte) *State {
	st, err := DecodeSnapshot(data)
	require.NoError(t, err)
	return st
}
