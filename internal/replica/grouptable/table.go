// Package grouptable is the group table (internal/fsm/grouptable.go) as a
// host follows and changes it: which named groups the deployment runs,
// with their voters, kept in the default group's state. It imports
// nothing of internal/replica: it reaches its host only through Host
// (answered by internal/replica's host_table.go), and the host reaches it
// through Table's exported methods.
//
// A map of the package:
//
//   - table.go: this map; Table, the table's side of one host (the table
//     as last read here, Entry and Current, whether the host follows it
//     yet, Changed to wake the watcher); the IDs the table gives: a named
//     group's shard (ShardID, newShardID) and an operation's (NewOpID).
//   - host.go: Host, what the table asks of the host it runs on, and no
//     more: its shards, starting and stopping one (the host keeps its set
//     of groups, their Dir records and the mirrors that take over), its
//     mirrors to follow the table, its logger and the config values the
//     table needs.
//   - view.go: View, the table as one linearizable read of the default
//     group found it (Read), and an entry by name (Find).
//   - watch.go: the watcher (Watch): it follows the table, starting the
//     groups the host does not run yet and stopping those the table
//     dropped or moved off it, seeds the table from Config.Groups until
//     it is set, and logs how Config.Groups differs from it.
//   - ops.go: the table's operations: CreateGroup, DropGroup with its
//     drain (the seal, or the older commands below log version 11),
//     SetVoters, ReplaceReplica, GroupTable and Reachable, each waiting
//     until its change is in place as far as this host can see.
//   - voters.go: a group's voters moved to the table's one change at a
//     time on the group's leader (MoveVoters), a new voter promoted once
//     it caught up, an old one removed only when the table, read again,
//     still removes it (TableRemoves).
package grouptable

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/shard"
)

// Table is the group table's side of one host: the table as last read
// here, the watcher that follows it, and its operations, made on the
// default group that holds it.
type Table struct {
	h     Host
	cur   atomic.Pointer[View] // as last read; nil before the first read
	mode  atomic.Bool          // the Dir's groups follow the table
	nudge chan struct{}        // a table command applied, or a snapshot restored

	mu       sync.Mutex
	diff     string // the Config.Groups difference last logged
	seedDone bool   // this host's seed was answered (or is not needed)
	seedOp   uint64 // the seed's operation ID, kept across its retries
}

// New returns the table's side of host h; mode is whether h's Dir says its
// groups follow the table already.
func New(h Host, mode bool) *Table {
	t := &Table{h: h, nudge: make(chan struct{}, 1)}
	t.mode.Store(mode)
	return t
}

// Changed wakes the watcher; it runs on the default group's apply
// goroutine and never blocks.
func (t *Table) Changed() {
	select {
	case t.nudge <- struct{}{}:
	default:
	}
}

// Group is a group as the table finds its entry: by name, on its shard.
type Group interface {
	Name() string
	ShardID() uint64
}

// Entry returns the table's entry for g's group, if the table is set and
// has g's group on g's shard.
func (t *Table) Entry(g Group) (fsm.GroupEntry, bool) {
	v := t.cur.Load()
	if v == nil || !v.Set {
		return fsm.GroupEntry{}, false
	}
	e, ok := v.Find(g.Name())
	return e, ok && e.Shard == g.ShardID()
}

// Current is the table as last read here; nil before the first read.
func (t *Table) Current() *View { return t.cur.Load() }

// FollowsTable reports whether this host runs the group table's groups
// (it has seen the table set), rather than its Config.Groups.
func (t *Table) FollowsTable() bool { return t.mode.Load() }

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
