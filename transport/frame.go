package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"time"

	"github.com/fencelock/fencelock/internal/peering"
)

// The wire format between replicas: every raft message batch and every
// snapshot chunk travels as one frame,
//
//	frame = magic:2 version:1 kind:1 length:4 crc32c:4 payload:length
//
// with big-endian numbers, the payload being the protobuf encoding of a
// Dragonboat MessageBatch or Chunk, and the CRC (Castagnoli) covering it.
//
// Nothing in a frame is trusted before it is checked: the length is bounded
// per kind before a byte is allocated for the payload, and the payload's
// buffer grows only as bytes arrive, so a forged length costs its sender the
// bytes it claims. The payload's structure is then walked (budget.go) before
// it is decoded, so that a frame cannot decode into much more memory than it
// occupies.
const (
	headerSize   = 12
	frameVersion = 1

	kindBatch byte = 1
	kindChunk byte = 2
	// The handshake (handshake.go): the dialer's hello, and the acceptor's
	// welcome (its own hello) or refusal (why, in words).
	kindHello   byte = 3
	kindWelcome byte = 4
	kindRefuse  byte = 5
	// Calls (call.go): the first frame of a call connection after the
	// handshake, and its acceptance; then one message per call frame.
	kindCallOpen byte = 6
	kindCall     byte = 7

	maxRefusal = 4 << 10

	// MaxBatchFrame bounds a raft message batch. Dragonboat fills a batch
	// up to 64 MiB and may add one message beyond, itself holding up to
	// 64 MiB of entries (a follower catching up); fencelock's own entries
	// are a few MiB at most.
	MaxBatchFrame = 129 << 20
	// MaxChunkFrame bounds a snapshot chunk: Dragonboat cuts snapshots into
	// 2 MiB chunks, and a chunk also names the membership and the file.
	MaxChunkFrame = 4 << 20

	readStep      = 1 << 20 // the payload buffer grows by at most this per read
	keepBuffer    = 4 << 20 // a connection keeps a read buffer up to this size
	stepTimeout   = 10 * time.Second
	frameIdleTime = 2 * time.Minute // a connection that sends nothing for this long is closed
)

var frameMagic = [2]byte{0xF1, 0x0C}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errFrame reports a frame that breaks the format or its bounds; the
// connection that sent it is closed.
var errFrame = errors.New("transport: bad frame")

func maxFrame(kind byte) int {
	switch kind {
	case kindBatch:
		return MaxBatchFrame
	case kindChunk:
		return MaxChunkFrame
	case kindHello, kindWelcome:
		return peering.MaxHello
	case kindRefuse:
		return maxRefusal
	case kindCallOpen:
		return 16
	case kindCall:
		return MaxCallMessage
	}
	return 0
}

// putHeader fills the first headerSize bytes of frame, whose payload follows.
func putHeader(frame []byte, kind byte) {
	payload := frame[headerSize:]
	frame[0], frame[1], frame[2], frame[3] = frameMagic[0], frameMagic[1], frameVersion, kind
	binary.BigEndian.PutUint32(frame[4:], uint32(len(payload)))
	binary.BigEndian.PutUint32(frame[8:], crc32.Checksum(payload, castagnoli))
}

// writeFrame writes a complete frame, header included.
func writeFrame(conn net.Conn, frame []byte) error {
	// A large frame may take a while on a slow link; a stalled peer may not.
	d := stepTimeout + time.Duration(len(frame)/readStep)*time.Second
	if err := conn.SetWriteDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	_, err := conn.Write(frame)
	return err
}

// frameReader reads frames from one connection, reusing its buffer.
type frameReader struct {
	conn   net.Conn
	header [headerSize]byte
	buf    []byte
	// idle is how long next waits for a frame to begin: 0 is
	// frameIdleTime, negative for ever (a call connection, SetIdle).
	idle time.Duration
}

// next reads the next frame and returns its kind and payload, which stays
// valid until the next call.
func (r *frameReader) next() (byte, []byte, error) {
	var deadline time.Time
	switch {
	case r.idle == 0:
		deadline = time.Now().Add(frameIdleTime)
	case r.idle > 0:
		deadline = time.Now().Add(r.idle)
	}
	if err := r.conn.SetReadDeadline(deadline); err != nil {
		return 0, nil, err
	}
	if _, err := io.ReadFull(r.conn, r.header[:]); err != nil {
		return 0, nil, err
	}
	h := r.header[:]
	kind, size := h[3], binary.BigEndian.Uint32(h[4:])
	switch {
	case h[0] != frameMagic[0] || h[1] != frameMagic[1]:
		return 0, nil, fmt.Errorf("%w: not a fencelock frame", errFrame)
	case h[2] != frameVersion:
		return 0, nil, fmt.Errorf("%w: version %d", errFrame, h[2])
	case maxFrame(kind) == 0:
		return 0, nil, fmt.Errorf("%w: kind %d", errFrame, kind)
	case size == 0 || int64(size) > int64(maxFrame(kind)):
		return 0, nil, fmt.Errorf("%w: %d bytes of kind %d", errFrame, size, kind)
	}
	if cap(r.buf) > keepBuffer {
		r.buf = nil // do not keep a large frame's buffer for good
	}
	payload := r.buf[:0]
	for len(payload) < int(size) {
		step := min(int(size)-len(payload), readStep)
		if cap(payload)-len(payload) < step {
			grown := make([]byte, len(payload), min(int(size), max(2*cap(payload), len(payload)+step)))
			copy(grown, payload)
			payload = grown
		}
		if err := r.conn.SetReadDeadline(time.Now().Add(stepTimeout)); err != nil {
			return 0, nil, err
		}
		n, err := io.ReadFull(r.conn, payload[len(payload):len(payload)+step])
		payload = payload[:len(payload)+n]
		if err != nil {
			return 0, nil, err
		}
	}
	r.buf = payload
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(h[8:]) {
		return 0, nil, fmt.Errorf("%w: checksum mismatch", errFrame)
	}
	return kind, payload, nil
}
