package fsm

// This is the only file that binds the state machine to Dragonboat.
//
// It implements the plain sm.IStateMachine: Dragonboat serialises Update,
// Lookup and snapshots, which is exactly what an in-memory lock table needs.
// The concurrent variant would only pay off if reads contended with writes,
// and the on-disk variant cannot have snapshots of an in-memory table.

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	sm "github.com/lni/dragonboat/v4/statemachine"
)

// Observer learns what its replica applies. Dragonboat calls it on the
// replica's apply goroutine, so it must not block, and it must not keep the
// events or the state past the call.
type Observer interface {
	// Applied reports the commands and the events of the entry at index.
	// It is called for every entry that decodes, with or without events; a
	// corrupt entry changes nothing and is not reported.
	Applied(index uint64, cmds []Command, events []Event)
	// Restored reports that a snapshot replaced the whole state: events of
	// the entries it covered were never reported.
	Restored(st *State)
}

// Query reads the state. Passed to Dragonboat's SyncRead, it runs on the
// replica once it has applied everything committed before the read began.
type Query func(st *State) any

// CorruptEntry is the Result.Value of an entry that did not decode. Every
// replica sees the same bytes and skips the entry alike. An entry of a
// version this build does not read is not corrupt, and is not skipped:
// see Update.
const CorruptEntry = ^uint64(0)

// TooNewObserver may be implemented by an Observer to learn that its
// replica met an entry or a snapshot of a version this build does not read
// (ErrVersionTooNew), just before the replica stops on it: the observer
// can say so in its own words, and keep a record that refuses the next
// start before the log is replayed to it again.
type TooNewObserver interface {
	TooNew(index uint64, err error)
}

// ErrBadQuery is returned for a Lookup that is not a Query.
var ErrBadQuery = errors.New("fsm: lookup is not a fsm.Query")

// errNoState is what a machine whose snapshot failed to restore answers to
// everything (see RecoverFromSnapshot).
var errNoState = errors.New("fsm: no state: a snapshot failed to restore")

// NewStateMachine returns the Dragonboat factory of the lock state machine;
// obs may be nil.
func NewStateMachine(obs Observer) sm.CreateStateMachineFunc {
	return func(shardID, replicaID uint64) sm.IStateMachine {
		return &machine{st: New(), obs: obs}
	}
}

type machine struct {
	st   *State
	obs  Observer
	cmds []Command
	// size is the encoded size of the state at its last snapshot, saved or
	// restored: what RecoverFromSnapshot weighs a collection by.
	size int64
}

// collectAbove is the encoded size of state from which RecoverFromSnapshot
// collects the old state before it reads the new one (a variable for
// tests). A state holds several times its encoded size in memory
// (docs/performance.md, W6).
var collectAbove int64 = 1 << 20

func (m *machine) Update(e sm.Entry) (sm.Result, error) {
	if m.st == nil {
		return sm.Result{}, errNoState
	}
	cmds, results, events, err := ApplyEntry(m.st, e.Index, e.Cmd, m.cmds[:0])
	m.cmds = cmds[:0]
	if errors.Is(err, ErrVersionTooNew) {
		// The group writes what this build cannot read: applying the
		// entries after it would give this replica another state than
		// its group's, so it stops here. Dragonboat stops the replica
		// (its process) on an error from Update, and the entry stays
		// unapplied for a build that reads it.
		err = fmt.Errorf("entry %d: %w", e.Index, err)
		if o, ok := m.obs.(TooNewObserver); ok {
			o.TooNew(e.Index, err)
		}
		return sm.Result{}, err
	}
	if o, ok := m.obs.(EntryObserver); ok {
		o.Entry(e.Index, e.Cmd)
	}
	if err != nil {
		return sm.Result{Value: CorruptEntry}, nil
	}
	if m.obs != nil {
		m.obs.Applied(e.Index, cmds, events)
	}
	data := AppendResults(make([]byte, 0, 1+3*len(results)), results)
	return sm.Result{Value: uint64(len(results)), Data: data}, nil
}

// ApplyEntry applies the raft entry at index, whose bytes are data, to st,
// exactly as a replica's state machine does: a copy of a group's state fed
// the group's entries in order (a mirror, internal/replica) stays equal to
// the group's. It returns the decoded commands (appended to dst), their
// results and events (both reused by st's next call), and an error: one
// wrapping ErrVersionTooNew leaves st unchanged (the entry must not be
// applied by this build), any other (a corrupt entry) only moves st's index
// to index, as every replica skips such an entry alike.
func ApplyEntry(st *State, index uint64, data []byte, dst []Command) ([]Command, []Result, []Event, error) {
	cmds, err := DecodeBatch(data, dst)
	if errors.Is(err, ErrVersionTooNew) {
		return cmds, nil, nil, err
	}
	if err != nil {
		st.index = index
		return cmds, nil, nil, err
	}
	results, events := st.Apply(index, cmds)
	return cmds, results, events, nil
}

// EntryObserver may be implemented by an Observer to learn the bytes of
// every entry its replica applies (corrupt ones included, after the state
// took them, before Applied): what a copy of the state fed by ApplyEntry
// needs. data is valid only during the call.
type EntryObserver interface {
	Entry(index uint64, data []byte)
}

func (m *machine) Lookup(q any) (any, error) {
	if m.st == nil {
		return nil, errNoState
	}
	if f, ok := q.(Query); ok {
		return f(m.st), nil
	}
	return nil, ErrBadQuery
}

func (m *machine) SaveSnapshot(w io.Writer, _ sm.ISnapshotFileCollection, _ <-chan struct{}) error {
	if m.st == nil {
		return errNoState
	}
	start := time.Now()
	cw := &countingWriter{w: w}
	if err := m.st.Save(cw); err != nil {
		return err
	}
	m.size = cw.n
	if so, ok := m.obs.(SnapshotObserver); ok {
		so.SnapshotSaved(m.st.index, cw.n, time.Since(start))
	}
	return nil
}

// SnapshotObserver may be implemented by an Observer to learn of the
// snapshots its replica writes and restores, and how long they take
// (Dragonboat's own events carry neither the index nor the time). The time
// is measured here, in the adapter, and never enters the state.
type SnapshotObserver interface {
	SnapshotSaved(index uint64, bytes int64, took time.Duration)
	SnapshotRestored(index uint64, took time.Duration)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (m *machine) RecoverFromSnapshot(r io.Reader, _ []sm.SnapshotFile, _ <-chan struct{}) error {
	start := time.Now()
	// The old state goes before the new one is built, so that the garbage
	// collector can free it as the snapshot is read: a replica restoring a
	// large snapshot needs room for one state, not two. Nothing reads it
	// meanwhile (Dragonboat serialises recovery with updates and lookups),
	// and the observer keeps nothing of it past its calls.
	//
	// If the snapshot does not restore, the replica is left with no state
	// at all, on purpose. Dragonboat treats the error as fatal (it panics:
	// only ErrSnapshotStopped and ErrSnapshotOutOfDate abort a recovery,
	// and Restore returns neither), and rightly: the log before the
	// snapshot is compacted, so the old state can never catch up with the
	// group again. Were the replica to go on anyway, it answers every
	// update, lookup and snapshot with errNoState (an error Dragonboat also
	// stops on), where an empty state would answer that held locks are free
	// and apply entries to the wrong table, and keeping the old one would
	// cost the memory this is here to save.
	m.st = nil
	// Dropping it is not enough: the collector paces itself on the heap it
	// last found live, the old state included, and would let the new one
	// grow next to the old one's garbage before it looks again. One
	// collection now frees a large old state for the new one to reuse, and
	// paces the next ones on what is really left.
	//
	// Only a large one: a collection costs in proportion to everything the
	// process keeps live (an application's own heap, other groups), not to
	// this state, and blocks the recovery meanwhile. A follower that
	// recovers slower than its leader compacts its log needs the next
	// snapshot as soon as it is done, and the one after that, and grants
	// nothing while it recovers; that is where a small state's memory is
	// better spent than its recovery's time.
	if m.size >= collectAbove {
		runtime.GC()
	}
	cr := &countingReader{r: r}
	st, err := Restore(cr)
	if err != nil {
		if o, ok := m.obs.(TooNewObserver); ok && errors.Is(err, ErrVersionTooNew) {
			o.TooNew(0, err)
		}
		return err
	}
	if so, ok := m.obs.(SnapshotObserver); ok {
		so.SnapshotRestored(st.index, time.Since(start))
	}
	m.st, m.size = st, cr.n
	if m.obs != nil {
		m.obs.Restored(st)
	}
	return nil
}

func (m *machine) Close() error { return nil }
