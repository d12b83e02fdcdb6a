// Package logstore is the replica's raft log store: Dragonboat's default
// one (pebble, "sharded-pebble" on disk), with one change to when it syncs.
//
// Dragonboat saves a replica's raft state after every step and its pebble
// store syncs every save, including those whose only change is a higher
// commit index. On a W1- or W3-shaped load (one commit after another) that
// is a second fsync per entry on every replica, and the step worker waits
// in it before it can take the next message. Raft does not need the commit
// index on disk: it is volatile state that the leader re-establishes, which
// is why etcd's raft syncs only when entries, the term or the vote change
// (its MustSync). Store does the same: a save that only moves the commit
// index is kept in memory and written with the next save that syncs anyway
// (new entries, a term or vote, a snapshot), and before anything that needs
// it on disk (saving a snapshot record, compacting the log, closing).
//
// What a crash loses is a commit index that was not written: the restarted
// replica replays its log up to the last one that was, and learns the rest
// from the leader, as a follower does that missed a heartbeat. It never
// loses an entry, a term or a vote, and the commit index it finds is never
// below its latest snapshot (the snapshot record is written after the
// commit index that covers it), which Dragonboat checks when it loads.
//
// The on-disk format is the default store's: a Dir written by either opens
// with the other.
package logstore

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	_ "unsafe" // newDefault is linked to Dragonboat's constructor

	_ "github.com/lni/dragonboat/v4" // links in internal/logdb, where newDefault is
	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// Name is the store's name as Dragonboat records it in a Dir: the default
// store's, because the files are the default store's.
const Name = "sharded-pebble"

// ErrBroken is returned by Create when the store's self check finds a log
// written in a format this build cannot read.
var ErrBroken = errors.New("logstore: the raft log in Dir fails its format check")

// Dragonboat's default store is built in its internal/logdb package, which
// it links into every binary but does not export; its Factory type is
// exported only as an interface. go.mod pins the Dragonboat version this
// signature comes from, and TestDefaultStoreLinks opens one.
//
//go:linkname newDefault github.com/lni/dragonboat/v4/internal/logdb.NewDefaultLogDB
func newDefault(cfg config.NodeHostConfig, cb config.LogDBCallback, dirs []string, walDirs []string) (raftio.ILogDB, error)

// Factory makes Stores; set it as NodeHostConfig.Expert.LogDBFactory.
type Factory struct {
	// Opened, if set, is given each Store the factory opens: the replica
	// keeps it to reach the Store's testing knobs (Crash).
	Opened func(*Store)
}

// Create opens the default store on dirs and wraps it.
func (f Factory) Create(cfg config.NodeHostConfig, cb config.LogDBCallback, dirs []string, walDirs []string) (raftio.ILogDB, error) {
	w := newWALSizer(cfg, dirs, walDirs)
	db, err := newDefault(cfg, func(info config.LogDBInfo) {
		w.sizeShard(info.Shard) // a log may have been created
		if cb != nil {
			cb(info)
		}
	}, dirs, walDirs)
	if err != nil {
		return nil, err
	}
	w.sizeAll()
	// NodeHost runs this check itself only on its own default store.
	if c, ok := db.(interface{ SelfCheckFailed() (bool, error) }); ok {
		failed, err := c.SelfCheckFailed()
		if err == nil && failed {
			err = ErrBroken
		}
		if err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	s := Wrap(db)
	if f.Opened != nil {
		f.Opened(s)
	}
	return s, nil
}

// Name is Name.
func (Factory) Name() string { return Name }

// Wrap returns a store that writes through db but defers commit-only saves.
func Wrap(db raftio.ILogDB) *Store {
	return &Store{ILogDB: db, saved: map[node]pb.State{}, held: map[node]heldState{}, last: map[node]uint64{}}
}

// Store is an ILogDB that defers commit-only saves (see the package doc).
// Methods it does not override go straight to the wrapped store.
type Store struct {
	raftio.ILogDB

	// mu serialises every SaveRaftState on the wrapped store: a deferred
	// state is written with a worker's buffers, which must not be in use by
	// that worker at the same time.
	mu    sync.Mutex
	saved map[node]pb.State // the last state written, per replica
	held  map[node]heldState
	// last is, per replica, an upper bound of its log's last index: the
	// highest of what it had when Dragonboat read it at the replica's
	// start, the entries saved since, and its snapshots. It only rises
	// (an overwritten suffix leaves it where it was): it is compared with
	// what the leader says the replica acknowledged (LastIndex).
	// It has a mutex of its own: LastIndex runs on the transport's receive
	// path (every heartbeat), which must never wait for a save's fsync, as
	// it would behind mu.
	lastMu sync.Mutex
	last   map[node]uint64
	stats  Stats
	// crash is a test's knob (Crash); nil in production.
	crash *crash
}

// crash is the state of a crash a test asked for: armed, then dead.
type crash struct {
	die  func()        // the replica's side of the death (its network)
	dead bool          // the process is dead: Close drops what is held
	done chan struct{} // closed when dead
}

type node struct{ shard, replica uint64 }

type heldState struct {
	st     pb.State
	worker uint64 // the SaveRaftState worker argument it came with
}

// Stats counts saves, for tests and benchmarks.
type Stats struct {
	Saves    uint64 // SaveRaftState calls written to the wrapped store
	Deferred uint64 // SaveRaftState calls that only moved commit indexes, kept in memory
	Flushes  uint64 // deferred states written on their own (snapshot, compaction, close)
	Dropped  uint64 // deferred states a Close after Crash dropped
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// commitOnly reports whether ud changes nothing a restart needs: no
// entries, no snapshot, and a state whose term and vote are the ones last
// written. An update without a state or entries writes nothing either way.
func (s *Store) commitOnly(ud pb.Update) bool {
	if len(ud.EntriesToSave) > 0 || !pb.IsEmptySnapshot(ud.Snapshot) {
		return false
	}
	if pb.IsEmptyState(ud.State) {
		return true
	}
	prev, ok := s.saved[node{ud.ShardID, ud.ReplicaID}]
	return ok && prev.Term == ud.State.Term && prev.Vote == ud.State.Vote
}

// SaveRaftState writes updates, deferring them if they only move commit
// indexes; a write carries the deferred states of its shards with it.
func (s *Store) SaveRaftState(updates []pb.Update, worker uint64) error {
	s.lastMu.Lock()
	for _, ud := range updates {
		s.noteLast(ud)
	}
	s.lastMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	deferrable := true
	for _, ud := range updates {
		if !s.commitOnly(ud) {
			deferrable = false
			break
		}
	}
	if deferrable {
		for _, ud := range updates {
			if !pb.IsEmptyState(ud.State) {
				s.held[node{ud.ShardID, ud.ReplicaID}] = heldState{ud.State, worker}
			}
		}
		if len(updates) > 0 {
			s.stats.Deferred++
		}
		s.dieIfArmed()
		return nil
	}
	// The wrapped store writes one batch per call, of one partition (a
	// shard's): deferred states ride along for the shards in this call, and
	// are dropped where this call writes a newer state (commit indexes
	// only rise).
	for _, ud := range updates {
		if !pb.IsEmptyState(ud.State) {
			delete(s.held, node{ud.ShardID, ud.ReplicaID})
		}
	}
	var merged []node
	for n, h := range s.held {
		if slices.ContainsFunc(updates, func(ud pb.Update) bool { return ud.ShardID == n.shard }) {
			if merged == nil {
				updates = append([]pb.Update(nil), updates...)
			}
			updates = append(updates, pb.Update{ShardID: n.shard, ReplicaID: n.replica, State: h.st})
			merged = append(merged, n)
		}
	}
	if err := s.ILogDB.SaveRaftState(updates, worker); err != nil {
		return err
	}
	s.stats.Saves++
	for _, n := range merged {
		delete(s.held, n)
	}
	for _, ud := range updates {
		if !pb.IsEmptyState(ud.State) {
			s.saved[node{ud.ShardID, ud.ReplicaID}] = ud.State
		}
	}
	return nil
}

// flush writes the deferred state of one replica.
func (s *Store) flush(shard, replica uint64) error {
	return s.flushIf(func(n node) bool { return n == node{shard, replica} })
}

func (s *Store) flushIf(match func(node) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, h := range s.held {
		if !match(n) {
			continue
		}
		ud := pb.Update{ShardID: n.shard, ReplicaID: n.replica, State: h.st}
		if err := s.ILogDB.SaveRaftState([]pb.Update{ud}, h.worker); err != nil {
			return fmt.Errorf("logstore: write deferred state of shard %d replica %d: %w", n.shard, n.replica, err)
		}
		s.stats.Flushes++
		s.saved[n] = h.st
		delete(s.held, n)
	}
	return nil
}

// SaveSnapshots writes the deferred states of the snapshots' replicas
// first: Dragonboat refuses to load a commit index below the latest
// snapshot.
func (s *Store) SaveSnapshots(updates []pb.Update) error {
	for _, ud := range updates {
		if err := s.flush(ud.ShardID, ud.ReplicaID); err != nil {
			return err
		}
	}
	return s.ILogDB.SaveSnapshots(updates)
}

// ReadRaftState reads the state as it would be after a clean close.
// Dragonboat calls it when it starts a replica, with the index of the
// replica's latest snapshot as lastIndex: what it returns gives the log's
// last index from which LastIndex starts.
func (s *Store) ReadRaftState(shardID, replicaID, lastIndex uint64) (raftio.RaftState, error) {
	if err := s.flush(shardID, replicaID); err != nil {
		return raftio.RaftState{}, err
	}
	rs, err := s.ILogDB.ReadRaftState(shardID, replicaID, lastIndex)
	if err == nil || errors.Is(err, raftio.ErrNoSavedLog) {
		last := lastIndex
		if err == nil && rs.EntryCount > 0 {
			last = max(last, rs.FirstIndex+rs.EntryCount-1)
		}
		s.lastMu.Lock()
		n := node{shardID, replicaID}
		s.last[n] = max(s.last[n], last)
		s.lastMu.Unlock()
	}
	return rs, err
}

// noteLast raises the replica's LastIndex by what ud saves; s.lastMu is held.
func (s *Store) noteLast(ud pb.Update) {
	n := node{ud.ShardID, ud.ReplicaID}
	cur, ok := s.last[n]
	if !ok {
		return // not read yet: the replica's start sets it
	}
	if k := len(ud.EntriesToSave); k > 0 {
		cur = max(cur, ud.EntriesToSave[k-1].Index)
	}
	s.last[n] = max(cur, ud.Snapshot.Index)
}

// LastIndex returns an upper bound of the last index in the replica's
// log, and false until Dragonboat has read the replica's log at its start.
// An intact log holds every entry its replica acknowledged, so a leader
// that counts an index above it as acknowledged by this replica (a
// heartbeat's commit index is at most what the replica acknowledged) has
// found a log that lost entries: a Dir restored from an older copy of
// itself, or a disk that lost acknowledged writes.
func (s *Store) LastIndex(shardID, replicaID uint64) (uint64, bool) {
	s.lastMu.Lock()
	defer s.lastMu.Unlock()
	last, ok := s.last[node{shardID, replicaID}]
	return last, ok
}

// RemoveEntriesTo writes the replica's deferred state first, so that the
// commit index on disk is never below the first entry left.
func (s *Store) RemoveEntriesTo(shardID, replicaID, index uint64) error {
	if err := s.flush(shardID, replicaID); err != nil {
		return err
	}
	return s.ILogDB.RemoveEntriesTo(shardID, replicaID, index)
}

// CompactEntriesTo writes the replica's deferred state first, as
// RemoveEntriesTo does.
func (s *Store) CompactEntriesTo(shardID, replicaID, index uint64) (<-chan struct{}, error) {
	if err := s.flush(shardID, replicaID); err != nil {
		return nil, err
	}
	return s.ILogDB.CompactEntriesTo(shardID, replicaID, index)
}

// RemoveNodeData forgets the replica's deferred state: its data is gone.
func (s *Store) RemoveNodeData(shardID, replicaID uint64) error {
	s.mu.Lock()
	delete(s.held, node{shardID, replicaID})
	delete(s.saved, node{shardID, replicaID})
	s.mu.Unlock()
	s.lastMu.Lock()
	delete(s.last, node{shardID, replicaID})
	s.lastMu.Unlock()
	return s.ILogDB.RemoveNodeData(shardID, replicaID)
}

// ImportSnapshot writes the replica's deferred state first, then forgets
// what it recorded as the replica's last written state: the import replaces
// the replica's data, its term and vote among them, so a later save whose
// term and vote match the old record must not be taken for commit-only and
// deferred (a vote kept only in memory is a vote a crash can lose).
func (s *Store) ImportSnapshot(ss pb.Snapshot, replicaID uint64) error {
	if err := s.flush(ss.ShardID, replicaID); err != nil {
		return err
	}
	// Forgotten whether or not the import succeeds: after a failed one the
	// state on disk is not known either.
	defer func() {
		s.mu.Lock()
		delete(s.held, node{ss.ShardID, replicaID})
		delete(s.saved, node{ss.ShardID, replicaID})
		s.mu.Unlock()
		s.lastMu.Lock()
		delete(s.last, node{ss.ShardID, replicaID})
		s.lastMu.Unlock()
	}()
	return s.ILogDB.ImportSnapshot(ss, replicaID)
}

// Close writes every deferred state and closes the wrapped store; after
// Crash it drops them instead.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.crash != nil {
		s.dieLocked() // a crash armed and not yet dead dies now
		s.stats.Dropped += uint64(len(s.held))
		clear(s.held)
	}
	s.mu.Unlock()
	return errors.Join(s.flushIf(func(node) bool { return true }), s.ILogDB.Close())
}

// Crash is for tests: it kills the process this store belongs to, as
// SIGKILL or a power loss would, at a moment when it holds a deferred
// commit index. It arms the crash and returns a channel closed when the
// process is dead: at once if a commit-only save is held now, else at the
// next one, or at Close. At death die is called (with the store's lock
// held, so that no save comes in between): it cuts the replica off the
// network, and from then on nothing it does reaches its peers. Close then
// drops the deferred states instead of writing them, so the commit index on
// disk is the last one a sync wrote; everything written before (entries,
// terms, votes, snapshot records) stays, as it was synced when written.
// Between death and Close the store writes on what the replica saves
// without its peers (a leader's own proposals), as a process would in the
// instant before it is killed. Production code never calls it.
func (s *Store) Crash(die func()) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.crash == nil {
		s.crash = &crash{die: die, done: make(chan struct{})}
	}
	if len(s.held) > 0 {
		s.dieLocked()
	}
	return s.crash.done
}

func (s *Store) dieIfArmed() {
	if s.crash != nil && len(s.held) > 0 {
		s.dieLocked()
	}
}

func (s *Store) dieLocked() {
	if s.crash.dead {
		return
	}
	s.crash.dead = true
	if s.crash.die != nil {
		s.crash.die()
	}
	close(s.crash.done)
}
