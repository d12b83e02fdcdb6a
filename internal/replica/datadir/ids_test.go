package datadir

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/lockapi"
)

// The Dir ID file comes from disk: whatever its bytes, decodeIDs returns
// a record that survives being written and read again, or an error, and
// never panics.
func FuzzDecodeDirIDs(f *testing.F) {
	good, _ := json.Marshal(idFile{Version: 1, Self: 7, Known: map[uint64]uint64{2: 9, 3: 11}})
	f.Add(good)
	f.Add([]byte(`{"version":1,"self":1}`))
	f.Add([]byte(`{"version":1,"self":0}`))
	f.Add([]byte(`{"version":2,"self":1}`))
	f.Add([]byte(`{"version":1,"self":1,"known":{"0":1}}`))
	f.Add([]byte(`{"version":1,"self":1,"known":{"2":0}}`))
	f.Add([]byte(`{"version":1,"self":1,"known":{"x":1}}`))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeIDs("f", b)
		if err != nil {
			return
		}
		require.NotZero(t, d.Self)
		for id, dir := range d.Known {
			require.NotZero(t, id)
			require.NotZero(t, dir)
		}
		data, err := json.Marshal(d)
		require.NoError(t, err)
		again, err := decodeIDs("f", data)
		require.NoError(t, err)
		require.Equal(t, len(d.Known), len(again.Known))
		require.Equal(t, d.Self, again.Self)
	})
}

// A Dir's ID is told only once the replica takes part (keep), and is the
// same at the next start.
func TestDirIDIsKeptAndToldOnceKept(t *testing.T) {
	dir := t.TempDir()
	d, err := LoadIDs(dir, 1)
	require.NoError(t, err)
	var h peering.Hello
	d.Hello(&h)
	require.Zero(t, h.Dir, "told before the replica took part")
	_, err = os.Stat(filepath.Join(dir, idFileName))
	require.ErrorIs(t, err, os.ErrNotExist, "written before the replica took part: a failed start would leave it")

	require.NoError(t, d.Keep())
	d.Hello(&h)
	require.NotZero(t, h.Dir)
	require.Equal(t, h.Dir, h.Dirs[1])

	again, err := LoadIDs(dir, 1)
	require.NoError(t, err)
	var h2 peering.Hello
	again.Hello(&h2)
	require.Equal(t, h.Dir, h2.Dir)

	other, err := LoadIDs(t.TempDir(), 1)
	require.NoError(t, err)
	require.NoError(t, other.Keep())
	var h3 peering.Hello
	other.Hello(&h3)
	require.NotEqual(t, h.Dir, h3.Dir, "two Dirs with one ID")
}

// A Dir records the replica ID it serves, and a start under another ID is
// refused in words that name both IDs and the cure (a Dir of another
// deployment said it "belongs to replica 5", the ID it was started with,
// and the start it advised went on to serve, chasing the old deployment's
// voters). A file an older build wrote, without the ID, loads under any ID
// and records it at its next write.
func TestDirServesOneReplicaID(t *testing.T) {
	dir := t.TempDir()
	d, err := LoadIDs(dir, 3)
	require.NoError(t, err)
	require.NoError(t, d.Keep())
	_, err = LoadIDs(dir, 3)
	require.NoError(t, err)
	_, err = LoadIDs(dir, 5)
	require.ErrorIs(t, err, lockapi.ErrInvalidConfig)
	require.ErrorContains(t, err, "is replica 3's, and this start is replica 5")
	require.ErrorContains(t, err, "Start replica 3 with it, or give replica 5 an empty Dir")

	old := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(old, idFileName), []byte(`{"version":1,"self":77}`), 0o600))
	od, err := LoadIDs(old, 5)
	require.NoError(t, err, "a file without the replica ID")
	require.NoError(t, od.write())
	_, err = LoadIDs(old, 6)
	require.ErrorContains(t, err, "is replica 5's", "recorded at the next write")
}

func TestDirIDCheck(t *testing.T) {
	dir := t.TempDir()
	d, err := LoadIDs(dir, 1)
	require.NoError(t, err)
	require.NoError(t, d.Keep())
	var self peering.Hello
	d.Hello(&self)
	var warned []string
	warn := func(msg string) { warned = append(warned, msg) }

	// A peer's Dir ID is recorded, in Dir, at first sight; the same again
	// passes.
	require.NoError(t, d.Check(peering.Hello{Replica: 2, Addr: "b:1", Dir: 20}, warn))
	require.NoError(t, d.Check(peering.Hello{Replica: 2, Addr: "b:1", Dir: 20}, warn))
	on, err := readIDs(filepath.Join(dir, idFileName))
	require.NoError(t, err)
	require.Equal(t, map[uint64]uint64{2: 20}, on.Known)

	// Replica 2 with another Dir is refused, naming the cure.
	err = d.Check(peering.Hello{Replica: 2, Addr: "b:1", Dir: 21}, warn)
	require.ErrorContains(t, err, "is not the replica 2")
	require.ErrorContains(t, err, "RemoveReplica")
	// A replica that has not taken part yet says no Dir ID: nothing to
	// compare.
	require.NoError(t, d.Check(peering.Hello{Replica: 2, Addr: "b:1"}, warn))

	// A peer that knew this replica by another Dir refuses it: so does
	// this replica, with the same words for its own log.
	err = d.Check(peering.Hello{Replica: 3, Addr: "c:1", Dir: 30, Dirs: map[uint64]uint64{1: self.Dir + 1}}, warn)
	require.ErrorContains(t, err, "knew this replica (1) by another Dir")
	require.NoError(t, d.Check(peering.Hello{Replica: 3, Addr: "c:1", Dir: 30, Dirs: map[uint64]uint64{1: self.Dir}}, warn))

	// What a peer has on record reaches this replica: replica 4, never
	// met here, is refused with another Dir than the one 3 saw.
	require.NoError(t, d.Check(peering.Hello{Replica: 3, Addr: "c:1", Dir: 30, Dirs: map[uint64]uint64{4: 40}}, warn))
	require.ErrorContains(t, d.Check(peering.Hello{Replica: 4, Addr: "d:1", Dir: 41}, warn), "is not the replica 4")

	// Two peers that disagree about a third: warned of (once a minute), the
	// record kept, nobody refused for it.
	require.Empty(t, warned)
	require.NoError(t, d.Check(peering.Hello{Replica: 5, Addr: "e:1", Dir: 50, Dirs: map[uint64]uint64{2: 22}}, warn))
	require.NoError(t, d.Check(peering.Hello{Replica: 5, Addr: "e:1", Dir: 50, Dirs: map[uint64]uint64{2: 22}}, warn))
	require.Len(t, warned, 1)
	require.Contains(t, warned[0], "for replica 2")
	require.NoError(t, d.Check(peering.Hello{Replica: 2, Addr: "b:1", Dir: 20}, warn))

	// Told after the changes: the record, and this Dir.
	var h peering.Hello
	d.Hello(&h)
	require.Equal(t, map[uint64]uint64{1: self.Dir, 2: 20, 3: 30, 4: 40, 5: 50}, h.Dirs)
}

// A record that cannot be kept in Dir refuses the peer and is not kept in
// memory either: the next check tries again.
func TestDirIDRecordThatCannotBeWritten(t *testing.T) {
	dir := t.TempDir()
	d, err := LoadIDs(dir, 1)
	require.NoError(t, err)
	require.NoError(t, d.Keep())
	blocker := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(blocker, nil, 0o600))
	d.path = filepath.Join(blocker, idFileName) // its parent is a file
	err = d.Check(peering.Hello{Replica: 2, Addr: "b:1", Dir: 20}, func(string) {})
	require.ErrorContains(t, err, "cannot record replica 2's Dir ID")
	d.path = filepath.Join(dir, idFileName)
	require.NoError(t, d.Check(peering.Hello{Replica: 2, Addr: "b:1", Dir: 21}, func(string) {}),
		"the failed record was kept: 21 was refused")
}

// A corrupt Dir ID file stops the start: the replica must not guess whether
// its Dir is the one its peers knew.
func TestCorruptDirIDFileIsAConfigError(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, idFileName), []byte(`{"version":1,"self":0}`), 0o600))
	_, err := LoadIDs(dir, 1)
	require.ErrorIs(t, err, lockapi.ErrInvalidConfig)
	require.ErrorContains(t, err, "is corrupt")
}
