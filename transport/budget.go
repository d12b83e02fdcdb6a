package transport

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	pb "github.com/lni/dragonboat/v4/raftpb"
)

// A payload of n bytes may decode into at most maxAmplification×n +
// budgetSlack bytes of Go values. Decoding a protobuf can cost far more
// memory than its bytes: an empty Entry takes 3 bytes on the wire and 80 in
// memory, and Dragonboat sizes slices from a pre-count. Real traffic stays
// under 10× (measured: leader no-op entries, the densest, take 9 bytes for
// 80), so the bound refuses only forged frames.
const (
	maxAmplification = 12
	budgetSlack      = 1 << 20
)

// Go's in-memory cost of the repeated elements a payload can hold, beyond
// their bytes.
var (
	messageCost  = int(unsafe.Sizeof(pb.Message{}))
	entryCost    = int(unsafe.Sizeof(pb.Entry{}))
	fileCost     = int(unsafe.Sizeof(pb.SnapshotFile{})) + int(unsafe.Sizeof(uintptr(0)))
	mapEntryCost = 64 // a map[uint64]string or map[uint64]bool entry, buckets included
)

// The protobuf field numbers of Dragonboat's raftpb messages that nest
// other messages; every other field is a scalar, bytes or string.
const (
	batchRequests      = 1  // MessageBatch.Requests: repeated Message
	messageEntries     = 11 // Message.Entries: repeated Entry
	messageSnapshot    = 12 // Message.Snapshot: Snapshot
	snapshotMembership = 6  // Snapshot.Membership: Membership
	snapshotFiles      = 7  // Snapshot.Files: repeated SnapshotFile
	chunkMembership    = 10 // Chunk.Membership: Membership
	chunkFileInfo      = 18 // Chunk.FileInfo: SnapshotFile
)

// checkBudget walks the wire structure of a payload of the given kind
// without decoding it and refuses one whose decoded form would exceed the
// budget, or whose structure is broken.
func checkBudget(kind byte, payload []byte) error {
	cost := len(payload)
	var err error
	switch kind {
	case kindBatch:
		err = walk(payload, func(field int, inner []byte) error {
			if field != batchRequests {
				return nil
			}
			cost += messageCost
			return walk(inner, func(field int, inner []byte) error {
				switch field {
				case messageEntries:
					cost += entryCost
				case messageSnapshot:
					return snapshotCost(inner, &cost)
				}
				return nil
			})
		})
	case kindChunk:
		err = walk(payload, func(field int, inner []byte) error {
			switch field {
			case chunkMembership:
				return membershipCost(inner, &cost)
			case chunkFileInfo:
				cost += fileCost
			}
			return nil
		})
	default:
		err = fmt.Errorf("%w: kind %d", errFrame, kind)
	}
	if err != nil {
		return err
	}
	if limit := maxAmplification*len(payload) + budgetSlack; cost > limit {
		return fmt.Errorf("%w: %d bytes would decode into about %d", errFrame, len(payload), cost)
	}
	return nil
}

func snapshotCost(b []byte, cost *int) error {
	return walk(b, func(field int, inner []byte) error {
		switch field {
		case snapshotMembership:
			return membershipCost(inner, cost)
		case snapshotFiles:
			*cost += fileCost
		}
		return nil
	})
}

// membershipCost counts the entries of a Membership's maps (fields 2 to 5).
func membershipCost(b []byte, cost *int) error {
	return walk(b, func(field int, _ []byte) error {
		if field >= 2 && field <= 5 {
			*cost += mapEntryCost
		}
		return nil
	})
}

// walk calls f for every length-delimited field of the protobuf message b,
// and checks that every other field is well formed.
func walk(b []byte, f func(field int, inner []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 || tag>>3 == 0 || tag>>3 > 1<<29 {
			return fmt.Errorf("%w: bad protobuf tag", errFrame)
		}
		b = b[n:]
		switch tag & 7 {
		case 0: // varint
			if _, n = binary.Uvarint(b); n <= 0 {
				return fmt.Errorf("%w: bad protobuf varint", errFrame)
			}
			b = b[n:]
		case 1: // fixed64
			if len(b) < 8 {
				return fmt.Errorf("%w: short protobuf field", errFrame)
			}
			b = b[8:]
		case 5: // fixed32
			if len(b) < 4 {
				return fmt.Errorf("%w: short protobuf field", errFrame)
			}
			b = b[4:]
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return fmt.Errorf("%w: bad protobuf length", errFrame)
			}
			inner := b[n : n+int(l)]
			b = b[n+int(l):]
			if err := f(int(tag>>3), inner); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: protobuf wire type %d", errFrame, tag&7)
		}
	}
	return nil
}
