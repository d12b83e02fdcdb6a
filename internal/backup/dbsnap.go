package backup

import (
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	pb "github.com/lni/dragonboat/v4/raftpb"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Dragonboat's snapshot files, as far as a backup needs them. A group's
// backup is the snapshot Dragonboat exports (SyncRequestSnapshot with
// Exported), because tools.ImportSnapshot, the supported way to seed a
// shard with a state at a given log index, takes exactly that. Dragonboat
// panics on a malformed snapshot file or metadata record (its readers assume
// files it wrote itself), so every byte of both is checked here before a
// restore hands them to it: the layout below is Dragonboat's (internal/rsm,
// snapshot format V2, pinned by go.mod), read without its code.
//
//	file     = header:1024 bytes  block*  tail:16 bytes
//	header   = length:8 (little endian)  SnapshotHeader (protobuf)  padding
//	block    = data (2 MiB, the last one shorter)  crc32:4 (IEEE, of data)
//	tail     = total:8 (little endian, the bytes of the blocks)  magic:8
//	payload  = the blocks' data: Dragonboat's client sessions, then the
//	           state machine's own snapshot (fsm.State.Save)
//
// The metadata record (snapshot.metadata) is a flag file: the second half
// of the MD5 of the rest, then a raftpb.Snapshot.

const (
	headerSize = 1024
	tailSize   = 16
	blockSize  = 2 << 20
	crcSize    = 4
	// snapshotV2 is the only snapshot file version Dragonboat writes.
	snapshotV2 = 2
	// MetadataFile and fileSuffix name the files of an exported snapshot.
	MetadataFile = "snapshot.metadata"
	fileSuffix   = ".gbsnap"
)

var blockMagic = []byte{0x3F, 0x5B, 0xCB, 0xF1, 0xFA, 0xBA, 0x81, 0x9F}

// flagHash is Dragonboat's checksum of a flag file's content.
func flagHash(data []byte) []byte {
	s := md5.Sum(data)
	return s[8:]
}

// DecodeMetadata decodes an exported snapshot's metadata file (a flag
// file) into its protobuf bytes and record. Anything else is an error
// wrapping ErrCorrupt.
func DecodeMetadata(file []byte) ([]byte, pb.Snapshot, error) {
	if len(file) < 8 || !bytes.Equal(file[:8], flagHash(file[8:])) {
		return nil, pb.Snapshot{}, fmt.Errorf("%w: snapshot metadata fails its checksum", ErrCorrupt)
	}
	ss, err := unmarshalSnapshot(file[8:])
	return file[8:], ss, err
}

// EncodeMetadata is the metadata file of the record in data (protobuf).
func EncodeMetadata(data []byte) []byte {
	return append(flagHash(data), data...)
}

// unmarshalSnapshot decodes a raftpb.Snapshot (see unmarshalGuarded).
func unmarshalSnapshot(data []byte) (pb.Snapshot, error) {
	return unmarshalGuarded[pb.Snapshot](data, "snapshot metadata")
}

// unmarshalHeader decodes a raftpb.SnapshotHeader (see unmarshalGuarded).
func unmarshalHeader(data []byte) (pb.SnapshotHeader, error) {
	return unmarshalGuarded[pb.SnapshotHeader](data, "snapshot header")
}

// unmarshalGuarded decodes data into a T by its generated Unmarshal; a
// malformed one is ErrCorrupt naming what. The generated code returns
// errors on malformed input, but it is guarded anyway: nothing read from a
// file may panic.
func unmarshalGuarded[T any, P interface {
	*T
	Unmarshal([]byte) error
}](data []byte, what string) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			var zero T
			v, err = zero, fmt.Errorf("%w: %s: %v", ErrCorrupt, what, p)
		}
	}()
	if err := P(&v).Unmarshal(data); err != nil {
		var zero T
		return zero, fmt.Errorf("%w: %s: %v", ErrCorrupt, what, err)
	}
	return v, nil
}

// StatePayload checks a Dragonboat snapshot file whole (header, every
// block's CRC, the tail, and the payload checksum against want, the
// metadata's Checksum) and returns the state machine's snapshot in it.
// fencelock uses no Dragonboat client sessions, so a payload with any is
// refused too. Every failure wraps ErrCorrupt; it never panics.
func StatePayload(file []byte, want []byte) ([]byte, error) {
	_, payload, err := readSnapshotFile(file, want)
	if err != nil {
		return nil, err
	}
	return payload[16:], nil
}

// RaiseEpoch returns file, a Dragonboat snapshot file StatePayload accepts
// with want, with the state in it raised to its next restore epoch
// (fsm.RaiseEpoch), and the payload checksum of the new file, which its
// metadata record must carry (Snapshot.Checksum, with FileSize the new
// file's length). The file is written as Dragonboat writes one: its header
// (with its time) and its client sessions' part kept, its blocks and
// checksums made anew; it depends on nothing but file, so every replica
// restored from one backup imports the same bytes. A file StatePayload
// refuses is refused alike (ErrCorrupt), and so is a state fsm.RaiseEpoch
// refuses (wrapping its error too), but for one in the last epoch, which is
// intact: that is fsm.ErrNoEpochLeft alone.
func RaiseEpoch(file, want []byte) (raised, checksum []byte, err error) {
	h, payload, err := readSnapshotFile(file, want)
	if err != nil {
		return nil, nil, err
	}
	state, err := fsm.RaiseEpoch(payload[16:])
	switch {
	case errors.Is(err, fsm.ErrNoEpochLeft):
		return nil, nil, err
	case err != nil:
		return nil, nil, fmt.Errorf("%w: raise the restore epoch: %w", ErrCorrupt, err)
	}
	raised, checksum = writeSnapshotFile(h, append(payload[:16:16], state...))
	return raised, checksum, nil
}

// readSnapshotFile checks a snapshot file as StatePayload says, and returns
// its header and its whole payload (at least Dragonboat's 16 bytes of
// client sessions, none).
func readSnapshotFile(file []byte, want []byte) (pb.SnapshotHeader, []byte, error) {
	var none pb.SnapshotHeader
	if len(file) < headerSize+tailSize {
		return none, nil, fmt.Errorf("%w: snapshot file of %d bytes", ErrCorrupt, len(file))
	}
	n := binary.LittleEndian.Uint64(file)
	if n > headerSize-8 {
		return none, nil, fmt.Errorf("%w: snapshot header of %d bytes", ErrCorrupt, n)
	}
	h, err := unmarshalHeader(file[8 : 8+n])
	if err != nil {
		return none, nil, err
	}
	if h.Version != snapshotV2 || h.ChecksumType != pb.CRC32IEEE || h.CompressionType != pb.NoCompression {
		return none, nil, fmt.Errorf("%w: snapshot file version %d, checksum %v, compression %v", ErrCorrupt, h.Version, h.ChecksumType, h.CompressionType)
	}
	sum := h.HeaderChecksum
	h.HeaderChecksum = nil
	hd, err := h.Marshal()
	if err != nil || !bytes.Equal(sum, crc32Sum(hd)) {
		return none, nil, fmt.Errorf("%w: snapshot header fails its checksum", ErrCorrupt)
	}
	blocks := file[headerSize : len(file)-tailSize]
	tail := file[len(file)-tailSize:]
	if binary.LittleEndian.Uint64(tail) != uint64(len(blocks)) || !bytes.Equal(tail[8:], blockMagic) {
		return none, nil, fmt.Errorf("%w: snapshot file tail", ErrCorrupt)
	}
	payload := make([]byte, 0, len(blocks))
	all := crc32.NewIEEE()
	for len(blocks) > 0 {
		b := blocks[:min(len(blocks), blockSize+crcSize)]
		blocks = blocks[len(b):]
		if len(b) <= crcSize {
			return none, nil, fmt.Errorf("%w: snapshot file: a block of %d bytes", ErrCorrupt, len(b))
		}
		data, crc := b[:len(b)-crcSize], b[len(b)-crcSize:]
		if !bytes.Equal(crc, crc32Sum(data)) {
			return none, nil, fmt.Errorf("%w: snapshot file: a block fails its checksum", ErrCorrupt)
		}
		all.Write(crc)
		payload = append(payload, data...)
	}
	if s := all.Sum(nil); !bytes.Equal(s, h.PayloadChecksum) || !bytes.Equal(s, want) {
		return none, nil, fmt.Errorf("%w: snapshot payload checksum", ErrCorrupt)
	}
	// Dragonboat's client sessions: their LRU capacity, their count, and
	// none here (every proposal uses the no-op session).
	if len(payload) < 16 || binary.LittleEndian.Uint64(payload[8:]) != 0 {
		return none, nil, fmt.Errorf("%w: snapshot payload has Dragonboat client sessions", ErrCorrupt)
	}
	return h, payload, nil
}

// writeSnapshotFile writes payload as a snapshot file with header h (whose
// checksums it sets), as Dragonboat's V2 writer does, and returns it with
// its payload checksum (the CRC-32 of the blocks' CRC-32s).
func writeSnapshotFile(h pb.SnapshotHeader, payload []byte) (file, checksum []byte) {
	blocks := make([]byte, 0, len(payload)+(len(payload)/blockSize+1)*crcSize)
	all := crc32.NewIEEE()
	for len(payload) > 0 {
		d := payload[:min(len(payload), blockSize)]
		payload = payload[len(d):]
		crc := crc32Sum(d)
		all.Write(crc)
		blocks = append(append(blocks, d...), crc...)
	}
	h.PayloadChecksum, h.HeaderChecksum = all.Sum(nil), nil
	hd, _ := h.Marshal() // a header StatePayload read, or a test's: it marshals
	h.HeaderChecksum = crc32Sum(hd)
	hd, _ = h.Marshal()
	file = make([]byte, headerSize, headerSize+len(blocks)+tailSize)
	binary.LittleEndian.PutUint64(file, uint64(len(hd)))
	copy(file[8:], hd)
	file = append(file, blocks...)
	file = binary.LittleEndian.AppendUint64(file, uint64(len(blocks)))
	return append(file, blockMagic...), h.PayloadChecksum
}

func crc32Sum(data []byte) []byte {
	h := crc32.NewIEEE()
	h.Write(data)
	return h.Sum(nil)
}
