package gate

import (
	"fmt"

	"testing"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

// screenFake is a host whose group on shard 5 writes the build's log
// version, and whose peer 2 announced it reads one less; peer 3 was not
// heard from.
type screenFake struct{ told []string }

func (f *screenFake) Reads(id uint64) (fsm.Gate, bool) {
	if id == 2 {
		return fsm.Gate{Codec: fsm.CodecVersion() - 1, Snapshot: fsm.SnapshotVersion() - 1}, true
	}
	return fsm.Gate{}, false
}

func (f *screenFake) Writes(shard uint64) (fsm.Gate, bool) {
	if shard == 5 {
		return fsm.Gate{Codec: fsm.CodecVersion(), Snapshot: fsm.SnapshotVersion()}, true
	}
	return fsm.Gate{}, false
}

func (f *screenFake) TooNew(shard, id uint64, _ fsm.Gate, what string) {
	f.told = append(f.told, what)
}

type sentConn struct{ batches []pb.MessageBatch }

func (c *sentConn) Close() {}
func (c *sentConn) SendMessageBatch(b pb.MessageBatch) error {
	c.batches = append(c.batches, b)
	return nil
}

type sentSnapshot struct{ chunks int }

func (c *sentSnapshot) Close()                   {}
func (c *sentSnapshot) SendChunk(pb.Chunk) error { c.chunks++; return nil }

// The screen sends no peer an entry of a newer log version than it
// announced, nor a snapshot of a group that writes a newer snapshot
// version, and tells the host once per message held back; a message
// without entries, and a peer not heard from, pass as they are, and the
// batch Dragonboat handed it is left as it was.
func TestScreenHoldsBackWhatAPeerCannotRead(t *testing.T) {
	host := &screenFake{}
	conn := &sentConn{}
	c := screenedConn{conn, host}
	newer := []pb.Entry{{Type: pb.ApplicationEntry, Cmd: []byte{byte(fsm.CodecVersion()), 1}}}
	batch := pb.MessageBatch{Requests: []pb.Message{
		{To: 2, ShardID: 5},                 // a heartbeat: no entries
		{To: 2, ShardID: 5, Entries: newer}, // held back
		{To: 3, ShardID: 5, Entries: newer}, // not heard from
		{To: 2, ShardID: 5, Entries: []pb.Entry{{Type: pb.ConfigChangeEntry}}},
	}}
	require.NoError(t, c.SendMessageBatch(batch))
	require.Len(t, conn.batches, 1)
	sent := conn.batches[0].Requests
	require.Len(t, sent, 3)
	require.Empty(t, sent[0].Entries)
	require.Equal(t, uint64(3), sent[1].To)
	require.Equal(t, pb.ConfigChangeEntry, sent[2].Entries[0].Type)
	require.Equal(t, []string{fmt.Sprintf("log version %d", fsm.CodecVersion())}, host.told)
	require.Len(t, batch.Requests, 4, "Dragonboat's batch is left as it was")
	require.Equal(t, uint64(2), batch.Requests[1].To)

	require.NoError(t, c.SendMessageBatch(pb.MessageBatch{Requests: []pb.Message{{To: 2, ShardID: 5, Entries: newer}}}))
	require.Len(t, conn.batches, 1, "a batch of nothing readable is not sent")

	snap := &sentSnapshot{}
	sc := screenedSnapshotConn{snap, host}
	require.ErrorIs(t, sc.SendChunk(pb.Chunk{ShardID: 5, ReplicaID: 2}), errSnapshotTooNew)
	require.NoError(t, sc.SendChunk(pb.Chunk{ShardID: 5, ReplicaID: 3}))
	require.NoError(t, sc.SendChunk(pb.Chunk{ShardID: 6, ReplicaID: 2}), "a group this host runs no replica of")
	require.Equal(t, 2, snap.chunks)
}
