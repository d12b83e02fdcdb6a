package fsm

import (
	"bufio"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testdata/log-v1.txt is a log written by the version-1 codec, one entry a
// line with the results version 1 applied it to; testdata/snapshot-v2.bin
// is the snapshot version 2 saved after it. A replica of today must replay
// the old log to the same results and the same state, and restore the old
// snapshot to that state too.
func TestVersion1LogReplays(t *testing.T) {
	st, restored := replayOldLog(t, "testdata/log-v1.txt", 1, 6, "testdata/snapshot-v2.bin")
	require.Equal(t, saveBytes(t, st), saveBytes(t, restored), "the replayed log and the old snapshot agree")
	require.Zero(t, restored.LeaderMark())
	require.Equal(t, "v2", restored.Election("E").Value)
	require.False(t, restored.Lock("L").Held)
}

// testdata/log-v2.txt is a log written by the version-2 codec (every kind
// it had, its close-session without a floor among them), and
// testdata/snapshot-v3.bin the snapshot version 3 saved after it.
func TestVersion2LogReplays(t *testing.T) {
	st, restored := replayOldLog(t, "testdata/log-v2.txt", 2, 12, "testdata/snapshot-v3.bin")
	require.Equal(t, saveBytes(t, st), saveBytes(t, restored), "the replayed log and the old snapshot agree")
	require.Equal(t, uint64(0xfeed), restored.GroupID())
	e := restored.Election("E")
	require.True(t, e.Led)
	require.Equal(t, "a2", e.Value)
	require.Len(t, restored.Sessions(), 3)

	// A session of the old log can be resumed: base 0 never refused it.
	a := uint64(2 << TokenShift)
	h := harnessFor(t, restored)
	r, _ := h.one(Command{Kind: KindResume, Session: a, Nonce: 11, Owner: 3})
	require.Equal(t, OK, r.Status)
}

// replayOldLog applies the log in file, whose entries are all of version
// v (n of them), checking each gives the results recorded with it, and
// restores the snapshot saved after it.
func replayOldLog(t *testing.T, file string, v byte, n uint64, snapshot string) (st, restored *State) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	st = New()
	sc := bufio.NewScanner(f)
	index := uint64(0)
	for sc.Scan() {
		entry, results, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok)
		data, err := hex.DecodeString(entry)
		require.NoError(t, err)
		require.Equal(t, v, data[0], "a version-%d entry", v)
		cmds, err := DecodeBatch(data, nil)
		require.NoError(t, err)
		index++
		rs, _ := st.Apply(index, cmds)
		require.Equal(t, results, hex.EncodeToString(AppendResults(nil, rs)), "entry %d applies as it did", index)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, n, index)
	old, err := os.ReadFile(snapshot)
	require.NoError(t, err)
	restored, err = DecodeSnapshot(old)
	require.NoError(t, err)
	require.NoError(t, checkInvariants(restored, true))
	return st, restored
}
