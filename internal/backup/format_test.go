package backup

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

// sampleState is a group's state with an ID, a session and a held lock.
func sampleState(t testing.TB, groupID uint64) *fsm.State {
	st := fsm.New()
	st.Apply(3, []fsm.Command{{Kind: fsm.KindLeaderStart, Owner: 1, Nonce: groupID, Term: 2}})
	rs, _ := st.Apply(4, []fsm.Command{{Kind: fsm.KindOpenSession, Nonce: 7, TTL: 1_000_000_000, Owner: 1}})
	st.Apply(5, []fsm.Command{{Kind: fsm.KindAcquire, Session: rs[0].Value, Seq: 1, Name: "jobs/a"}})
	return st
}

// sampleSection is one group's section as Dragonboat would have exported
// it, at raft index index (beyond the state's: no-ops and membership
// entries never reach the state machine).
func sampleSection(t testing.TB, name string, shard uint64, st *fsm.State, index uint64) (Group, Source) {
	var state bytes.Buffer
	require.NoError(t, st.Save(&state))
	file, sum := encodeSnapshotFile(state.Bytes())
	ss := pb.Snapshot{Filepath: "/x/snapshot-" + name + ".gbsnap", FileSize: uint64(len(file)), Index: index, Term: 2,
		Checksum: sum, Type: pb.RegularStateMachine, ShardID: shard,
		Membership: pb.Membership{Addresses: map[uint64]string{1: "a:1", 2: "b:1", 3: "c:1"}}}
	meta, err := ss.Marshal()
	require.NoError(t, err)
	head, err := fsm.PeekSnapshot(bytes.NewReader(state.Bytes()))
	require.NoError(t, err)
	sessions, locks, _ := st.Counts()
	elections, _ := st.ElectionCounts()
	g := GroupOf(ss, meta, head, sessions, locks, elections)
	g.Name, g.Voters = name, ss.Membership.Addresses
	return g, Source{Meta: meta, File: bytes.NewReader(file)}
}

// sampleBackup is a backup of a default group and a named one.
func sampleBackup(t testing.TB) []byte {
	g0, s0 := sampleSection(t, "", 1, sampleState(t, 0xabc), 9)
	g1, s1 := sampleSection(t, "billing", 77, sampleState(t, 0xdef), 6)
	h := Header{DeploymentID: 5, TakenAt: time.Unix(1_800_000_000, 0).UTC(), TakenBy: 2, Groups: []Group{g0, g1}}
	var buf bytes.Buffer
	require.NoError(t, Encode(&buf, h, []Source{s0, s1}))
	return buf.Bytes()
}

func TestBackupRoundTrip(t *testing.T) {
	data := sampleBackup(t)
	b, err := Decode(data)
	require.NoError(t, err)
	require.Equal(t, uint64(5), b.DeploymentID)
	require.Len(t, b.Sections, 2)
	require.Equal(t, "billing", b.Sections[1].Name)
	require.Equal(t, uint64(0xdef), b.Sections[1].State.GroupID())
	require.Equal(t, uint64(6), b.Sections[1].Snapshot.Index)
	require.Equal(t, 1, b.Sections[0].Locks)
	require.Equal(t, "jobs/a", b.Sections[0].State.Lock("jobs/a").Name)
	b2, err := Read(bytes.NewReader(data))
	require.NoError(t, err)
	require.Equal(t, b.Header, b2.Header)
}

// TestCorruptBackupIsRefused: a backup cut short anywhere, with any byte
// changed, or extended is refused with ErrCorrupt, never a panic.
func TestCorruptBackupIsRefused(t *testing.T) {
	data := sampleBackup(t)
	for n := 0; n < len(data); n += max(1, len(data)/997) {
		_, err := Decode(data[:n])
		require.ErrorIs(t, err, ErrCorrupt, "truncated to %d bytes", n)
	}
	for i := 0; i < len(data); i += max(1, len(data)/499) {
		bad := bytes.Clone(data)
		bad[i] ^= 0x20
		_, err := Decode(bad)
		require.ErrorIs(t, err, ErrCorrupt, "byte %d changed", i)
	}
	_, err := Decode(append(bytes.Clone(data), 0))
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = Read(bytes.NewReader(data[:len(data)/2]))
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = Decode([]byte("not a backup at all, just some text that is long enough"))
	require.ErrorIs(t, err, ErrCorrupt)
}

// TestInconsistentBackupIsRefused: a file whose checksum is right but whose
// parts disagree (as a buggy or hostile writer could make) is refused too.
func TestInconsistentBackupIsRefused(t *testing.T) {
	g0, s0 := sampleSection(t, "", 1, sampleState(t, 0xabc), 9)
	encode := func(mut func(*Group)) []byte {
		g := g0
		mut(&g)
		s0.File.(*bytes.Reader).Seek(0, 0)
		var buf bytes.Buffer
		require.NoError(t, Encode(&buf, Header{Groups: []Group{g}}, []Source{s0}))
		return buf.Bytes()
	}
	_, err := Decode(encode(func(*Group) {}))
	require.NoError(t, err)
	for what, mut := range map[string]func(*Group){
		"index":      func(g *Group) { g.Index++ },
		"last token": func(g *Group) { g.LastToken-- },
		"group ID":   func(g *Group) { g.GroupID++ },
		"shard":      func(g *Group) { g.ShardID = 2 },
		"name":       func(g *Group) { g.Name = "Billing" },
	} {
		_, err := Decode(encode(mut))
		require.ErrorIs(t, err, ErrCorrupt, what)
	}
}

// FuzzDecode: Decode never panics, and what it accepts is consistent.
func FuzzDecode(f *testing.F) {
	data := sampleBackup(f)
	f.Add(data)
	f.Add(data[:len(data)/2])
	f.Add(data[:prefixLen+10])
	f.Add([]byte{})
	f.Add(magic[:])
	file, _ := encodeSnapshotFile([]byte("FLSN"))
	f.Add(file)
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error without ErrCorrupt: %v", err)
			}
			return
		}
		for _, s := range b.Sections {
			if s.State == nil || s.Snapshot.Index != s.Index || s.State.GroupID() != s.GroupID {
				t.Fatalf("accepted an inconsistent section: %+v", s.Group)
			}
		}
	})
}

// FuzzStatePayload: a snapshot file is checked without panics.
func FuzzStatePayload(f *testing.F) {
	var state bytes.Buffer
	require.NoError(f, sampleState(f, 1).Save(&state))
	file, sum := encodeSnapshotFile(state.Bytes())
	f.Add(file, sum)
	f.Add(file[:headerSize+3], sum)
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, file, sum []byte) {
		_, err := StatePayload(file, sum)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error without ErrCorrupt: %v", err)
		}
		// A rewrite raising the epoch refuses what StatePayload refuses,
		// and writes what it reads back.
		raised, raisedSum, rerr := RaiseEpoch(file, sum)
		switch {
		case rerr != nil && !errors.Is(rerr, ErrCorrupt) && !errors.Is(rerr, fsm.ErrNoEpochLeft):
			t.Fatalf("RaiseEpoch: error without ErrCorrupt: %v", rerr)
		case err != nil && rerr == nil:
			t.Fatalf("RaiseEpoch rewrote a file StatePayload refuses (%v)", err)
		case rerr == nil:
			if _, err := StatePayload(raised, raisedSum); err != nil {
				t.Fatalf("RaiseEpoch wrote a file StatePayload refuses: %v", err)
			}
		}
	})
}

// TestRaiseEpochRewritesTheFile: the rewritten snapshot file reads back
// (every block's CRC, the header's, the payload checksum the metadata will
// carry) to the raised state, across a file of several 2 MiB blocks; the
// same file rewrites to the same bytes; a damaged file is refused.
func TestRaiseEpochRewritesTheFile(t *testing.T) {
	small := sampleState(t, 0xabc)
	big := sampleState(t, 0xdef)
	var cmds []fsm.Command
	for i := range 40_000 { // sessions named at length: a state over 2 MiB
		cmds = append(cmds, fsm.Command{Kind: fsm.KindOpenSession, Nonce: uint64(1000 + i), TTL: 1_000_000_000, Owner: 1,
			Name: strings.Repeat("s", 128)})
	}
	big.Apply(6, cmds)
	for _, st := range []*fsm.State{small, big} {
		var state bytes.Buffer
		require.NoError(t, st.Save(&state))
		file, sum := encodeSnapshotFile(state.Bytes())
		raised, raisedSum, err := RaiseEpoch(file, sum)
		require.NoError(t, err)
		again, againSum, err := RaiseEpoch(bytes.Clone(file), sum)
		require.NoError(t, err)
		require.Equal(t, raised, again)
		require.Equal(t, raisedSum, againSum)
		require.NotEqual(t, sum, raisedSum)

		payload, err := StatePayload(raised, raisedSum)
		require.NoError(t, err)
		want, err := fsm.RaiseEpoch(state.Bytes())
		require.NoError(t, err)
		require.Equal(t, want, payload)
		got, err := fsm.DecodeSnapshot(payload)
		require.NoError(t, err)
		require.Equal(t, uint64(1), fsm.Epoch(got.LastToken()))
		require.Equal(t, st.GroupID(), got.GroupID())
		require.Equal(t, st.Index(), got.Index())
		if st == big {
			require.Greater(t, len(raised), 2*blockSize, "several blocks")
		}
		_, err = StatePayload(raised, sum)
		require.ErrorIs(t, err, ErrCorrupt, "the old checksum no longer matches")

		bad := bytes.Clone(file)
		bad[headerSize+(len(bad)-headerSize)/3] ^= 1
		_, _, err = RaiseEpoch(bad, sum)
		require.ErrorIs(t, err, ErrCorrupt)
		_, _, err = RaiseEpoch(file, raisedSum)
		require.ErrorIs(t, err, ErrCorrupt)
	}

	// A copy already raised 127 times is intact, and cannot be raised again.
	var state bytes.Buffer
	require.NoError(t, small.Save(&state))
	file, sum := encodeSnapshotFile(state.Bytes())
	for range 127 {
		var err error
		file, sum, err = RaiseEpoch(file, sum)
		require.NoError(t, err)
	}
	_, _, err := RaiseEpoch(file, sum)
	require.ErrorIs(t, err, fsm.ErrNoEpochLeft)
	require.NotErrorIs(t, err, ErrCorrupt)
}

// FuzzDecodeMetadata: a metadata file is checked without panics.
func FuzzDecodeMetadata(f *testing.F) {
	ss := pb.Snapshot{Index: 9, Term: 2, ShardID: 1, Type: pb.RegularStateMachine}
	rec, _ := ss.Marshal()
	f.Add(EncodeMetadata(rec))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, _, err := DecodeMetadata(data); err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error without ErrCorrupt: %v", err)
		}
	})
}
