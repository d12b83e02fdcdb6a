package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	pb "github.com/lni/dragonboat/v4/raftpb"
	"github.com/stretchr/testify/require"
)

// frameOf encodes a message batch as the sender does.
func frameOf(t testing.TB, b pb.MessageBatch) []byte {
	frame := make([]byte, headerSize+b.SizeUpperLimit())
	n, err := b.MarshalTo(frame[headerSize:])
	require.NoError(t, err)
	frame = frame[:headerSize+n]
	putHeader(frame, kindBatch)
	return frame
}

// conn is a net.Conn reading from a byte stream, counting what was read.
type conn struct {
	net.Conn
	r    io.Reader
	read int
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}
func (c *conn) SetReadDeadline(time.Time) error { return nil }

func TestFrameRoundTrip(t *testing.T) {
	b := pb.MessageBatch{DeploymentId: 7, SourceAddress: "127.0.0.1:1", BinVer: 210,
		Requests: []pb.Message{{Type: pb.Replicate, To: 2, From: 1, ShardID: 1, Term: 3,
			Entries: []pb.Entry{{Term: 3, Index: 10, Cmd: []byte("command")}, {Term: 3, Index: 11}}}}}
	var stream bytes.Buffer
	stream.Write(frameOf(t, b))
	stream.Write(frameOf(t, b))
	r := frameReader{conn: &conn{r: &stream}}
	for range 2 {
		kind, payload, err := r.next()
		require.NoError(t, err)
		require.Equal(t, kindBatch, kind)
		require.NoError(t, checkBudget(kind, payload))
		var got pb.MessageBatch
		require.NoError(t, got.Unmarshal(payload))
		require.Equal(t, b.Requests[0].Entries[0].Cmd, got.Requests[0].Entries[0].Cmd)
		require.Equal(t, b.DeploymentId, got.DeploymentId)
	}
	_, _, err := r.next()
	require.ErrorIs(t, err, io.EOF)
}

func TestFrameRefusesBadHeaders(t *testing.T) {
	good := frameOf(t, pb.MessageBatch{Requests: []pb.Message{{Type: pb.Heartbeat}}})
	header := func(f func(h []byte)) []byte {
		h := bytes.Clone(good)
		f(h)
		return h
	}
	for name, frame := range map[string][]byte{
		"magic":    header(func(h []byte) { h[0] = 0xAE }),
		"version":  header(func(h []byte) { h[2] = 2 }),
		"kind":     header(func(h []byte) { h[3] = 9 }),
		"empty":    header(func(h []byte) { binary.BigEndian.PutUint32(h[4:], 0) }),
		"too long": header(func(h []byte) { binary.BigEndian.PutUint32(h[4:], MaxBatchFrame+1) }),
		"chunk too long": header(func(h []byte) {
			h[3] = kindChunk
			binary.BigEndian.PutUint32(h[4:], MaxChunkFrame+1)
		}),
		"checksum": header(func(h []byte) { h[len(h)-1] ^= 1 }),
	} {
		c := &conn{r: bytes.NewReader(frame)}
		r := frameReader{conn: c}
		_, _, err := r.next()
		require.ErrorIs(t, err, errFrame, name)
		if name != "checksum" {
			require.Equal(t, headerSize, c.read, "%s: refused before reading the payload", name)
		}
	}
}

// A header may claim up to MaxBatchFrame bytes, but the reader holds only
// what arrived: a sender that claims 129 MiB and sends 10 bytes costs the
// replica about a step, not the claim.
func TestFrameBufferGrowsWithArrivals(t *testing.T) {
	h := make([]byte, headerSize)
	h[0], h[1], h[2], h[3] = frameMagic[0], frameMagic[1], frameVersion, kindBatch
	binary.BigEndian.PutUint32(h[4:], MaxBatchFrame)
	r := frameReader{conn: &conn{r: io.MultiReader(bytes.NewReader(h), bytes.NewReader(make([]byte, 10)))}}
	_, _, err := r.next()
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.LessOrEqual(t, cap(r.buf), readStep, "the buffer did not follow the claimed length")
}

// Forged payloads that would decode into far more memory than their size
// are refused before decoding; real traffic, even dense, passes.
func TestBudgetRefusesAmplification(t *testing.T) {
	// 100,000 empty entries: 3 bytes each on the wire, 80 in memory.
	m := pb.Message{Entries: make([]pb.Entry, 100_000)}
	forged := frameOf(t, pb.MessageBatch{Requests: []pb.Message{m}})[headerSize:]
	err := checkBudget(kindBatch, forged)
	require.ErrorIs(t, err, errFrame)
	var decoded pb.MessageBatch
	require.NoError(t, decoded.Unmarshal(forged), "the forged payload is valid protobuf")

	// Leader no-op entries, the densest real ones, and a heartbeat batch.
	noops := make([]pb.Entry, 100_000)
	for i := range noops {
		noops[i] = pb.Entry{Term: 5, Index: uint64(1_000_000 + i)}
	}
	dense := frameOf(t, pb.MessageBatch{Requests: []pb.Message{{Type: pb.Replicate, Term: 5, Entries: noops}}})
	require.NoError(t, checkBudget(kindBatch, dense[headerSize:]))
	beats := make([]pb.Message, 50)
	for i := range beats {
		beats[i] = pb.Message{Type: pb.Heartbeat, To: uint64(i), From: 1, ShardID: 1, Term: 5}
	}
	require.NoError(t, checkBudget(kindBatch, frameOf(t, pb.MessageBatch{Requests: beats})[headerSize:]))

	chunk := pb.Chunk{ShardID: 1, Data: make([]byte, 2<<20), Membership: pb.Membership{
		Addresses: map[uint64]string{1: "a:1", 2: "b:1", 3: "c:1"}}, FileInfo: pb.SnapshotFile{Filepath: "f"}, HasFileInfo: true}
	buf, err := chunk.Marshal()
	require.NoError(t, err)
	require.NoError(t, checkBudget(kindChunk, buf))

	require.ErrorIs(t, checkBudget(kindBatch, []byte{0x0a, 0x05, 0x01}), errFrame, "a length past the end")
	require.ErrorIs(t, checkBudget(kindBatch, []byte{0x0b}), errFrame, "wire type 3")
	require.ErrorIs(t, checkBudget(9, []byte{1}), errFrame)
}

// FuzzFrame feeds arbitrary bytes to the reader and the budget check: they
// must return an error or a payload that decodes, never panic or allocate
// beyond the bounds.
func FuzzFrame(f *testing.F) {
	f.Add(frameOf(f, pb.MessageBatch{Requests: []pb.Message{{Type: pb.Heartbeat, Entries: []pb.Entry{{Cmd: []byte{1}}}}}}))
	f.Add([]byte{0xF1, 0x0C, 1, 2, 0, 0, 0, 3, 0, 0, 0, 0, 0x52, 0x01, 0x00})
	f.Add([]byte{0xAE, 0x7D, 0, 100, 0x40, 0, 0, 0, 0, 0, 0, 0})
	for _, kind := range []byte{kindCallOpen, kindCall} { // a call connection's frames
		frame := append(make([]byte, headerSize), callOpen...)
		putHeader(frame, kind)
		f.Add(frame)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := frameReader{conn: &conn{r: bytes.NewReader(data)}}
		read := 0
		for {
			kind, payload, err := r.next()
			if err != nil {
				if !errors.Is(err, errFrame) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			// What the reader returned is exactly the frame it consumed:
			// its header and payload, as the sender writes them.
			frame := append(make([]byte, headerSize), payload...)
			putHeader(frame, kind)
			require.Equal(t, data[read:read+len(frame)], frame, "the frame read is the bytes sent")
			read += len(frame)
			checkPayload(t, kind, payload)
		}
	})
}

// FuzzPayload feeds arbitrary payloads, past the checksum, to the budget
// check and the decoders a replica runs on them.
func FuzzPayload(f *testing.F) {
	seed := frameOf(f, pb.MessageBatch{DeploymentId: 1, Requests: []pb.Message{{Type: pb.Replicate,
		Entries: []pb.Entry{{Term: 1, Index: 2, Cmd: []byte{1, 2}}},
		Snapshot: pb.Snapshot{Index: 3, Membership: pb.Membership{Addresses: map[uint64]string{1: "a:1"}},
			Files: []*pb.SnapshotFile{{Filepath: "x"}}}}}})
	f.Add(kindBatch, seed[headerSize:])
	chunk, err := (&pb.Chunk{ShardID: 1, Data: []byte{1}, HasFileInfo: true, FileInfo: pb.SnapshotFile{FileId: 1},
		Membership: pb.Membership{Removed: map[uint64]bool{4: true}}}).Marshal()
	require.NoError(f, err)
	f.Add(kindChunk, chunk)
	f.Fuzz(func(t *testing.T, kind byte, payload []byte) {
		checkPayload(t, kind, payload)
	})
}

// checkPayload runs the budget check and the decoder a replica runs on a
// payload and checks what they promise: a payload the budget admits and
// that decodes takes at most the budget in memory once decoded, and its
// decoded value survives a round trip through the encoder.
func checkPayload(t *testing.T, kind byte, payload []byte) {
	t.Helper()
	if checkBudget(kind, payload) != nil {
		return
	}
	limit := maxAmplification*len(payload) + budgetSlack
	switch kind {
	case kindBatch:
		var b pb.MessageBatch
		if b.Unmarshal(payload) != nil {
			return
		}
		require.LessOrEqual(t, batchCost(&b), limit, "the decoded batch exceeds the budget the check admitted")
		enc, err := b.Marshal()
		require.NoError(t, err)
		var again pb.MessageBatch
		require.NoError(t, again.Unmarshal(enc))
		require.Equal(t, b, again, "decode(encode(decode(payload))) == decode(payload)")
	case kindChunk:
		var c pb.Chunk
		if c.Unmarshal(payload) != nil {
			return
		}
		require.LessOrEqual(t, chunkCost(&c), limit, "the decoded chunk exceeds the budget the check admitted")
		enc, err := c.Marshal()
		require.NoError(t, err)
		var again pb.Chunk
		require.NoError(t, again.Unmarshal(enc))
		require.Equal(t, c, again, "decode(encode(decode(payload))) == decode(payload)")
	default:
		t.Fatalf("the budget admitted kind %d", kind)
	}
}

// batchCost and chunkCost count the memory a decoded value holds, from the
// value itself: its bytes and strings, and the Go values of its repeated
// elements, at the costs budget.go charges for them.
func batchCost(b *pb.MessageBatch) int {
	n := len(b.SourceAddress)
	for _, m := range b.Requests {
		n += messageCost
		for _, e := range m.Entries {
			n += entryCost + len(e.Cmd)
		}
		n += snapshotValueCost(&m.Snapshot)
	}
	return n
}

func snapshotValueCost(s *pb.Snapshot) int {
	n := len(s.Filepath) + membershipValueCost(&s.Membership)
	for _, f := range s.Files {
		n += fileCost + len(f.Filepath) + len(f.Metadata)
	}
	return n
}

func membershipValueCost(m *pb.Membership) int {
	n := mapEntryCost * (len(m.Addresses) + len(m.Removed) + len(m.NonVotings) + len(m.Witnesses))
	for _, maps := range []map[uint64]string{m.Addresses, m.NonVotings, m.Witnesses} {
		for _, a := range maps {
			n += len(a)
		}
	}
	return n
}

func chunkCost(c *pb.Chunk) int {
	return len(c.Data) + len(c.Filepath) + membershipValueCost(&c.Membership) +
		fileCost + len(c.FileInfo.Filepath) + len(c.FileInfo.Metadata)
}
