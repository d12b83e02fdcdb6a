//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fencefile

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// appendRaw adds bytes to the file as a write cut short would leave them.
func appendRaw(t *testing.T, path, raw string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(raw)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// The case: a write torn after "12" (ENOSPC, EIO, power loss), then
// Append(6). Read refuses the torn file rather than return the torn record,
// and the next append cuts the torn line away rather than glue its record to
// it (before, Read returned a record with token 126, above the mark and
// never issued).
func TestTornTailIsCutNotGlued(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, f.Append(5, []byte("a")))
	appendRaw(t, path, "12")

	_, err = Read(path)
	require.ErrorIs(t, err, ErrCorrupt, "an unterminated last line is not a record")
	require.Contains(t, err.Error(), "no final newline")

	require.NoError(t, f.Append(6, []byte("b")))
	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{5, "a"}, {6, "b"}}, records)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "5 a\n6 b\n", string(data))

	// A torn first line, and a torn line longer than the cut's read buffer.
	for _, torn := range []string{"", strings.Repeat("x", 200<<10)} {
		p := filepath.Join(t.TempDir(), "resource.log")
		g, err := Open(p)
		require.NoError(t, err)
		if torn == "" {
			require.NoError(t, g.Claim(1)) // the mark is always written before a record's bytes
		} else {
			require.NoError(t, g.Append(1, []byte(torn[:70<<10])))
		}
		appendRaw(t, p, "7"+torn)
		require.NoError(t, g.Append(7, []byte("after")))
		records, err := Read(p)
		require.NoError(t, err)
		require.Equal(t, Record{7, "after"}, records[len(records)-1])
		require.Len(t, records, map[bool]int{true: 1, false: 2}[torn == ""])
	}
}

// A refused append does not touch the file, torn tail included: only an
// admitted one repairs it, under the lock.
func TestRefusedAppendLeavesTheTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, f.Append(5, []byte("a")))
	appendRaw(t, path, "9 torn")
	require.ErrorIs(t, f.Append(4, []byte("stale")), fencelock.ErrStaleToken)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "5 a\n9 torn", string(data))
}

// Records of any size are admitted, and Read returns them: before, Read gave
// up on a record over 64 KiB (bufio.Scanner's limit) that Append had taken.
func TestLargeRecordsReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	big := strings.Repeat("r", 1<<20)
	require.NoError(t, f.Append(3, []byte(big)))
	require.NoError(t, f.Append(4, []byte("small")))
	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{3, big}, {4, "small"}}, records)
}

// A missing mark beside a non-empty file is corrupt, not a mark of 0 that
// admits every token; an empty file without a mark is a new one.
func TestMissingMarkBesideRecordsIsCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	h, err := f.Highest()
	require.NoError(t, err, "a new, empty file has no mark yet")
	require.Zero(t, h)
	require.NoError(t, f.Append(10, []byte("a")))
	require.NoError(t, os.Remove(path+".mark"))

	require.ErrorIs(t, f.Append(3, []byte("would be admitted against 0")), ErrCorrupt)
	require.ErrorIs(t, f.Claim(3), ErrCorrupt)
	_, err = f.Highest()
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = f.Group()
	require.ErrorIs(t, err, ErrCorrupt)
	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{10, "a"}}, records, "nothing was written")

	require.NoError(t, f.Rekey(0xfeed), "the operator's way out")
	require.NoError(t, f.AppendFence(fencelock.Fence{Group: 0xfeed, Token: 1}, []byte("b")))
}

// Token 0 on a new file leaves the zero mark unchanged, and its record is
// still written with a mark beside it: a record never lies without one.
func TestTokenZeroWritesTheMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, f.Append(0, []byte("zero")))
	_, err = os.Stat(path + ".mark")
	require.NoError(t, err)
	require.NoError(t, f.Append(1, []byte("one")))
}

// The mark's temp file is fsynced through the descriptor that wrote it, not
// a new read-only one, which (before Linux 4.16) need not see a write-back
// error of the write. Every fsync of a write path is checked the same way.
func TestFsyncsTheWritingDescriptor(t *testing.T) {
	type synced struct {
		name  string
		flags int
	}
	var calls []synced
	fsync = func(f *os.File) error {
		flags, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_GETFL, 0)
		require.Zero(t, errno)
		calls = append(calls, synced{filepath.Base(f.Name()), int(flags)})
		return f.Sync()
	}
	defer func() { fsync = (*os.File).Sync }()

	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, f.Append(5, []byte("a")))

	var names []string
	for _, c := range calls {
		names = append(names, c.name)
		if c.name == "resource.log.mark.tmp" || c.name == "resource.log" {
			require.NotEqual(t, syscall.O_RDONLY, c.flags&syscall.O_ACCMODE, "%s synced through a read-only descriptor", c.name)
		}
	}
	require.Equal(t, []string{"resource.log.mark.tmp", filepath.Base(filepath.Dir(path)), "resource.log"}, names,
		"the mark's temp file, the directory after the rename, then the record")
}

// Read's decoder: whatever the bytes, parseRecords returns records that
// format back to exactly those bytes, or an error; a file whose last line
// lacks its newline is never accepted.
func FuzzParseRecords(f *testing.F) {
	for _, s := range []string{"", "5 a\n", "5 a\n6 b\n", "12", "5 a\n12", "0 \n", "05 a\n", "+5 a\n", "5\n", "5 a\r\n",
		"18446744073709551615 max\n", "18446744073709551616 over\n", "5  two spaces\n", "\n", " x\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		records, err := parseRecords(data)
		if err != nil {
			return
		}
		require.True(t, len(data) == 0 || bytes.HasSuffix(data, []byte("\n")))
		var b strings.Builder
		for _, r := range records {
			require.NotContains(t, r.Text, "\n")
			require.NotContains(t, r.Text, "\r")
			b.WriteString(formatRecord(r.Token, r.Text))
		}
		require.Equal(t, string(data), b.String(), "a full round trip")
	})
}
