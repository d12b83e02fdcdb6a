package fsm

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

// goldenSnapshots are the frozen snapshots of every format version.
var goldenSnapshots = []string{"testdata/snapshot-v2.bin", "testdata/snapshot-v3.bin",
	"testdata/snapshot-v3-sessions.bin", "testdata/snapshot-v4.bin", "testdata/snapshot-v5-log-v6.bin",
	"testdata/snapshot-v6-log-v8.bin", "testdata/snapshot-v7-log-v9.bin", "testdata/snapshot-v8-log-v10.bin"}

// largeState has a snapshot several times snapBuffer long, so that records
// and varints straddle the decoder's refills, and a leader value of
// MaxValueLen bytes.
func largeState(tb testing.TB) *State {
	h := newHarness(tb)
	rs, _ := h.apply(openCmds(3000)...)
	var cmds []Command
	for i, r := range rs {
		cmds = append(cmds, acqCmd(r.Value, 1, strings.Repeat("n", 20+i%40)+string(rune('a'+i%26))+string(rune(0x100+i)), i%3 == 0))
		if i%3 == 0 {
			cmds = append(cmds, acqCmd(rs[(i+1)%len(rs)].Value, 2, string(rune('a'+i%26))+string(rune(0x100+i)), true))
		}
	}
	h.apply(cmds...)
	h.one(Command{Kind: KindCampaign, Session: rs[0].Value, Seq: 3, Name: "leader", Value: strings.Repeat("v", MaxValueLen), Wait: true})
	h.one(Command{Kind: KindCampaign, Session: rs[1].Value, Seq: 3, Name: "leader", Value: strings.Repeat("w", MaxValueLen), Wait: true})
	return h.st
}

// FuzzRestoreStream decodes every input as a stream read all at once, a
// byte at a time, in halves and with the end of data coming with the last
// bytes, and requires the verdict and the state of the in-memory decoder
// that Restore replaced (snapshot_ref_test.go); a snapshot that restores
// must fail once cut short, and must pass on the reader's own error.
func FuzzRestoreStream(f *testing.F) {
	for _, file := range goldenSnapshots {
		data, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(data)
		f.Add(data[:len(data)-4])
	}
	rich := saveBytes(f, buildRich(f).st)
	f.Add(rich)
	f.Add(rich[:len(rich)/2])
	f.Add(saveBytes(f, New()))
	f.Add(saveBytes(f, timedState(f)))
	f.Add(saveBytes(f, largeState(f)))
	f.Add(validImage().bytes())
	f.Add(validImage().body())
	f.Add(saveBytes(f, parentState(f)))
	f.Add(parentImage().bytes())
	huge := uint64(1 << 31)
	forged := validImage()
	forged.lockCount = &huge
	f.Add(forged.bytes())
	forged = validImage()
	forged.sessionCount = &huge
	f.Add(forged.bytes())
	h := newHarness(f)
	newDriver(rand.New(rand.NewPCG(31, 32))).drive(h, 100)
	f.Add(saveBytes(f, h.st))
	f.Add(saveBytes(f, raisedState(f)))
	f.Add(gatedImage().bytes())
	if sealed, err := os.ReadFile("testdata/snapshot-v9-log-v11.bin"); err == nil { // version 9, sealed
		f.Add(sealed)
	}
	f.Add([]byte("FLSN"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, withCRC(slices.Clone(data))} {
			checkStreamed(t, in)
		}
	})
}

func checkStreamed(t *testing.T, in []byte) {
	ref, refErr := refDecodeSnapshot(in)
	st, err := Restore(bytes.NewReader(in))
	require.Equal(t, refErr == nil, err == nil, "the reference decoder says %v, Restore %v", refErr, err)
	for _, r := range []io.Reader{
		iotest.OneByteReader(bytes.NewReader(in)),
		iotest.HalfReader(bytes.NewReader(in)),
		iotest.DataErrReader(bytes.NewReader(in)),
	} {
		got, gotErr := Restore(r)
		require.Equal(t, err, gotErr, "how the stream is cut into reads changes nothing")
		if err == nil {
			require.Equal(t, saveBytes(t, st), saveBytes(t, got))
		}
	}
	if err != nil {
		requireRefused(t, err)
		require.Nil(t, st)
		return
	}
	require.NoError(t, checkInvariants(st, false))
	require.Equal(t, saveBytes(t, ref), saveBytes(t, st))
	for _, n := range []int{0, 4, len(in) / 2, len(in) - 4, len(in) - 1} {
		_, err := Restore(iotest.OneByteReader(bytes.NewReader(in[:n])))
		require.ErrorIs(t, err, ErrCorrupt, "cut to %d of %d bytes", n, len(in))
		_, err = Restore(io.MultiReader(bytes.NewReader(in[:n]), iotest.ErrReader(errBoom)))
		require.ErrorIs(t, err, errBoom, "failing after %d of %d bytes", n, len(in))
		require.NotErrorIs(t, err, ErrCorrupt)
	}
	// The reader failing instead of ending, once it has given everything.
	_, err = Restore(io.MultiReader(bytes.NewReader(in), iotest.ErrReader(errBoom)))
	require.ErrorIs(t, err, errBoom)
}

// The frozen snapshots of every version restore, streamed a byte at a time,
// to the state the old decoder gave, and today's to its own bytes.
func TestRestoreStreamGolden(t *testing.T) {
	for _, file := range append(goldenSnapshots, "testdata/snapshot-v9-log-v11.bin") { // the last one sealed
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		ref, err := refDecodeSnapshot(data)
		require.NoError(t, err, file)
		st, err := Restore(iotest.OneByteReader(bytes.NewReader(data)))
		require.NoError(t, err, file)
		require.Equal(t, saveBytes(t, ref), saveBytes(t, st), file)
		require.Equal(t, viewOf(ref), viewOf(st), file)
		if data[4] == snapshotVersion {
			require.Equal(t, data, saveBytes(t, st), file)
		}
	}
}

func TestRestoreStreamOneByteAndTruncated(t *testing.T) {
	for _, st := range []*State{buildRich(t).st, largeState(t)} {
		data := saveBytes(t, st)
		got, err := Restore(iotest.OneByteReader(bytes.NewReader(data)))
		require.NoError(t, err)
		require.Equal(t, data, saveBytes(t, got))
		require.NoError(t, checkInvariants(got, true))

		step := max(1, len(data)/100)
		for n := 0; n < len(data); n += step {
			_, err := Restore(iotest.OneByteReader(bytes.NewReader(data[:n])))
			require.ErrorIs(t, err, ErrCorrupt, "cut to %d of %d bytes", n, len(data))
			_, err = Restore(io.LimitReader(bytes.NewReader(data), int64(n)))
			require.ErrorIs(t, err, ErrCorrupt, "cut to %d of %d bytes", n, len(data))
		}
		_, err = Restore(bytes.NewReader(append(slices.Clone(data), 0)))
		require.ErrorIs(t, err, ErrCorrupt, "a byte after the checksum")
	}
	require.Greater(t, len(saveBytes(t, largeState(t))), 3*snapBuffer)
}

// emptyReads answers every other read with nothing.
type emptyReads struct {
	r     io.Reader
	empty bool
}

func (e *emptyReads) Read(p []byte) (int, error) {
	if e.empty = !e.empty; e.empty {
		return 0, nil
	}
	return e.r.Read(p)
}

type stuckReader struct{}

func (stuckReader) Read([]byte) (int, error) { return 0, nil }

func TestRestoreEmptyReads(t *testing.T) {
	data := saveBytes(t, buildRich(t).st)
	st, err := Restore(&emptyReads{r: iotest.OneByteReader(bytes.NewReader(data))})
	require.NoError(t, err)
	require.Equal(t, data, saveBytes(t, st))

	st, err = Restore(io.MultiReader(bytes.NewReader(data[:20]), stuckReader{}))
	require.ErrorIs(t, err, io.ErrNoProgress)
	require.NotErrorIs(t, err, ErrCorrupt)
	require.Nil(t, st)
}

// A count that promises more records than the stream holds fails when the
// stream ends, having allocated ahead only a bounded amount for them.
func TestRestoreForgedCounts(t *testing.T) {
	for _, count := range []uint64{1 << 20, 1 << 31, 1 << 62} {
		for _, which := range []string{"sessions", "locks", "elections"} {
			im := validImage()
			switch which {
			case "sessions":
				im.sessionCount = &count
			case "locks":
				im.lockCount = &count
			case "elections":
				im.omitElections = true
				im.trailing = appendCount(nil, count)
			}
			data := im.bytes()
			_, err := refDecodeSnapshot(data)
			require.ErrorIs(t, err, ErrCorrupt)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			st, err := Restore(bytes.NewReader(data))
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, ErrCorrupt, "%d %s", count, which)
			require.Nil(t, st)
			// Ahead of the records: the tokens and the lock table sized for
			// maxPrealloc of them (about 60 MiB), not for the count.
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(128<<20), "%d %s", count, which)
		}
	}
}

func appendCount(b []byte, n uint64) []byte {
	for n >= 0x80 {
		b = append(b, byte(n)|0x80)
		n >>= 7
	}
	return append(b, byte(n))
}

func TestRestoreReaderErrorIsNotCorrupt(t *testing.T) {
	data := saveBytes(t, buildRich(t).st)
	for _, n := range []int{0, 3, 10, len(data) - 1, len(data)} {
		st, err := Restore(io.MultiReader(bytes.NewReader(data[:n]), iotest.ErrReader(errBoom)))
		require.True(t, errors.Is(err, errBoom), "after %d bytes: %v", n, err)
		require.NotErrorIs(t, err, ErrCorrupt)
		require.Nil(t, st)
	}
}
