package backup

import (
	"encoding/binary"
	"hash/crc32"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// encodeSnapshotFile is the inverse of StatePayload, for tests (seeds of
// the fuzz target) only: a file as Dragonboat writes one with state as its
// state machine's snapshot, and the payload checksum its metadata carries.
func encodeSnapshotFile(state []byte) (file, checksum []byte) {
	payload := binary.LittleEndian.AppendUint64(nil, 4096)
	payload = binary.LittleEndian.AppendUint64(payload, 0)
	payload = append(payload, state...)
	var blocks []byte
	all := crc32.NewIEEE()
	for len(payload) > 0 {
		d := payload[:min(len(payload), blockSize)]
		payload = payload[len(d):]
		crc := crc32Sum(d)
		all.Write(crc)
		blocks = append(append(blocks, d...), crc...)
	}
	h := pb.SnapshotHeader{PayloadChecksum: all.Sum(nil), ChecksumType: pb.CRC32IEEE, Version: snapshotV2}
	hd, _ := h.Marshal()
	h.HeaderChecksum = crc32Sum(hd)
	hd, _ = h.Marshal()
	file = make([]byte, headerSize)
	binary.LittleEndian.PutUint64(file, uint64(len(hd)))
	copy(file[8:], hd)
	file = append(file, blocks...)
	file = binary.LittleEndian.AppendUint64(file, uint64(len(blocks)))
	return append(file, blockMagic...), h.PayloadChecksum
}
