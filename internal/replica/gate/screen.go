package gate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Screen wraps the host's transport so that no replica of this host
// sends a peer a log entry of a newer version than the peer announced it
// reads in its handshake, nor a snapshot of a group that writes a newer
// snapshot version: the peer could not read it (a build before the gate
// would skip it as corrupt and hold another state than its group's).
//
// The handshake refuses such a peer when a connection opens (checkReads),
// and the gate's raise and a member's addition each check the other
// (raiseGate, addNonVoting); but the two checks race, and a connection
// opened before the raise is not checked again: a member added between
// the leader's read of the membership and its raise would be sent the
// new entries. The screen closes that at the one place every entry passes:
// the message is not sent, raft sends it again later, and the member waits
// (and says nothing) until it runs a build that reads them; the sender
// logs why, at most once a minute per peer and group.
type Screen struct {
	config.TransportFactory
	Host Host
}

// Host is what the screen asks of the host whose transport it wraps.
type Host interface {
	// Reads returns what replica id last announced it reads; false if it
	// was not heard from (the handshake that opens a connection records
	// it, so such a peer is not screened).
	Reads(id uint64) (fsm.Gate, bool)
	// Writes returns the versions the group on shard writes as applied
	// here; false if this host runs no replica of it.
	Writes(shard uint64) (fsm.Gate, bool)
	// TooNew tells that the entries of the group on shard (what: the
	// version held back) are not sent to replica id, which reads reads.
	TooNew(shard, id uint64, reads fsm.Gate, what string)
}

// Create implements config.TransportFactory.
func (f Screen) Create(nhc config.NodeHostConfig, mh raftio.MessageHandler, ch raftio.ChunkHandler) raftio.ITransport {
	return screenedTransport{f.TransportFactory.Create(nhc, mh, ch), f.Host}
}

type screenedTransport struct {
	raftio.ITransport
	h Host
}

func (t screenedTransport) GetConnection(ctx context.Context, target string) (raftio.IConnection, error) {
	c, err := t.ITransport.GetConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return screenedConn{c, t.h}, nil
}

func (t screenedTransport) GetSnapshotConnection(ctx context.Context, target string) (raftio.ISnapshotConnection, error) {
	c, err := t.ITransport.GetSnapshotConnection(ctx, target)
	if err != nil {
		return nil, err
	}
	return screenedSnapshotConn{c, t.h}, nil
}

type screenedConn struct {
	raftio.IConnection
	h Host
}

// SendMessageBatch sends b without the messages whose entries the
// receiver does not read.
func (c screenedConn) SendMessageBatch(b pb.MessageBatch) error {
	keep := -1 // messages kept so far, once one was left out
	for i := range b.Requests {
		m := &b.Requests[i]
		if readable(c.h, m) {
			if keep >= 0 {
				b.Requests[keep] = *m
				keep++
			}
			continue
		}
		if keep < 0 {
			// The batch is Dragonboat's: leave its slice as it was.
			b.Requests = slices.Clone(b.Requests)
			keep = i
		}
	}
	if keep >= 0 {
		b.Requests = b.Requests[:keep]
		if len(b.Requests) == 0 {
			return nil
		}
	}
	return c.IConnection.SendMessageBatch(b)
}

type screenedSnapshotConn struct {
	raftio.ISnapshotConnection
	h Host
}

// errSnapshotTooNew fails a snapshot chunk for a peer that does not read
// the group's snapshots: Dragonboat abandons the stream and tries later.
var errSnapshotTooNew = errors.New("the peer does not read the group's snapshot version")

func (c screenedSnapshotConn) SendChunk(chunk pb.Chunk) error {
	if writes, ok := c.h.Writes(chunk.ShardID); ok {
		if reads, ok := c.h.Reads(chunk.ReplicaID); ok && reads.Snapshot < writes.Snapshot {
			c.h.TooNew(chunk.ShardID, chunk.ReplicaID, reads, fmt.Sprintf("snapshot version %d", writes.Snapshot))
			return errSnapshotTooNew
		}
	}
	return c.ISnapshotConnection.SendChunk(chunk)
}

// readable reports whether m's receiver reads every entry m carries, as
// it announced (a peer not heard from is not screened: the handshake that
// opened the connection records what it reads).
func readable(h Host, m *pb.Message) bool {
	if len(m.Entries) == 0 {
		return true
	}
	reads, ok := h.Reads(m.To)
	if !ok || reads.Codec >= fsm.CodecVersion() {
		return true
	}
	newest := 0
	for i := range m.Entries {
		v, ok := entryVersion(&m.Entries[i])
		if !ok { // not ours to read: take what its group writes
			if writes, ok := h.Writes(m.ShardID); ok {
				v = writes.Codec
			}
		}
		newest = max(newest, v)
	}
	if newest <= reads.Codec {
		return true
	}
	if _, ok := h.Writes(m.ShardID); ok {
		h.TooNew(m.ShardID, m.To, reads, fmt.Sprintf("log version %d", newest))
	}
	return false
}

// entryVersion returns the log version of entry e (the first byte of the
// state machine's payload: fsm's codec), 0 for an entry that carries none
// (a membership change, an empty entry); ok is false for a payload it
// cannot read without decoding (a compressed one: fencelock compresses
// none).
func entryVersion(e *pb.Entry) (v int, ok bool) {
	cmd := e.Cmd
	switch e.Type {
	case pb.ApplicationEntry:
	case pb.EncodedEntry:
		// Dragonboat's header byte: its format version (high 4 bits), the
		// compression (3 bits) and a session flag.
		if len(cmd) == 0 || cmd[0]&0xfe != 0 {
			return 0, false
		}
		cmd = cmd[1:]
	default:
		return 0, true
	}
	if len(cmd) == 0 {
		return 0, true
	}
	return int(cmd[0]), true
}
