package logstore

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder stands in for the wrapped store and keeps every state it is
// asked to write, in order.
type recorder struct {
	raftio.ILogDB
	calls   [][]pb.Update
	snaps   int
	imports int
	closed  bool
}

func (r *recorder) SaveRaftState(updates []pb.Update, _ uint64) error {
	r.calls = append(r.calls, append([]pb.Update(nil), updates...))
	return nil
}
func (r *recorder) SaveSnapshots([]pb.Update) error { r.snaps++; return nil }
func (r *recorder) Close() error                    { r.closed = true; return nil }
func (r *recorder) RemoveEntriesTo(uint64, uint64, uint64) error {
	return nil
}
func (r *recorder) ImportSnapshot(pb.Snapshot, uint64) error { r.imports++; return nil }

func (r *recorder) lastCommit(t *testing.T) uint64 {
	t.Helper()
	require.NotEmpty(t, r.calls)
	var c uint64
	for _, ud := range r.calls[len(r.calls)-1] {
		if !pb.IsEmptyState(ud.State) {
			c = ud.State.Commit
		}
	}
	return c
}

func state(term, vote, commit uint64) pb.State {
	return pb.State{Term: term, Vote: vote, Commit: commit}
}

func entries(from, to, term uint64) []pb.Entry {
	var es []pb.Entry
	for i := from; i <= to; i++ {
		es = append(es, pb.Entry{Index: i, Term: term, Cmd: []byte("x")})
	}
	return es
}

// update is a save of replica 2 of shard 1, the replica most tests follow.
func update(st pb.State, es []pb.Entry) []pb.Update {
	return []pb.Update{{ShardID: 1, ReplicaID: 2, State: st, EntriesToSave: es}}
}

func TestCommitOnlySavesAreDeferredUntilTheNextWrite(t *testing.T) {
	r := &recorder{}
	s := Wrap(r)
	save := func(ud pb.Update) {
		t.Helper()
		ud.ShardID, ud.ReplicaID = 1, 2
		require.NoError(t, s.SaveRaftState([]pb.Update{ud}, 1))
	}
	save(pb.Update{State: state(3, 1, 4), EntriesToSave: entries(1, 5, 3)})
	require.Len(t, r.calls, 1)

	save(pb.Update{State: state(3, 1, 5)}) // commit only
	save(pb.Update{})                      // messages only
	require.Len(t, r.calls, 1, "a save that only moves the commit index is not written")
	require.Equal(t, Stats{Saves: 1, Deferred: 2}, s.Stats())

	// The next write that syncs anyway carries the deferred commit index.
	save(pb.Update{EntriesToSave: entries(6, 6, 3)})
	require.Len(t, r.calls, 2)
	require.Equal(t, uint64(5), r.lastCommit(t))

	// A new term or vote is written at once, whatever else changed.
	save(pb.Update{State: state(4, 1, 5)})
	require.Len(t, r.calls, 3)
	save(pb.Update{State: state(4, 3, 5)})
	require.Len(t, r.calls, 4)

	// A write with its own state supersedes the deferred one: only the
	// newer commit index goes to disk.
	save(pb.Update{State: state(4, 3, 6)})
	save(pb.Update{State: state(4, 3, 7), EntriesToSave: entries(7, 7, 4)})
	require.Len(t, r.calls, 5)
	require.Len(t, r.calls[4], 1)
	require.Equal(t, uint64(7), r.lastCommit(t))
}

func TestDeferredStateIsWrittenBeforeSnapshotsCompactionAndClose(t *testing.T) {
	r := &recorder{}
	s := Wrap(r)
	require.NoError(t, s.SaveRaftState(update(state(2, 1, 1), entries(1, 10, 2)), 1))
	require.NoError(t, s.SaveRaftState(update(state(2, 1, 8), nil), 1))
	require.Len(t, r.calls, 1)

	// A snapshot at 8 must find commit ≥ 8 on disk when the replica loads.
	require.NoError(t, s.SaveSnapshots([]pb.Update{{ShardID: 1, ReplicaID: 2, Snapshot: pb.Snapshot{Index: 8, Term: 2}}}))
	require.Len(t, r.calls, 2)
	require.Equal(t, uint64(8), r.lastCommit(t))
	require.Equal(t, 1, r.snaps)

	require.NoError(t, s.SaveRaftState(update(state(2, 1, 9), nil), 1))
	require.NoError(t, s.RemoveEntriesTo(1, 2, 8))
	require.Len(t, r.calls, 3)
	require.Equal(t, uint64(9), r.lastCommit(t))

	// Another replica's deferred state is not written by this one's snapshot.
	require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 5, State: state(2, 1, 1), EntriesToSave: entries(1, 1, 2)}}, 1))
	require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 5, State: state(2, 1, 3)}}, 1))
	require.NoError(t, s.SaveRaftState(update(state(2, 1, 10), nil), 1))
	require.NoError(t, s.SaveSnapshots([]pb.Update{{ShardID: 1, ReplicaID: 2, Snapshot: pb.Snapshot{Index: 10, Term: 2}}}))
	require.Equal(t, uint64(10), r.lastCommit(t))
	require.Equal(t, uint64(2), r.calls[len(r.calls)-1][0].ReplicaID)

	n := len(r.calls)
	require.NoError(t, s.Close())
	require.True(t, r.closed)
	require.Len(t, r.calls, n+1, "close writes what is still deferred")
	require.Equal(t, uint64(3), r.lastCommit(t))
	require.Equal(t, uint64(4), s.Stats().Flushes)
}

// An imported snapshot replaces the replica's state on disk (an operator's
// restore writes term and commit afresh, with no vote), so the record of
// the last state written is void: the next save is written even if its term
// and vote match that record, or a vote would live in memory only.
func TestImportSnapshotForgetsTheLastSavedState(t *testing.T) {
	r := &recorder{}
	s := Wrap(r)
	require.NoError(t, s.SaveRaftState(update(state(5, 3, 1), entries(1, 4, 5)), 1))
	require.NoError(t, s.SaveRaftState(update(state(5, 3, 4), nil), 1))
	require.Len(t, r.calls, 1, "commit-only: deferred")

	require.NoError(t, s.ImportSnapshot(pb.Snapshot{ShardID: 1, Index: 20, Term: 5}, 2))
	require.Equal(t, 1, r.imports)
	require.Len(t, r.calls, 2, "the deferred state is written before the import")

	// Term 5, vote 3 again: the same as the last save before the import,
	// but not what the import left on disk.
	require.NoError(t, s.SaveRaftState(update(state(5, 3, 20), nil), 1))
	require.Len(t, r.calls, 3, "the first save after an import is written")
	require.Equal(t, uint64(20), r.lastCommit(t))
	require.NoError(t, s.Close())
	require.Len(t, r.calls, 3, "nothing was left deferred")
}

// The real default store, through the factory NodeHost uses: what a crash
// loses is the deferred commit index and nothing else, and a clean close
// loses nothing.
func TestDefaultStoreLinks(t *testing.T) {
	dir := t.TempDir()
	cfg := config.NodeHostConfig{NodeHostDir: dir, Expert: config.ExpertConfig{LogDB: config.GetTinyMemLogDBConfig()}}
	require.NoError(t, cfg.Prepare())
	open := func() *Store {
		t.Helper()
		db, err := Factory{}.Create(cfg, func(config.LogDBInfo) {}, []string{dir}, []string{dir})
		require.NoError(t, err)
		return db.(*Store)
	}
	require.Equal(t, Name, Factory{}.Name())

	s := open()
	require.Equal(t, "sharded-pebble", s.Name()) // what Dragonboat records in Dir
	require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 1, State: state(5, 1, 3), EntriesToSave: entries(1, 6, 5)}}, 1))
	require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 1, State: state(5, 1, 6)}}, 1))
	require.Equal(t, uint64(1), s.Stats().Deferred)
	// A crash: Close after Crash drops the deferred state.
	select {
	case <-s.Crash(nil):
	default:
		t.Fatal("a store that holds a deferred state dies at once")
	}
	require.NoError(t, s.Close())
	require.Zero(t, s.Stats().Flushes, "a crash writes nothing that was deferred")
	require.Equal(t, uint64(1), s.Stats().Dropped)

	s = open()
	rs, err := s.ReadRaftState(1, 1, 0)
	require.NoError(t, err)
	require.Equal(t, state(5, 1, 3), rs.State, "the crash lost the deferred commit index, not the term, vote or entries")
	require.Equal(t, uint64(6), rs.EntryCount)
	got, _, err := s.IterateEntries(nil, 0, 1, 1, 1, 7, 1<<20)
	require.NoError(t, err)
	require.Len(t, got, 6)

	// The same again, closed cleanly: the deferred commit index is written.
	require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 1, State: state(5, 1, 3), EntriesToSave: entries(7, 7, 5)}}, 1))
	require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 1, State: state(5, 1, 7)}}, 1))
	require.Equal(t, uint64(1), s.Stats().Deferred)
	require.NoError(t, s.Close())
	require.Equal(t, uint64(1), s.Stats().Flushes)
	s = open()
	rs, err = s.ReadRaftState(1, 1, 0)
	require.NoError(t, err)
	require.Equal(t, state(5, 1, 7), rs.State, "a clean close writes the deferred commit index")
	require.NoError(t, s.Close())
}

// Crash kills the process when a commit-only save is held (at once, or at
// the next), and Close then drops what is held; what the process saves
// before it is killed is written.
func TestCrashDiesWithADeferredStateAndCloseDropsIt(t *testing.T) {
	r := &recorder{}
	s := Wrap(r)
	save := func(replica uint64, st pb.State, es []pb.Entry) {
		t.Helper()
		require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: replica, State: st, EntriesToSave: es}}, 1))
	}
	dead := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	save(2, state(2, 1, 1), entries(1, 4, 2))
	died := 0
	ch := s.Crash(func() { died++ })
	require.False(t, dead(ch), "nothing is deferred: armed, not dead")
	save(2, state(2, 1, 2), entries(5, 5, 2))
	require.False(t, dead(ch))
	require.Len(t, r.calls, 2)

	save(2, state(2, 1, 4), nil) // deferred: the process dies with it
	require.True(t, dead(ch))
	require.Equal(t, 1, died)
	require.Equal(t, ch, s.Crash(nil), "Crash again is the same crash")

	save(2, state(2, 1, 5), nil) // deferred too, and lost
	require.NoError(t, s.Close())
	require.True(t, r.closed)
	require.Len(t, r.calls, 2, "a crash writes nothing that was deferred")
	require.Equal(t, uint64(2), r.lastCommit(t))
	require.Equal(t, Stats{Saves: 2, Deferred: 2, Dropped: 1}, s.Stats())
	require.Equal(t, 1, died)
}

// A crash armed when the store closes dies then, and drops nothing it did
// not hold.
func TestCrashArmedAtCloseDiesThere(t *testing.T) {
	r := &recorder{}
	s := Wrap(r)
	require.NoError(t, s.SaveRaftState(update(state(2, 1, 1), entries(1, 1, 2)), 1))
	died := false
	ch := s.Crash(func() { died = true })
	require.NoError(t, s.Close())
	<-ch
	require.True(t, died)
	require.Equal(t, Stats{Saves: 1}, s.Stats())
}

// A new write-ahead log is extended to the size pebble preallocates for it,
// at the store's open and when pebble rotates to a new one, so a sync of an
// entry does not also commit a new file size. The store reads back what it
// wrote after a clean close, and from a crash image: the files as they are
// on disk while the store runs, whose last log ends in zeroes, with no EOF
// trailer.
func TestLogsAreCreatedAtTheirSize(t *testing.T) {
	cfg := config.NodeHostConfig{Expert: config.ExpertConfig{LogDB: config.GetTinyMemLogDBConfig()}}
	require.NoError(t, cfg.Prepare())
	want := int64(cfg.Expert.LogDB.KVWriteBufferSize) * 11 / 10
	open := func(dir string) *Store {
		t.Helper()
		db, err := Factory{}.Create(cfg, func(config.LogDBInfo) {}, []string{dir}, []string{dir})
		require.NoError(t, err)
		return db.(*Store)
	}
	logs := func(dir string) map[string]int64 {
		t.Helper()
		sizes := map[string]int64{}
		require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && isWAL(p) {
				fi, err := d.Info()
				if err != nil {
					return err
				}
				sizes[filepath.Base(p)] = fi.Size()
			}
			return err
		}))
		return sizes
	}
	read := func(s *Store, n int) {
		t.Helper()
		got, _, err := s.IterateEntries(nil, 0, 1, 1, 1, uint64(n+1), 1<<30)
		require.NoError(t, err)
		require.Len(t, got, n)
		for i, e := range got {
			require.Equal(t, uint64(i+1), e.Index)
		}
	}

	dir := t.TempDir()
	s := open(dir)
	require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 1, State: state(5, 1, 3), EntriesToSave: entries(1, 6, 5)}}, 1))
	first := logs(dir)
	require.Len(t, first, 1)
	for name, n := range first {
		require.Equal(t, want, n, "%s", name)
	}
	require.NoError(t, s.Close())
	s = open(dir)
	read(s, 6)

	// Past a memtable of entries pebble rotates its log: the new one is
	// sized too, on Dragonboat's callback.
	index := uint64(7)
	big := make([]byte, 64<<10)
	for len(logs(dir)) < 2 || index < 100 {
		require.Less(t, index, uint64(10_000), "pebble never rotated its log")
		es := entries(index, index+7, 5)
		for i := range es {
			es[i].Cmd = big
		}
		require.NoError(t, s.SaveRaftState([]pb.Update{{ShardID: 1, ReplicaID: 1, State: state(5, 1, 3), EntriesToSave: es}}, 1))
		index += 8
	}
	require.Eventually(t, func() bool {
		for name, n := range logs(dir) {
			if _, old := first[name]; !old && n >= want {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the log pebble rotated to is sized: %v", logs(dir))

	// The crash image, taken while the store runs.
	image := t.TempDir()
	require.NoError(t, os.CopyFS(image, os.DirFS(dir)))
	require.NoError(t, s.Close())
	s = open(image)
	read(s, int(index-1))
	require.NoError(t, s.Close())
}

func TestIsWAL(t *testing.T) {
	for name, want := range map[string]bool{
		"/d/000002.log": true, "000123.log": true, ".log": false, "/d/LOG": false,
		"/d/a1.log": false, "/d/000002.sst": false, "/d/MANIFEST-000001": false,
	} {
		require.Equal(t, want, isWAL(name), name)
	}
}
