package integration_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// A replica restarted on its Dir with another address of its own is
// refused in our words (not Dragonboat's "not the owner of the data
// directory"): the error wraps ErrInvalidConfig, names the old and the new
// address and the two cures, and leaves the Dir as it was, so that the
// restart with the old address works.
func TestChangedOwnAddressIsExplained(t *testing.T) {
	dir := t.TempDir()
	old := fencelocktest.FreePort(t)
	cfg := fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: old}, Dir: dir, Logger: quiet}
	n, err := fencelock.Start(context.Background(), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	s, err := n.NewSession(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	require.NoError(t, n.Close())

	moved := fencelocktest.FreePort(t)
	cfg.Members = map[uint64]string{1: moved}
	_, err = fencelock.Start(context.Background(), cfg)
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)
	msg := err.Error()
	require.NotContains(t, msg, "not the owner")
	require.Contains(t, msg, "at raft address "+old+", and this start gives it "+moved)
	require.Contains(t, msg, "Start it with its old address")
	require.Contains(t, msg, "under a new ID with an empty Dir")

	cfg.Members = map[uint64]string{1: old}
	n, err = fencelock.Start(context.Background(), cfg)
	require.NoError(t, err)
	s, err = n.NewSession(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Close(ctx))
	require.NoError(t, n.Close())
}
