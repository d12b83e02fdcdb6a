package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// EpochShift places a group's restore epoch in the high bits of its tokens
// and session IDs: the epoch of a token (or a session ID) is token >>
// EpochShift. A group starts in epoch 0 and only a restore from a backup
// raises it (RaiseEpoch), by one each time. Apply does not know of epochs:
// tokens follow the rule of TokenShift, max(previous + 1, index <<
// TokenShift), in every epoch, so they stay index-derived in epoch 0, and in
// a raised epoch e they count up by one from its first token until the log
// index reaches e << 40, where index << TokenShift enters the epoch's range
// (an epoch spans 2^40 log entries). So a restored group's every token is
// above every token an earlier incarnation granted, as long as that one's
// log stayed below the next epoch's range (fewer than 2^40 entries for
// epoch 0: a million a second for 12 days). The epochs end at 127: a token
// is below 1<<63 (see Restore), so a state in epoch 127 can be restored
// from, but not raised again (ErrNoEpochLeft).
const EpochShift = 56

// maxEpoch is the last epoch: (maxEpoch+1)<<EpochShift is 1<<63, a token
// Restore refuses.
const maxEpoch = 1<<(63-EpochShift) - 1

// ErrNoEpochLeft is returned by RaiseEpoch for a state already in the last
// restore epoch (127 restores of restores).
var ErrNoEpochLeft = errors.New("fsm: the state is in the last restore epoch: it cannot be restored again")

// Epoch returns the restore epoch of a token or a session ID.
func Epoch(token uint64) uint64 { return token >> EpochShift }

// NextEpoch returns the epoch a restore of the state starts (RaiseEpoch):
// one above the epoch of its last token and of its last session ID,
// whichever is higher.
func (st *State) NextEpoch() uint64 {
	return max(Epoch(st.lastToken), Epoch(st.lastSession)) + 1
}

// RaiseEpoch returns snapshot, a snapshot written by Save (of any version
// Restore reads), with its last token and last session ID raised to the
// first of the next restore epoch (NextEpoch), so that every token and
// session ID a group restored from it grants is above every one the group
// it was taken from granted or could grant, before or after the snapshot,
// with nothing known of what happened after it. Only those two numbers
// change: the snapshot keeps its version and every other byte, and gets
// its checksum again; the result is a pure function of snapshot, so every
// replica restored from one backup holds the same state. A snapshot
// Restore refuses is refused with its error (ErrCorrupt, ErrVersionTooNew);
// one already in the last epoch with ErrNoEpochLeft.
func RaiseEpoch(snapshot []byte) ([]byte, error) {
	st, err := DecodeSnapshot(snapshot)
	if err != nil {
		return nil, err
	}
	next := st.NextEpoch()
	if next > maxEpoch {
		return nil, fmt.Errorf("%w (last token %d, last session %d)", ErrNoEpochLeft, st.lastToken, st.lastSession)
	}
	// The snapshot decoded, so its head is magic, version, index, last
	// token, last session (uvarints), and its checksum trails it.
	pos := len(snapshotMagic)
	for range 2 { // the version and the index, kept as written
		_, n := binary.Uvarint(snapshot[pos:])
		pos += n
	}
	head := pos
	for range 2 { // the last token and the last session, replaced
		_, n := binary.Uvarint(snapshot[pos:])
		pos += n
	}
	body := snapshot[pos : len(snapshot)-crc32.Size]
	out := make([]byte, 0, len(snapshot)+2*binary.MaxVarintLen64)
	out = append(out, snapshot[:head]...)
	out = binary.AppendUvarint(out, max(st.lastToken, next<<EpochShift))
	out = binary.AppendUvarint(out, max(st.lastSession, next<<EpochShift))
	out = append(out, body...)
	return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(out)), nil
}
