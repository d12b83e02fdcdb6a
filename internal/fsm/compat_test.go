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
	f, err := os.Open("testdata/log-v1.txt")
	require.NoError(t, err)
	defer f.Close()
	st := New()
	sc := bufio.NewScanner(f)
	index := uint64(0)
	for sc.Scan() {
		entry, results, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok)
		data, err := hex.DecodeString(entry)
		require.NoError(t, err)
		require.Equal(t, byte(1), data[0], "a version-1 entry")
		cmds, err := DecodeBatch(data, nil)
		require.NoError(t, err)
		index++
		rs, _ := st.Apply(index, cmds)
		require.Equal(t, results, hex.EncodeToString(AppendResults(nil, rs)), "entry %d applies as it did", index)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, uint64(6), index)

	old, err := os.ReadFile("testdata/snapshot-v2.bin")
	require.NoError(t, err)
	restored, err := DecodeSnapshot(old)
	require.NoError(t, err)
	require.NoError(t, checkInvariants(restored, true))
	require.Equal(t, saveBytes(t, st), saveBytes(t, restored), "the replayed log and the old snapshot agree")
	require.Zero(t, restored.LeaderMark())
	require.Equal(t, "v2", restored.Election("E").Value)
	require.False(t, restored.Lock("L").Held)
}
