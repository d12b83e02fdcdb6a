package replica

import (
	"bytes"
	"crypto/md5"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	_ "unsafe" // dragonboatStreamConnections is linked to Dragonboat's setting

	"github.com/lni/dragonboat/v4/config"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Why one step worker and one log partition. Dragonboat steps the shards
// (our groups) on ExecShards workers, a shard on worker shardID%ExecShards,
// and each worker saves what its shards produced in one batch of one log
// partition (LogDB.Shards pebble stores, each with its own WAL) and syncs
// it. With the defaults (16 and 16) every group of a host lands on a worker
// and a WAL of its own, so G groups cost G fdatasyncs per step where one
// group costs one, and the commands waiting in each group share only their
// own group's fsync: the disk's sync rate is split over the groups (W10 in
// docs/performance.md). With one worker and one partition, a step saves
// every group's entries in one batch and one fdatasync, as one group's
// commands already share one. The cost: the groups' raft steps run on one
// goroutine (their state machines still apply on Dragonboat's apply
// workers), which a process of a few groups on a few cores does not miss.
//
// They are variables only so that a test can make a Dir as a build before
// this choice did (TestingNewDirShards).
var (
	newDirExecShards  atomic.Uint64
	newDirLogDBShards atomic.Uint64
)

func init() {
	newDirExecShards.Store(1)
	newDirLogDBShards.Store(1)
	dragonboatStreamConnections = 1
}

// dragonboatStreamConnections is how many message streams Dragonboat's
// transport keeps to each peer host; a group's messages go on stream
// shardID % count. Dragonboat's default is 4, which splits a step's
// messages for the groups of one host into up to four batches, four send
// goroutines and four connections, each woken and written on its own: with
// many groups that multiplied the hand-offs per command (docs/performance.md,
// W10 round 3) for no gain, since one connection carries a peer's every
// group in one batch per write. One stream per peer, set before any NodeHost
// starts, applies to every NodeHost of the process. It is a soft setting
// that Dragonboat reads only from a file in the working directory, hence
// the link; go.mod pins the version it comes from, and
// TestGroupsShareOneStreamPerPeer fails if it stops taking effect.
// Snapshots are streamed on connections of their own and are not affected.
//
//go:linkname dragonboatStreamConnections github.com/lni/dragonboat/v4.streamConnections
var dragonboatStreamConnections uint64

// flagFile is the file at the top of a Dir in which Dragonboat records the
// settings the Dir was created with.
const flagFile = "dragonboat.ds"

// engineShards returns the step workers and log partitions to start a
// NodeHost on dir with. Both are fixed when Dragonboat first creates the
// Dir and it refuses to open the Dir with others (ErrHardSettingChanged), so
// a Dir that exists keeps what it recorded (Dragonboat's defaults for Dirs
// made before this choice), and only a new Dir gets one of each.
func engineShards(dir string) (exec, logdb uint64) {
	exec, logdb, ok := recordedShards(dir)
	if !ok {
		return newDirExecShards.Load(), newDirLogDBShards.Load()
	}
	return exec, logdb
}

// recordedShards reads the step worker and log partition counts from the
// flag file Dragonboat keeps in dir; ok is false when dir has none (a new
// Dir). A flag file it cannot read, or one that records its settings only
// as a hash (Dragonboat before v3.2), yields Dragonboat's defaults, the
// settings such a Dir was made with unless someone changed them by hand:
// Dragonboat then checks them itself.
func recordedShards(dir string) (exec, logdb uint64, ok bool) {
	defExec, defLogDB := config.GetDefaultEngineConfig().ExecShards, config.GetDefaultLogDBConfig().Shards
	data, err := os.ReadFile(filepath.Join(dir, flagFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, false
	}
	if err != nil {
		return defExec, defLogDB, true
	}
	exec, logdb = decodeFlagFile(data, defExec, defLogDB)
	return exec, logdb, true
}

// decodeFlagFile reads the counts from a flag file's bytes: an 8-byte
// checksum (the second half of the MD5 of the rest), then a
// RaftDataStatus. Bytes that fail the checksum or do not decode, or that
// record no counts, yield the defaults given; it never panics (the file
// comes from disk: FuzzDecodeFlagFile).
func decodeFlagFile(data []byte, defExec, defLogDB uint64) (exec, logdb uint64) {
	s, ok := decodeFlagStatus(data)
	if !ok || s.StepWorkerCount == 0 || s.LogdbShardCount == 0 {
		return defExec, defLogDB
	}
	return s.StepWorkerCount, s.LogdbShardCount
}

// decodeFlagStatus checks a flag file's checksum and decodes the rest; ok
// is false for bytes that fail either. It never panics.
func decodeFlagStatus(data []byte) (s pb.RaftDataStatus, ok bool) {
	if len(data) < 8 {
		return s, false
	}
	sum := md5.Sum(data[8:])
	if !bytes.Equal(data[:8], sum[8:]) || s.Unmarshal(data[8:]) != nil {
		return pb.RaftDataStatus{}, false
	}
	return s, true
}

// recordedAddress returns the raft address Dragonboat recorded in dir's
// flag file when the Dir was first used: it refuses to open the Dir under
// any other. ok is false when dir has no flag file, or one that does not
// decode or records no address.
func recordedAddress(dir string) (addr string, ok bool) {
	data, err := os.ReadFile(filepath.Join(dir, flagFile))
	if err != nil {
		return "", false
	}
	s, ok := decodeFlagStatus(data)
	if !ok || s.Address == "" {
		return "", false
	}
	return s.Address, true
}

// engineConfigs are the NodeHost's engine and log store settings for dir.
func engineConfigs(dir string) (config.EngineConfig, config.LogDBConfig) {
	exec, shards := engineShards(dir)
	ec := config.GetDefaultEngineConfig()
	ec.ExecShards = exec
	lc := config.GetTinyMemLogDBConfig()
	lc.Shards = shards
	return ec, lc
}
