package replica

import (
	"crypto/md5"
	"os"
	"path/filepath"
	"testing"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"
)

func flagBytes(t testing.TB, s pb.RaftDataStatus) []byte {
	b, err := s.Marshal()
	require.NoError(t, err)
	sum := md5.Sum(b)
	return append(append([]byte{}, sum[8:]...), b...)
}

// The flag file comes from disk: whatever its bytes, decodeFlagFile
// returns counts that are not zero and never panics; good bytes give what
// they record, anything else the defaults.
func FuzzDecodeFlagFile(f *testing.F) {
	good := flagBytes(f, pb.RaftDataStatus{StepWorkerCount: 16, LogdbShardCount: 16, LogdbType: "sharded-pebble"})
	f.Add(good)
	f.Add(flagBytes(f, pb.RaftDataStatus{StepWorkerCount: 1, LogdbShardCount: 1}))
	f.Add(flagBytes(f, pb.RaftDataStatus{HardHash: 42}))
	f.Add(good[:7])
	f.Add(append([]byte{0}, good[1:]...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, l := decodeFlagFile(b, 16, 16)
		require.NotZero(t, e)
		require.NotZero(t, l)
	})
}

func TestDecodeFlagFile(t *testing.T) {
	e, l := decodeFlagFile(flagBytes(t, pb.RaftDataStatus{StepWorkerCount: 4, LogdbShardCount: 2}), 16, 16)
	require.Equal(t, [2]uint64{4, 2}, [2]uint64{e, l}, "the recorded counts")
	b := flagBytes(t, pb.RaftDataStatus{StepWorkerCount: 4, LogdbShardCount: 2})
	b[len(b)-1] ^= 1
	e, l = decodeFlagFile(b, 16, 16)
	require.Equal(t, [2]uint64{16, 16}, [2]uint64{e, l}, "a checksum that fails gives the defaults")
	e, l = decodeFlagFile(flagBytes(t, pb.RaftDataStatus{HardHash: 7}), 16, 16)
	require.Equal(t, [2]uint64{16, 16}, [2]uint64{e, l}, "a Dir that records only a hash gives the defaults")
}

// A new Dir gets one step worker and one log partition; a Dir that records
// others keeps them.
func TestEngineShards(t *testing.T) {
	dir := t.TempDir()
	e, l := engineShards(dir)
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{e, l})
	require.NoError(t, os.WriteFile(filepath.Join(dir, flagFile), flagBytes(t, pb.RaftDataStatus{StepWorkerCount: 16, LogdbShardCount: 16}), 0o644))
	e, l = engineShards(dir)
	require.Equal(t, [2]uint64{16, 16}, [2]uint64{e, l})
}
