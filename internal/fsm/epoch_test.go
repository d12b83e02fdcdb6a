package fsm

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRaiseEpoch: a raise of a snapshot of every version this build reads
// keeps its version and every field but the last token and last session
// ID, which move to the first of the next epoch; it is a pure function of
// the bytes; and the grants and sessions of the raised state come after
// every token and session ID of the epoch before. A raise of a raised
// snapshot moves on to the next epoch; a corrupt snapshot, or one in the
// last epoch, is refused.
func TestRaiseEpoch(t *testing.T) {
	for _, file := range append(goldenSnapshots, "testdata/snapshot-v7-groups.bin") {
		t.Run(file, func(t *testing.T) {
			in, err := os.ReadFile(file)
			require.NoError(t, err)
			before, err := DecodeSnapshot(in)
			require.NoError(t, err)
			require.Zero(t, Epoch(before.LastToken()))
			head, err := PeekSnapshot(bytes.NewReader(in))
			require.NoError(t, err)

			out, err := RaiseEpoch(in)
			require.NoError(t, err)
			again, err := RaiseEpoch(bytes.Clone(in))
			require.NoError(t, err)
			require.Equal(t, out, again, "the same snapshot raises to the same bytes")
			raisedHead, err := PeekSnapshot(bytes.NewReader(out))
			require.NoError(t, err)
			require.Equal(t, head.Version, raisedHead.Version, "the snapshot keeps its version")
			require.Equal(t, head.Index, raisedHead.Index)
			require.Equal(t, head.GroupID, raisedHead.GroupID)

			raised, err := DecodeSnapshot(out)
			require.NoError(t, err)
			require.Equal(t, uint64(1)<<EpochShift, raised.LastToken())
			require.Equal(t, uint64(1)<<EpochShift, raised.lastSession)
			require.Equal(t, uint64(2), raised.NextEpoch())
			// Nothing else moved: with the two numbers set alike, both
			// states save to the same bytes.
			before.lastToken, before.lastSession = raised.lastToken, raised.lastSession
			require.Equal(t, saved(t, before), saved(t, raised))

			// The raised state's first session and grant are of epoch 1:
			// above every token and ID epoch 0 grants below index 2^40.
			idx := raised.Index() + 1
			rs, _ := raised.Apply(idx, []Command{openCmd(0xe90c4)})
			require.Equal(t, OK, rs[0].Status)
			s := rs[0].Value
			require.Equal(t, uint64(1), Epoch(s), "session ID %d", s)
			rs, _ = raised.Apply(idx+1, []Command{acqCmd(s, 1, "after-the-restore", false)})
			require.Equal(t, Granted, rs[0].Status)
			token := raised.Lock("after-the-restore").Token
			require.Equal(t, uint64(1), Epoch(token), "token %d", token)
			require.Greater(t, token, uint64(1)<<EpochShift)
			require.Greater(t, token, (uint64(1)<<40-1)<<TokenShift, "above what epoch 0 grants at index 2^40-1")

			// A restore of the restored group's backup raises again.
			twice, err := RaiseEpoch(out)
			require.NoError(t, err)
			st2, err := DecodeSnapshot(twice)
			require.NoError(t, err)
			require.Equal(t, uint64(2)<<EpochShift, st2.LastToken())

			bad := bytes.Clone(in)
			bad[len(bad)/2] ^= 0x10
			_, err = RaiseEpoch(bad)
			require.ErrorIs(t, err, ErrCorrupt)
			_, err = RaiseEpoch(in[:len(in)-1])
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}

	// The epoch of the session IDs counts as much as the tokens'.
	st := New()
	st.lastSession = 5<<EpochShift + 3
	out, err := RaiseEpoch(saved(t, st))
	require.NoError(t, err)
	raised, err := DecodeSnapshot(out)
	require.NoError(t, err)
	require.Equal(t, uint64(6)<<EpochShift, raised.LastToken())
	require.Equal(t, uint64(6)<<EpochShift, raised.lastSession)

	st.lastToken = maxEpoch<<EpochShift + 1
	_, err = RaiseEpoch(saved(t, st))
	require.ErrorIs(t, err, ErrNoEpochLeft)
	_, err = RaiseEpoch(nil)
	require.ErrorIs(t, err, ErrCorrupt)
}

func saved(t *testing.T, st *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, st.Save(&buf))
	return buf.Bytes()
}
