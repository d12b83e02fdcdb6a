package fencelock

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest/logtap"
)

// misconfigured starts replicas 1 and 2 of a three-replica group with the
// right Members, and replica 3 with members3; all log to tap. It returns the
// right Members and the three nodes.
func misconfigured(t *testing.T, tap *logtap.Tap, members3 func(right map[uint64]string) map[uint64]string) (map[uint64]string, [3]*Node) {
	t.Helper()
	right := map[uint64]string{1: freeAddr(t), 2: freeAddr(t), 3: freeAddr(t)}
	base := t.TempDir()
	var nodes [3]*Node
	for id := uint64(1); id <= 3; id++ {
		members := right
		if id == 3 {
			members = members3(maps.Clone(right))
		}
		n, err := Start(context.Background(), Config{ReplicaID: id, Members: members,
			Dir: filepath.Join(base, string(rune('0'+id))), Logger: tap.Logger()})
		require.NoError(t, err)
		t.Cleanup(func() { n.Close() })
		nodes[id-1] = n
	}
	return right, nodes
}

// groupWorks checks that replicas 1 and 2 still form the group: a lock is
// granted through either.
func groupWorks(t *testing.T, ctx context.Context, nodes [3]*Node, name string) {
	t.Helper()
	for _, n := range nodes[:2] {
		s := newSession(t, ctx, n)
		l, err := s.Acquire(ctx, name)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		require.NoError(t, s.Close(ctx))
	}
}

// A typo in one replica's own address (replica 3 told it is at another
// port) used to crash the healthy replicas inside Dragonboat ("inconsistent
// target"): a panic here ends the test binary. Now the replicas refuse each
// other, both sides say what differs, and the other two go on.
func TestTypoInOwnAddressCrashesNobody(t *testing.T) {
	tap := logtap.New(slog.LevelDebug)
	ctx := testCtx(t)
	wrong := freeAddr(t)
	right, nodes := misconfigured(t, tap, func(m map[uint64]string) map[uint64]string { m[3] = wrong; return m })
	diff := "3 is " + wrong + " there, " + right[3] + " here"
	tap.Wait(t, ctx, "refused", "belongs to another group", diff)
	tap.Wait(t, ctx, "refused this one", diff)
	groupWorks(t, ctx, nodes, "typo")
	require.NotEqual(t, nodes[0].r.Group(), nodes[2].r.Group())
	require.Equal(t, nodes[0].r.Group(), nodes[1].r.Group())
}

// The group identity is kept in Dir: a restart keeps it, even when the
// Members it is restarted with differ (which is logged); a corrupt file
// stops the start rather than letting the replica guess its group.
func TestGroupIdentityIsKeptInDir(t *testing.T) {
	tap := logtap.New(slog.LevelDebug)
	members := map[uint64]string{1: freeAddr(t)}
	dir := t.TempDir()
	n, err := Start(context.Background(), Config{ReplicaID: 1, Members: members, Dir: dir, Logger: quietLogger})
	require.NoError(t, err)
	group := n.r.Group()
	require.Len(t, group, 32)
	n.Close()

	other := map[uint64]string{1: members[1], 2: freeAddr(t)}
	n, err = Start(context.Background(), Config{ReplicaID: 1, Members: other, Dir: dir, Logger: tap.Logger()})
	require.NoError(t, err)
	require.Equal(t, group, n.r.Group())
	ctx := testCtx(t)
	tap.Wait(t, ctx, "Members differ", "2 only there")
	n.Close()

	require.NoError(t, os.WriteFile(filepath.Join(dir, "fencelock-group.json"), []byte(`{"version":1,"grou`), 0o600))
	_, err = Start(context.Background(), Config{ReplicaID: 1, Members: members, Dir: dir, Logger: quietLogger})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "corrupt")
}

// The zero Lock and Leadership are usable, like any zero value: a grant
// that is already over.
func TestZeroGrantsDoNotPanic(t *testing.T) {
	ctx := context.Background()
	for _, l := range []*Lock{{}, nil} {
		require.Empty(t, l.Name())
		require.Zero(t, l.Token())
		require.True(t, closed(l.Done()))
		require.ErrorIs(t, l.Err(), ErrNotHeld)
		require.ErrorIs(t, l.Release(ctx), ErrNotHeld)
	}
	for _, l := range []*Leadership{{}, nil} {
		require.Empty(t, l.Election())
		require.Empty(t, l.Value())
		require.Zero(t, l.Token())
		require.True(t, closed(l.Done()))
		require.ErrorIs(t, l.Err(), ErrNotLeader)
		require.ErrorIs(t, l.Proclaim(ctx, "v"), ErrNotLeader)
		require.ErrorIs(t, l.Resign(ctx), ErrNotLeader)
	}
}

// Start failures wrap ErrInvalidConfig and say what is wrong in the
// library's words.
func TestStartErrorsAreConfigErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	addr := busy.Addr().String()
	_, err = Start(context.Background(), Config{ReplicaID: 1, Members: map[uint64]string{1: addr}, Dir: t.TempDir(), Logger: quietLogger})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "in use by another process")

	_, err = Start(context.Background(), Config{ReplicaID: 1, Members: map[uint64]string{1: "127.0.0.1"}, Dir: t.TempDir(), Logger: quietLogger})
	require.ErrorIs(t, err, ErrInvalidConfig)
}
