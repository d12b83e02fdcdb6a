//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fencefile

import (
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
	for w := range 4 {
		f, err := Open(path)
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
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
	wg.Wait()
	records, err := Read(path)
	require.NoError(t, err)
	require.Len(t, records, admitted)
	require.Greater(t, admitted, 50)
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
