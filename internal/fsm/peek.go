package fsm

import (
	"io"
)

// SnapshotHead is what the first fields of a snapshot say: enough to name a
// state in a backup's header without restoring it.
type SnapshotHead struct {
	Version   uint64
	Index     uint64 // the last applied entry's index
	LastToken uint64 // the last token granted
	GroupID   uint64 // 0 in versions before 3, and before the first LeaderStart
}

// PeekSnapshot reads the first fields of a snapshot written by Save (any
// version Restore reads), without the rest: a backup names the state it
// holds without a second copy of a large state in memory. It checks only
// what it reads (not the checksum, which trails the snapshot): a stream
// that is not a snapshot, or is cut short there, is an error wrapping
// ErrCorrupt, and one of a version this build does not restore wraps
// ErrVersionTooNew.
func PeekSnapshot(r io.Reader) (SnapshotHead, error) {
	d := newSnapDecoder(r)
	v, err := d.head()
	if err != nil {
		return SnapshotHead{}, err
	}
	h := SnapshotHead{Version: v}
	h.Index, h.LastToken, _ = d.uvarint(), d.uvarint(), d.uvarint()
	if h.Version >= 2 {
		d.uvarint() // grants
	}
	if h.Version >= 3 {
		d.uvarint() // leaderMark
		h.GroupID = d.uvarint()
	}
	if d.err != nil {
		return SnapshotHead{}, d.err
	}
	return h, nil
}
