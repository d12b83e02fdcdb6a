package integration_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// A start that fails before the replica ever ran (its raft port is in use)
// leaves its Dir as it found it: absent, or with only what was there. The
// corrected retry on the same Dir then starts.
func TestFailedStartLeavesDirAsFound(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	base := t.TempDir()
	for _, tc := range []struct {
		name string
		pre  func(dir string) // the Dir before Start
		left []string         // what Dir holds after the failed Start; nil: absent
	}{
		{"absent", func(string) {}, nil},
		{"empty", func(dir string) { require.NoError(t, os.Mkdir(dir, 0o700)) }, []string{}},
		{"with a file of the operator's", func(dir string) {
			require.NoError(t, os.Mkdir(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "NOTES"), []byte("keep me"), 0o600))
		}, []string{"NOTES"}},
	} {
		dir := filepath.Join(base, tc.name)
		tc.pre(dir)
		cfg := fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: busy.Addr().String()}, Dir: dir, Logger: quiet}
		_, err := fencelock.Start(context.Background(), cfg)
		require.ErrorIs(t, err, fencelock.ErrInvalidConfig, tc.name)
		require.ErrorContains(t, err, "in use by another process", tc.name)
		entries, rerr := os.ReadDir(dir)
		if tc.left == nil {
			require.ErrorIs(t, rerr, os.ErrNotExist, "%s: the failed start left %v", tc.name, entries)
		} else {
			require.NoError(t, rerr)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			require.ElementsMatch(t, tc.left, names, tc.name)
		}

		// The corrected retry, on another address and the same Dir.
		cfg.Members = map[uint64]string{1: fencelocktest.FreePort(t)}
		n, err := fencelock.Start(context.Background(), cfg)
		require.NoError(t, err, tc.name)
		ctx := testCtx(t)
		s, err := n.NewSession(ctx)
		require.NoError(t, err, tc.name)
		require.NoError(t, s.Close(ctx))
		require.NoError(t, n.Close())
	}
}
