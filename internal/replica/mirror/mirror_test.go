package mirror

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/groupcore"
	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/transport"
)

// sinkLog records what a Sink is told.
type sinkLog struct {
	restored []uint64 // the restored states' indexes
	applied  []uint64
}

func (s *sinkLog) Applied(index uint64, _ []fsm.Event) { s.applied = append(s.applied, index) }
func (s *sinkLog) Restored(st *fsm.State)              { s.restored = append(s.restored, st.Index()) }
func (s *sinkLog) Removed()                            {}

// groupLog is a group's log of n entries (index i opens a session), and
// the state after each.
func groupLog(t *testing.T, n int) []wire.Entry {
	t.Helper()
	var out []wire.Entry
	for i := 1; i <= n; i++ {
		cmd := fsm.Command{Kind: fsm.KindOpenSession, Nonce: uint64(i), TTL: 10e9}
		if i == 1 {
			cmd = fsm.Command{Kind: fsm.KindLeaderStart, Owner: 1, Term: 1, Nonce: 7}
		}
		out = append(out, wire.Entry{Index: uint64(i), Data: fsm.AppendBatch(nil, []fsm.Command{cmd})})
	}
	return out
}

// snapshotAt is the state after the first n entries, as a stream's
// snapshot brings it.
func snapshotAt(t *testing.T, log []wire.Entry, n int) *fsm.State {
	t.Helper()
	st := fsm.New()
	for _, e := range log[:n] {
		_, _, _, err := fsm.ApplyEntry(st, e.Index, e.Data, nil)
		require.NoError(t, err)
	}
	var b bytes.Buffer
	require.NoError(t, st.Save(&b))
	got, err := fsm.Restore(&b)
	require.NoError(t, err)
	return got
}

// lonelyHost is a host that has read no group table and makes no calls:
// a mirror's voters are its own, and nothing replaces it.
type lonelyHost struct{}

var errLonely = errors.New("this test's host makes no calls")

func (lonelyHost) CallsReady() error { return errLonely }
func (lonelyHost) DialCall(context.Context, string) (transport.CallConn, error) {
	return nil, errLonely
}
func (lonelyHost) TableVoters(string, uint64) ([]uint64, bool) { return nil, false }
func (lonelyHost) MemberAddr(string, uint64) (string, bool)    { return "", false }
func (lonelyHost) MembersRemote(context.Context, string, uint64, []uint64) (wire.Membership, error) {
	return wire.Membership{}, errLonely
}
func (lonelyHost) Replaced(context.Context, *Mirror, error) Group { return nil }
func (lonelyHost) RetireIdle(*Mirror) bool                        { return false }
func (lonelyHost) GoBackground(func()) bool                       { return false }

// testMirror is a mirror of the default group, not running, whose Sink has
// seen the group up to delivered.
func testMirror(sink groupcore.Sink, delivered uint64) *Mirror {
	m := &Mirror{h: lonelyHost{}, delivered: delivered, appliedUp: make(chan struct{})}
	m.Init(slog.New(slog.DiscardHandler), 0, 0, "", 0, sink)
	return m
}

// A mirror whose Sink has seen the group up to index 6 (the shard this
// host ran of it), fed by a server that lags (its snapshot at 3), applies
// quietly until its state is as new, then hands the Sink that state once
// and every entry after it: the Sink never sees the group go back.
func TestMirrorGoesLiveOnlyAtWhatItsSinkSaw(t *testing.T) {
	log := groupLog(t, 9)
	sink := &sinkLog{}
	m := testMirror(sink, 6)
	m.install(snapshotAt(t, log, 3))
	require.Empty(t, sink.restored, "an older state than the Sink saw is not handed to it")
	ok, _ := m.reached(1)
	require.False(t, ok, "no call waits on a state older than what the Sink saw")

	require.NoError(t, m.apply(log[3:5])) // 4, 5
	require.Empty(t, sink.restored)
	require.NoError(t, m.apply(log[4:8])) // 5 (again), 6, 7, 8
	require.Equal(t, []uint64{6}, sink.restored)
	require.Equal(t, []uint64{7, 8}, sink.applied)
	ok, _ = m.reached(8)
	require.True(t, ok)
	require.Equal(t, uint64(8), m.AppliedIndex.Load())
	require.NotZero(t, m.GroupID(), "the group's ID comes with the state")

	// A new stream from a server ahead: its snapshot replaces the state
	// at once.
	m.install(snapshotAt(t, log, 9))
	require.Equal(t, []uint64{6, 9}, sink.restored)
	v, err := m.staleRead(func(st *fsm.State) any { return st.Index() })
	require.NoError(t, err)
	require.Equal(t, uint64(9), v)
}

// A mirror's counters count its own copy of the group's state: the shard's
// copy, which this host does not run, is never asked.
func TestMirrorCountersReadItsOwnState(t *testing.T) {
	log := groupLog(t, 5) // a leader's start, then four sessions opened
	m := testMirror(&sinkLog{}, 0)
	m.install(snapshotAt(t, log, 5))
	require.Equal(t, 4, m.Counters().Sessions)
}
