package fsm

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPeekSnapshot(t *testing.T) {
	h := fuzzBase(t)
	var buf bytes.Buffer
	require.NoError(t, h.st.Save(&buf))
	head, err := PeekSnapshot(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, SnapshotHead{Version: uint64(Baseline.Snapshot), Index: h.st.Index(), LastToken: h.st.LastToken(), GroupID: h.st.GroupID()}, head)
	// Raised, the gate is saved in version 7 and on, after the fields
	// peeked.
	h.apply(Command{Kind: KindGate, Gate: Reads()})
	var raised bytes.Buffer
	require.NoError(t, h.st.Save(&raised))
	head, err = PeekSnapshot(bytes.NewReader(raised.Bytes()))
	require.NoError(t, err)
	require.Equal(t, SnapshotHead{Version: snapshotVersion, Index: h.st.Index(), LastToken: h.st.LastToken(), GroupID: h.st.GroupID()}, head)
	future := slices.Clone(raised.Bytes())
	future[len(snapshotMagic)] = snapshotVersion + 1
	_, err = PeekSnapshot(bytes.NewReader(future))
	require.ErrorIs(t, err, ErrVersionTooNew)
	old, err := os.ReadFile("testdata/snapshot-v2.bin")
	require.NoError(t, err)
	st, err := Restore(bytes.NewReader(old))
	require.NoError(t, err)
	head, err = PeekSnapshot(bytes.NewReader(old))
	require.NoError(t, err)
	require.Equal(t, SnapshotHead{Version: 2, Index: st.Index(), LastToken: st.LastToken()}, head)
	for n := range 12 {
		_, err := PeekSnapshot(bytes.NewReader(buf.Bytes()[:n]))
		require.ErrorIs(t, err, ErrCorrupt, "%d bytes", n)
	}
}

// FuzzPeekSnapshot: PeekSnapshot never panics, and agrees with Restore on
// what both accept.
func FuzzPeekSnapshot(f *testing.F) {
	var buf bytes.Buffer
	require.NoError(f, New().Save(&buf))
	f.Add(buf.Bytes())
	f.Add([]byte("FLSN\x07"))
	f.Add(saveBytes(f, raisedState(f)))
	f.Fuzz(func(t *testing.T, data []byte) {
		head, err := PeekSnapshot(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersionTooNew) {
				t.Fatalf("error without ErrCorrupt or ErrVersionTooNew: %v", err)
			}
			return
		}
		if st, err := Restore(bytes.NewReader(data)); err == nil &&
			(st.Index() != head.Index || st.LastToken() != head.LastToken || st.GroupID() != head.GroupID) {
			t.Fatalf("peek %+v, restore index %d token %d group %d", head, st.Index(), st.LastToken(), st.GroupID())
		}
	})
}
