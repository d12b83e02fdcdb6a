package fencelock

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest/logtap"
)

// knownDirs reads the Dir IDs replica's Dir has on record for its peers.
func knownDirs(t *testing.T, dir string) map[uint64]uint64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "fencelock-dir.json"))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var f struct {
		Known map[uint64]uint64 `json:"known"`
	}
	require.NoError(t, json.Unmarshal(data, &f))
	return f.Known
}

// A replica that lost its Dir and starts again, empty, under its old ID, is
// refused by the replicas that knew it. The test stages the loss it
// prevents: a grant acknowledged by the leader and the replica that then
// loses its Dir, never seen by the third. Let in, the empty replica votes for
// the third, the two make a quorum without the grant, and the lock is
// granted a second time (with the same fencing token: the index is reused).
func TestReplicaThatLostItsDirIsRefused(t *testing.T) {
	tap := logtap.New(slog.LevelDebug)
	ctx := testCtx(t)
	c := newCluster(t, 3, func(cfg *Config) { cfg.Logger = tap.Logger() })
	l := c.leader(ctx)
	w, y := l%3+1, (l+1)%3+1 // w will lose its Dir; y never sees the grant
	waitUntil(t, ctx, "the replicas record each other's Dir", func() bool {
		k := knownDirs(t, c.dirs[y])
		return k[w] != 0 && k[l] != 0
	})

	c.net.Isolate(c.members[y])
	s := newSession(t, ctx, c.node(l))
	held, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	token := held.Fence().Token

	c.crash(l)
	c.crash(w)
	require.NoError(t, os.RemoveAll(c.dirs[w]))
	c.net.Heal()
	c.start(w) // empty, under its old ID

	tap.Wait(t, ctx, "is not the replica", "it lost its Dir")
	tap.Wait(t, ctx, "knew this replica", "Dir was lost or replaced")

	// y and the empty w do not make a quorum: nothing is granted.
	short, cancel := context.WithTimeout(ctx, 6*time.Second) // past the no-quorum patience (3 s)
	defer cancel()
	if s2, err := c.node(y).NewSession(short); err == nil {
		_, err = s2.Acquire(short, "x")
		require.Error(t, err, "the lock was granted a second time: the replica that lost its Dir was let in")
		s2.Close(short)
	} else {
		require.ErrorIs(t, err, ErrUnavailable)
	}
	require.Zero(t, c.node(y).Status().LeaderID, "y and the empty replica elected a leader")

	// With the leader back, the group has its quorum and its grant.
	c.start(l)
	waitUntil(t, ctx, "x is readable through y", func() bool {
		info, err := c.node(y).Inspect(ctx, "x")
		return err == nil && info.Held
	})
	info, err := c.node(y).Inspect(ctx, "x")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	require.Equal(t, token, info.Holders[0].Token)
}
