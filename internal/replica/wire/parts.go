package wire

import (
	"fmt"
	"io"
)

// A group's state travels one way, whoever asks for it: a mirror's first
// state (snapshotPart messages, when it is larger than one message) and a
// backup's exported snapshot file (exportData messages, after its
// exportHead) are both a head that names the total size, then parts of
// exactly that many bytes in order, each at most a bound. SendParts sends
// them and RecvParts takes them; the kinds and their fields are the
// callers', so the bytes on the wire are what every build sends.

// Sender is what SendParts sends on: a call connection.
type Sender interface {
	Send(msg []byte) error
}

// SendParts sends the first total bytes of src down c, in order, as
// messages of at most most bytes each: part makes each message of its
// bytes (the kind, and the fields every part of it carries). A src that
// holds fewer than total bytes fails with an error wrapping
// io.ErrUnexpectedEOF, after the parts it had.
func SendParts(c Sender, src io.Reader, total uint64, most int, part func(data []byte) Msg) error {
	buf := make([]byte, min(uint64(most), total))
	var msg []byte
	for sent := uint64(0); sent < total; {
		n, err := io.ReadFull(src, buf[:min(uint64(len(buf)), total-sent)])
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return fmt.Errorf("after %d of %d bytes: %w", sent, total, err)
		}
		m := part(buf[:n])
		msg = m.Encode(msg[:0])
		if err := c.Send(msg); err != nil {
			return err
		}
		sent += uint64(n)
	}
	return nil
}

// RecvParts writes into dst the parts of a state of total bytes of which
// got have come already (a head may carry the first part), until total
// have: next returns the next part (skipping what the protocol allows
// between parts, such as pings), and check refuses one that does not
// belong to the state (another kind, index or size) with an error wrapping
// ErrMalformed. A part of more than most bytes, or one that takes the
// state beyond total, is an error wrapping ErrMalformed; an error of next
// (the connection ended: a short read) is returned wrapped, naming how
// much had come.
func RecvParts(next func() (Msg, error), check func(Msg) error, dst io.Writer, got, total uint64, most int) error {
	for got < total {
		m, err := next()
		if err != nil {
			return fmt.Errorf("after %d of %d bytes: %w", got, total, err)
		}
		if check != nil {
			if err := check(m); err != nil {
				return err
			}
		}
		if len(m.Data) > most || got+uint64(len(m.Data)) > total {
			return fmt.Errorf("%w: a part of %d bytes after %d of a state of %d (parts of at most %d)", ErrMalformed, len(m.Data), got, total, most)
		}
		if len(m.Data) == 0 {
			return fmt.Errorf("%w: an empty part after %d of %d bytes", ErrMalformed, got, total)
		}
		if _, err := dst.Write(m.Data); err != nil {
			return err
		}
		got += uint64(len(m.Data))
	}
	return nil
}
