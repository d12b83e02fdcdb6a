//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fencefile

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

func TestAppendRefusesLowerTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	h, err := f.Highest()
	require.NoError(t, err)
	require.Zero(t, h)

	require.NoError(t, f.Append(5, []byte("a")))
	require.NoError(t, f.Append(7, []byte("b")))
	require.NoError(t, f.Append(7, []byte("c")), "the same holder writes again")
	err = f.Append(6, []byte("d"))
	require.ErrorIs(t, err, fencelock.ErrStaleToken)
	var stale *fencelock.StaleTokenError
	require.True(t, errors.As(err, &stale))
	require.Equal(t, uint64(6), stale.Token)
	require.Equal(t, uint64(7), stale.Highest)

	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{5, "a"}, {7, "b"}, {7, "c"}}, records, "the refused write left nothing")
	h, err = f.Highest()
	require.NoError(t, err)
	require.Equal(t, uint64(7), h)
}

// Each handle has its own Fencer, as each process would: the persisted mark
// makes them agree, and a reopened file remembers it.
func TestMarkIsSharedAndSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	a, err := Open(path)
	require.NoError(t, err)
	b, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, a.Append(10, []byte("old leader")))
	require.NoError(t, b.Append(12, []byte("new leader")))
	require.ErrorIs(t, a.Append(11, []byte("old leader wakes up")), fencelock.ErrStaleToken,
		"a's own Fencer only saw 10; the mark on disk says 12")

	restarted, err := Open(path)
	require.NoError(t, err)
	require.ErrorIs(t, restarted.Append(11, []byte("after a restart")), fencelock.ErrStaleToken)
	require.NoError(t, restarted.Append(12, []byte("same epoch")))
	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{10, "old leader"}, {12, "new leader"}, {12, "same epoch"}}, records)
}

// Writers racing through different handles: the file's tokens never go
// back, and every write is either admitted or refused as stale.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	start := make(chan struct{}) // the writers race from the same moment
	for w := range 4 {
		f, err := Open(path)
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 50 {
				err := f.Append(uint64(i*4+rng.IntN(8)), []byte(fmt.Sprint("writer ", w)))
				if err != nil && !errors.Is(err, fencelock.ErrStaleToken) {
					t.Error(err)
					return
				}
				if err == nil {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	records, err := Read(path)
	require.NoError(t, err)
	require.Len(t, records, admitted, "every admitted append, and nothing else, is in the file")
	// How many are admitted depends on the interleaving (a writer that runs
	// ahead makes the others' tokens stale); what may never happen is a
	// record going back.
	require.Positive(t, admitted)
	for i := 1; i < len(records); i++ {
		require.GreaterOrEqual(t, records[i].Token, records[i-1].Token, "record %d goes back", i)
	}
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	require.Error(t, f.Append(1, []byte("two\nlines")))

	require.NoError(t, os.WriteFile(path+".mark", []byte("not a number\n"), 0o644))
	require.ErrorIs(t, f.Append(1, []byte("x")), ErrCorrupt)
	_, err = f.Highest()
	require.ErrorIs(t, err, ErrCorrupt)

	require.NoError(t, os.WriteFile(path, []byte("12 ok\nbad record\n"), 0o644))
	_, err = Read(path)
	require.ErrorIs(t, err, ErrCorrupt)
	_, err = Read(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestClaim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Claim(9))
	require.ErrorIs(t, f.Append(8, []byte("late")), fencelock.ErrStaleToken)
	require.ErrorIs(t, f.Claim(3), fencelock.ErrStaleToken)
	require.NoError(t, f.Append(9, []byte("ok")))
	h, err := f.Highest()
	require.NoError(t, err)
	require.Equal(t, uint64(9), h)
	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{9, "ok"}}, records)
}

// The group rule across handles and restarts: the first admitted nonzero
// group keys the file; another group is refused whatever its token, and
// writes nothing; bare tokens are checked alone until the file is keyed,
// and refused as of no group after.
func TestGroupRule(t *testing.T) {
	const g1, g2 = 0xfeed, 0xfeedfacecafebeef
	path := filepath.Join(t.TempDir(), "resource.log")
	a, err := Open(path)
	require.NoError(t, err)
	b, err := Open(path)
	require.NoError(t, err)

	require.NoError(t, a.Append(3, []byte("bare")))
	group, err := a.Group()
	require.NoError(t, err)
	require.Zero(t, group, "a bare token keys nothing")
	require.ErrorIs(t, a.ClaimFence(fencelock.Fence{Group: g2, Token: 2}), fencelock.ErrStaleToken)
	group, err = a.Group()
	require.NoError(t, err)
	require.Zero(t, group, "a refused fence keys nothing")

	require.NoError(t, a.AppendFence(fencelock.Fence{Group: g1, Token: 5}, []byte("g1")))
	for _, tok := range []uint64{1, 5, 1 << 40} {
		err := b.AppendFence(fencelock.Fence{Group: g2, Token: tok}, []byte("g2"))
		require.ErrorIs(t, err, fencelock.ErrOtherGroup, "token %d", tok)
		require.NotErrorIs(t, err, fencelock.ErrStaleToken)
		var other *fencelock.OtherGroupError
		require.ErrorAs(t, err, &other)
		require.Equal(t, fencelock.OtherGroupError{Resource: path, Fence: fencelock.Fence{Group: g2, Token: tok}, Group: g1}, *other)
	}
	require.ErrorIs(t, b.ClaimFence(fencelock.Fence{Group: g2, Token: 9}), fencelock.ErrOtherGroup)
	err = b.Append(6, []byte("bare again"))
	require.ErrorIs(t, err, fencelock.ErrOtherGroup, "a bare token on a keyed file")
	var other *fencelock.OtherGroupError
	require.ErrorAs(t, err, &other)
	require.Equal(t, fencelock.OtherGroupError{Resource: path, Fence: fencelock.Fence{Token: 6}, Group: g1}, *other)
	require.ErrorIs(t, b.Claim(6), fencelock.ErrOtherGroup)
	require.ErrorIs(t, b.ClaimFence(fencelock.Fence{Token: 6}), fencelock.ErrOtherGroup)
	require.ErrorIs(t, b.AppendFence(fencelock.Fence{Group: g1, Token: 4}, []byte("stale")), fencelock.ErrStaleToken)

	restarted, err := Open(path)
	require.NoError(t, err)
	require.ErrorIs(t, restarted.AppendFence(fencelock.Fence{Group: g2, Token: 7}, []byte("g2")), fencelock.ErrOtherGroup,
		"the key survives a restart")
	require.NoError(t, restarted.AppendFence(fencelock.Fence{Group: g1, Token: 7}, []byte("g1 again")))
	group, err = restarted.Group()
	require.NoError(t, err)
	require.Equal(t, uint64(g1), group)
	h, err := restarted.Highest()
	require.NoError(t, err)
	require.Equal(t, uint64(7), h)
	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{3, "bare"}, {5, "g1"}, {7, "g1 again"}}, records, "refused writes left nothing")
	mark, err := os.ReadFile(path + ".mark")
	require.NoError(t, err)
	require.Equal(t, "000000000000feed:7\n", string(mark), "the documented form")
}

// The probe: a file keyed to group feed at token 100 is sent
// Fence{0, 5000} (a bare token of another deployment, Append or a parsed
// "0000000000000000:5000"). It is refused as of no group and leaves the
// mark alone, so the group's next holder, token 200, is admitted; before,
// the group-0 fence raised the mark to 5000 and 200 was refused as stale.
func TestGroupZeroRefusedByAKeyedFile(t *testing.T) {
	const feed = 0xfeed
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, f.AppendFence(fencelock.Fence{Group: feed, Token: 100}, []byte("feed")))
	zero, err := fencelock.ParseFence("0000000000000000:5000")
	require.NoError(t, err)
	err = f.AppendFence(zero, []byte("another deployment"))
	require.ErrorIs(t, err, fencelock.ErrOtherGroup)
	require.NotErrorIs(t, err, fencelock.ErrStaleToken)
	require.ErrorIs(t, f.Append(5000, []byte("bare")), fencelock.ErrOtherGroup)
	h, err := f.Highest()
	require.NoError(t, err)
	require.Equal(t, uint64(100), h, "group 0 never raises the mark")
	require.NoError(t, f.AppendFence(fencelock.Fence{Group: feed, Token: 200}, []byte("next holder")))
	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{100, "feed"}, {200, "next holder"}}, records)
}

// Rekey after the group was bootstrapped again from empty Dirs: the new
// group's low tokens are admitted, the old group's refused.
func TestRekey(t *testing.T) {
	const old, fresh = 0x1111, 0x2222
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, f.AppendFence(fencelock.Fence{Group: old, Token: 1 << 40}, []byte("old")))
	require.ErrorIs(t, f.AppendFence(fencelock.Fence{Group: fresh, Token: 65536}, []byte("fresh")), fencelock.ErrOtherGroup)

	require.ErrorIs(t, f.Rekey(0), fencelock.ErrInvalidFence)
	group, err := f.Group()
	require.NoError(t, err)
	require.Equal(t, uint64(old), group, "a refused re-key changes nothing")

	require.NoError(t, f.Rekey(fresh))
	h, err := f.Highest()
	require.NoError(t, err)
	require.Zero(t, h)
	other, err := Open(path) // another process, after the re-key
	require.NoError(t, err)
	require.NoError(t, other.AppendFence(fencelock.Fence{Group: fresh, Token: 65536}, []byte("fresh")))
	require.ErrorIs(t, other.AppendFence(fencelock.Fence{Group: old, Token: 1<<40 + 1}, []byte("old wakes up")), fencelock.ErrOtherGroup,
		"the old group, even with a higher token")
	require.ErrorIs(t, f.ClaimFence(fencelock.Fence{Group: fresh, Token: 65535}), fencelock.ErrStaleToken)
	records, err := Read(path)
	require.NoError(t, err)
	require.Equal(t, []Record{{1 << 40, "old"}, {65536, "fresh"}}, records)
}

// A mark file of the first format, the token alone, is read as group 0 and
// rewritten in the new form when the mark changes.
func TestLegacyMarkFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path+".mark", []byte("12\n"), 0o644))
	require.ErrorIs(t, f.AppendFence(fencelock.Fence{Group: 0xfeed, Token: 11}, []byte("x")), fencelock.ErrStaleToken)
	require.NoError(t, f.Append(12, []byte("same token")))
	mark, err := os.ReadFile(path + ".mark")
	require.NoError(t, err)
	require.Equal(t, "12\n", string(mark), "nothing changed, nothing rewritten")
	require.NoError(t, f.AppendFence(fencelock.Fence{Group: 0xfeed, Token: 12}, []byte("keyed")))
	mark, err = os.ReadFile(path + ".mark")
	require.NoError(t, err)
	require.Equal(t, "000000000000feed:12\n", string(mark))
}

func TestCorruptMarks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "resource.log")
	f, err := Open(path)
	require.NoError(t, err)
	for _, bad := range []string{"", "12", "123\n\n", " 12\n", "+12\n", "-1\n", "12 \n", "feed:12\n", "000000000000feed:\n",
		"000000000000feed:12", "00000000000000zz:1\n", "000000000000feed:1:2\n", ":1\n", "18446744073709551616\n"} {
		require.NoError(t, os.WriteFile(path+".mark", []byte(bad), 0o644))
		require.ErrorIs(t, f.Append(1<<62, []byte("x")), ErrCorrupt, "%q", bad)
		_, err := f.Group()
		require.ErrorIs(t, err, ErrCorrupt, "%q", bad)
	}
	records, err := Read(path)
	require.NoError(t, err)
	require.Empty(t, records, "no write got past a corrupt mark")
}

// The mark is decoded from disk: whatever the bytes, parseMark returns a
// mark that formats to bytes decoding to the same mark, or an error; and no
// truncation of a mark it accepts is read as a mark (a lower one, say).
func FuzzParseMark(f *testing.F) {
	for _, s := range []string{"12\n", "0\n", "000000000000feed:262144\n", "ffffffffffffffff:18446744073709551615\n",
		"0000000000000000:0\n", "000000000000FEED:1\n", "12", "", "\n", ":\n", ":1\n", "feed:1\n", "+1\n", "1 \n",
		"18446744073709551616\n", "000000000000feed:1:2\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseMark(data)
		if err != nil {
			return
		}
		require.True(t, bytes.HasSuffix(data, []byte("\n")))
		again, err := parseMark(formatMark(m))
		require.NoError(t, err)
		require.Equal(t, m, again)
		if !bytes.Contains(data, []byte(":")) {
			require.Zero(t, m.Group, "the first format has no group")
		}
		for i := range len(data) {
			if _, err := parseMark(data[:i]); err == nil {
				t.Fatalf("the truncation %q of %q parses", data[:i], data)
			}
		}
	})
}
