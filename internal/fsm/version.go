package fsm

import (
	"errors"
	"fmt"
)

// The version gate. A group writes the log and snapshot versions its state
// allows (State.Gate), not the newest this build knows: a group whose
// members run builds of different ages (a rolling upgrade) keeps writing
// what every member reads. The gate starts at Baseline, what every build
// since log version 8 reads and what the last build without a gate wrote,
// and only rises: the group's leader proposes KindGate once every voter and
// non-voting member has announced it reads more (internal/replica). So:
//
//   - entries are written at the gate's log version (AppendEntry), and a
//     command whose kind needs a newer one (MinCodec) fails with
//     ErrVersionGated before it is proposed;
//   - snapshots are written at the gate's snapshot version (State.Save);
//   - an entry or a snapshot of a version this build does not read, or a
//     gate it could not honour, is refused with ErrVersionTooNew rather
//     than skipped as corrupt: a replica that skipped it would hold
//     another state than its group's.

// CodecVersion is the newest log entry version this build reads (it reads
// every version from 1 up to it; codec.go lists what each added); it writes
// it once its group's gate has reached it.
func CodecVersion() int { return codecVersion }

// SnapshotVersion is the newest snapshot version this build restores (it
// restores every version from 1 up to it; snapshot.go lists what each
// added); it writes it once its group's gate has reached it.
func SnapshotVersion() int { return snapshotVersion }

// Gate is a pair of versions: the log entry format (Codec) and the
// snapshot format (Snapshot). A group's gate is what it writes; a build's
// (Reads) is what it reads.
type Gate struct{ Codec, Snapshot int }

// Baseline is the gate of a group whose state holds none: a log or
// snapshot written before the gate existed, or a new group. Every build
// that announces what it reads reads it, and a replica that announces
// nothing (a build from before the gate) reads exactly it.
var Baseline = Gate{Codec: 8, Snapshot: 6}

// Reads is what this build reads: CodecVersion and SnapshotVersion.
func Reads() Gate { return Gate{Codec: codecVersion, Snapshot: snapshotVersion} }

// Covers reports whether a replica that reads g reads everything o writes.
func (g Gate) Covers(o Gate) bool { return g.Codec >= o.Codec && g.Snapshot >= o.Snapshot }

// Min returns the versions both g and o read.
func (g Gate) Min(o Gate) Gate {
	return Gate{Codec: min(g.Codec, o.Codec), Snapshot: min(g.Snapshot, o.Snapshot)}
}

// Max returns the newer version of each.
func (g Gate) Max(o Gate) Gate {
	return Gate{Codec: max(g.Codec, o.Codec), Snapshot: max(g.Snapshot, o.Snapshot)}
}

// Valid reports whether a group may write g: no older than Baseline, a
// snapshot version that can hold the gate itself whenever it is above the
// baseline (version 7 is the first that can: a snapshot of version 6
// restores as Baseline, which would lower a raised log version), and one
// that keeps what the log version writes into the state: from log version
// 10, the sessions' parents (snapshot version 8; a replica restoring a
// version 7 snapshot would lose them, and show other views than its
// group's), and from log version 11 the parts' ownership epochs (snapshot
// version 9: a replica that lost them would apply a superseded adopter's
// resume that its group refused).
func (g Gate) Valid() bool {
	if !g.Covers(Baseline) {
		return false
	}
	if g.Codec >= parentCodec && g.Snapshot < parentSnapshot {
		return false
	}
	if g.Codec >= epochCodec && g.Snapshot < epochSnapshot {
		return false
	}
	return g == Baseline || g.Snapshot >= gateSnapshot
}

func (g Gate) String() string {
	return fmt.Sprintf("log version %d, snapshot version %d", g.Codec, g.Snapshot)
}

// gateSnapshot is the first snapshot version that holds the gate.
const gateSnapshot = 7

// ErrVersionGated is returned for a command whose kind needs a newer log
// version than its group writes yet: some member of the group has not
// announced that it reads it (it runs an older build). Nothing was
// proposed. The error names the version needed, the group, and the
// replicas the group waits for; the call succeeds once they are upgraded
// and the group's leader has raised the gate.
var ErrVersionGated = errors.New("fencelock: the group does not write the log version this needs yet")

// ErrVersionTooNew is returned for a log entry or a snapshot of a newer
// version than this build reads, or a group whose state says it writes one:
// this replica cannot follow its group, and must run a newer build.
var ErrVersionTooNew = errors.New("fencelock: written in a newer format than this build reads")

// TooNewError is an ErrVersionTooNew: what was found, and what this build
// reads.
type TooNewError struct {
	// What is "log" or "snapshot"; Version its version, Reads the newest
	// this build reads.
	What           string
	Version, Reads int
}

func (e *TooNewError) Error() string {
	return fmt.Sprintf("%s version %d; this build reads up to %d", e.What, e.Version, e.Reads)
}

// Unwrap makes errors.Is(err, ErrVersionTooNew) true.
func (e *TooNewError) Unwrap() error { return ErrVersionTooNew }

func tooNewLog(v uint64) error {
	return &TooNewError{What: "log", Version: int(min(v, 1<<20)), Reads: codecVersion}
}

func tooNewSnapshot(v uint64) error {
	return &TooNewError{What: "snapshot", Version: int(min(v, 1<<20)), Reads: snapshotVersion}
}
