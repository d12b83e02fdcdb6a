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

// testdata/log-v2-sessions.txt is a log written by the version-2 codec
// (every kind it had, its close-session without a floor among them), and
// testdata/snapshot-v3-sessions.bin the snapshot version 3 saved after it.
func TestVersion2SessionLogReplays(t *testing.T) {
	st, restored := replayOldLog(t, "testdata/log-v2-sessions.txt", 2, 12, "testdata/snapshot-v3-sessions.bin")
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

// testdata/log-v2.txt is a log written by the version-2 codec (locks with
// queues, try-acquires, an election, a revocation, an operator's end of a
// session, an expiry overruled), one entry a line with the results version
// 2 applied it to; testdata/snapshot-v3.bin is the snapshot (format
// version 3) the same code saved after it. Today's replica must replay the
// log to the same results and restore the old snapshot to the same state.
func TestVersion2LogReplaysAndVersion3SnapshotLoads(t *testing.T) {
	f, err := os.Open("testdata/log-v2.txt")
	require.NoError(t, err)
	defer f.Close()
	h := newHarness(t)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		entry, results, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok)
		data, err := hex.DecodeString(entry)
		require.NoError(t, err)
		require.Equal(t, byte(2), data[0], "a version-2 entry")
		cmds, err := DecodeBatch(data, nil)
		require.NoError(t, err)
		rs, _ := h.apply(cmds...)
		require.Equal(t, results, hex.EncodeToString(AppendResults(nil, rs)), "entry %d applies as it did", h.idx)
	}
	require.NoError(t, sc.Err())
	require.Equal(t, uint64(15), h.idx)

	old, err := os.ReadFile("testdata/snapshot-v3.bin")
	require.NoError(t, err)
	require.Equal(t, byte(3), old[4], "a snapshot of format version 3")
	restored, err := DecodeSnapshot(old)
	require.NoError(t, err)
	require.NoError(t, checkInvariants(restored, true))
	require.NoError(t, checkElectionInvariants(restored))
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, restored), "the replayed log and the old snapshot agree")
	require.Equal(t, viewOf(h.st), viewOf(restored))
	l := restored.Lock("L")
	require.True(t, l.Held)
	require.False(t, l.Shared)
	require.Len(t, l.Holders, 1)
	require.Equal(t, "a", restored.Election("E").Value)
	// The restored state goes on like the replayed one.
	h2 := harnessFor(t, restored)
	more := []Command{{Kind: KindAcquireShared, Session: l.Session, Seq: 100, Name: "M", Wait: true},
		{Kind: KindRevoke, Name: "L"}}
	r1, e1 := h.apply(more...)
	r2, e2 := h2.apply(more...)
	require.Equal(t, r1, r2)
	require.Equal(t, e1, e2)
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, h2.st))
}
