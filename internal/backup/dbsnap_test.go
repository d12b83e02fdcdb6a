package backup

import (
	"encoding/binary"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// encodeSnapshotFile is the inverse of StatePayload, for tests (seeds of
// the fuzz target) only: a file as Dragonboat writes one with state as its
// state machine's snapshot, and the payload checksum its metadata carries.
func encodeSnapshotFile(state []byte) (file, checksum []byte) {
	payload := binary.LittleEndian.AppendUint64(nil, 4096)
	payload = binary.LittleEndian.AppendUint64(payload, 0)
	payload = append(payload, state...)
	return writeSnapshotFile(pb.SnapshotHeader{ChecksumType: pb.CRC32IEEE, Version: snapshotV2}, payload)
}
