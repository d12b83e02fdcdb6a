package wire

import (
	"bytes"
	"crypto/rand"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// sent collects what SendParts sends, decoded.
type sent []Msg

func (s *sent) Send(b []byte) error {
	m, err := Decode(b)
	if err != nil {
		return err
	}
	*s = append(*s, m)
	return nil
}

// from returns a next for RecvParts that hands out msgs, then err.
func from(msgs []Msg, err error) func() (Msg, error) {
	return func() (Msg, error) {
		if len(msgs) == 0 {
			return Msg{}, err
		}
		m := msgs[0]
		msgs = msgs[1:]
		return m, nil
	}
}

func dataPart(data []byte) Msg { return Msg{Kind: KindExportData, Data: data} }

// A state goes in parts of at most the bound, in order, exactly its size,
// and comes back byte for byte, whether a head carried its first part or
// not.
func TestPartsRoundTrip(t *testing.T) {
	state := make([]byte, 10_000)
	_, _ = rand.Read(state)
	for _, total := range []int{1, 999, 1000, 1001, 10_000} {
		var s sent
		require.NoError(t, SendParts(&s, bytes.NewReader(state), uint64(total), 1000, dataPart))
		require.Len(t, s, (total+999)/1000)
		for _, m := range s {
			require.Equal(t, KindExportData, m.Kind)
			require.LessOrEqual(t, len(m.Data), 1000)
		}
		var got bytes.Buffer
		require.NoError(t, RecvParts(from(s, io.EOF), nil, &got, 0, uint64(total), 1000))
		require.Equal(t, state[:total], got.Bytes())

		got.Reset()
		got.Write(s[0].Data) // the head carried the first part
		require.NoError(t, RecvParts(from(s[1:], io.EOF), nil, &got, uint64(len(s[0].Data)), uint64(total), 1000))
		require.Equal(t, state[:total], got.Bytes())
	}
}

// A sender whose source is shorter than the size it announced, and a
// receiver whose connection ends early (a short read), fail with errors
// that say so; a part beyond the bound, a last part with bytes beyond the
// size (trailing bytes), an empty part and a part check refuses fail with
// ErrMalformed, and no byte beyond the size is written. (What follows the
// last part is the next message's business: a mirror's entries.)
func TestPartsRefuseWhatDoesNotAddUp(t *testing.T) {
	var s sent
	err := SendParts(&s, bytes.NewReader(make([]byte, 2500)), 3000, 1000, dataPart)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Len(t, s, 2, "the parts the source had")

	part := func(n int) Msg { return dataPart(bytes.Repeat([]byte{7}, n)) }
	for name, c := range map[string]struct {
		parts []Msg
		end   error
		want  error
	}{
		"short read":     {[]Msg{part(1000)}, io.EOF, io.EOF},
		"overlong part":  {[]Msg{part(1001)}, io.EOF, ErrMalformed},
		"trailing bytes": {[]Msg{part(1000), part(1000), part(999), part(2)}, io.EOF, ErrMalformed},
		"an empty part":  {[]Msg{part(1000), dataPart(nil)}, io.EOF, ErrMalformed},
		"a part refused": {[]Msg{part(1000), {Kind: KindPing}}, io.EOF, ErrMalformed},
	} {
		var got bytes.Buffer
		check := func(m Msg) error {
			if m.Kind != KindExportData {
				return ErrMalformed
			}
			return nil
		}
		err := RecvParts(from(c.parts, c.end), check, &got, 0, 3000, 1000)
		require.ErrorIs(t, err, c.want, name)
		require.LessOrEqual(t, got.Len(), 3000, name)
	}
}
