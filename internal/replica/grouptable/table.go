package grouptable

// A map of the package: the group table (internal/fsm/grouptable.go) as a
// host reaches it, the part of it that needs no field of the host's.
//
//   - table.go: this map, Table (the table's side of one host), and the
//     IDs the table gives: a named group's shard (ShardID, newShardID) and
//     an operation's (NewOpID).
//   - host.go: Host, what the table asks of the host it runs on (answered
//     by internal/replica's host_table.go), and no more.
//   - view.go: View, the table as one linearizable read of the default
//     group found it (Read), and an entry by name (Find).
//   - ops.go: the table's operations: CreateGroup, DropGroup with its
//     drain (the seal, or the older commands below log version 11),
//     SetVoters, ReplaceReplica, GroupTable and Reachable, each waiting
//     until its change is in place as far as this host can see.
//   - voters.go: a group's voters moved to the table's one change at a
//     time on the group's leader (MoveVoters), a new voter promoted once
//     it caught up, an old one removed only when the table, read again,
//     still removes it (TableRemoves).
//
// The host keeps what holds its own state: the watcher that follows the
// table (starting and stopping groups, seeding the table, the mirrors
// that follow it), the groups kept in Dir, and the view last read.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"

	"github.com/fencelock/fencelock/internal/replica/shard"
)

// Table is the group table's side of one host: its operations, made on the
// default group that holds it.
type Table struct{ h Host }

// New returns the table's side of host h.
func New(h Host) *Table { return &Table{h: h} }

// read reads the table linearizably.
func (t *Table) read(ctx context.Context) (View, error) { return Read(ctx, t.h.DefaultGroup()) }

// ShardID is the Dragonboat shard ID of the group called name: 1 for
// the default group (""), a hash of the name for the others, so that every
// replica derives the same one. The root refuses a Config in which two
// groups' IDs collide or a named group's is 0 or 1.
func ShardID(name string) uint64 {
	if name == "" {
		return shard.DefaultShard
	}
	sum := sha256.Sum256([]byte("fencelock group name\n" + name))
	return binary.BigEndian.Uint64(sum[:8])
}

// NewOpID draws an operation ID (fsm.Command.Op): random, never 0.
func NewOpID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24)
		if op := binary.LittleEndian.Uint64(b[:]); op != 0 {
			return op
		}
	}
}

// newShardID draws the shard ID of a group created under name: a hash of
// the name and a random number, so that a group created again under an
// old name gets another shard than its predecessor; never 0 or 1, nor the
// shard the name alone gives (a group of Config.Groups).
func newShardID(name string) uint64 {
	for {
		var nonce [8]byte
		_, _ = rand.Read(nonce[:])
		sum := sha256.Sum256(append([]byte("fencelock created group\n"+name+"\n"), nonce[:]...))
		if id := binary.BigEndian.Uint64(sum[:8]); id > 1 && id != ShardID(name) {
			return id
		}
	}
}
