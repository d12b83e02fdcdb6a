package integration_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/transport"
)

// A group CreateGroup made (its shard ID drawn at random, not derived from
// its name) is in the backup and in its group table: Restore brings it back
// with no Groups in the Config, its locks held with their tokens, and it
// grants above them. A deployment whose Members lack the group's voters is
// refused.
func TestBackupRestoresCreatedGroup(t *testing.T) {
	ctx := testCtx(t)
	src := fencelocktest.NewCluster(t, 3)
	src.Leader(ctx)
	require.NoError(t, src.Node(1).CreateGroup(ctx, fencelock.GroupConfig{Name: "payments", Voters: []uint64{1, 2, 3}}))
	s, err := src.Node(2).NewSession(ctx, fencelock.WithTTL(20*time.Second))
	require.NoError(t, err)
	pay, err := s.Acquire(ctx, "refund/1@payments")
	require.NoError(t, err)
	payID, ok := s.IDIn("payments")
	require.True(t, ok)
	groups, err := src.Node(1).Groups(ctx)
	require.NoError(t, err)
	var file bytes.Buffer
	require.NoError(t, src.Node(3).Snapshot(ctx, &file))
	info, err := fencelock.ReadBackup(bytes.NewReader(file.Bytes()))
	require.NoError(t, err)
	require.Len(t, info.Groups, 2)
	require.Equal(t, "payments", info.Groups[1].Name)
	stopAll(src)

	// Members without the group's voter 3: refused, naming the group.
	net := transport.NewNetwork(9)
	small := fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: net.Addr(1), 2: net.Addr(2)}, Dir: filepath.Join(t.TempDir(), "r"),
		Transport: net, Logger: quiet}
	_, err = fencelock.Restore(bytes.NewReader(file.Bytes()), small)
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)
	require.ErrorContains(t, err, `group "payments"`)
	_, err = os.Stat(small.Dir)
	require.True(t, os.IsNotExist(err), "%v", err)

	dst := fencelocktest.NewCluster(t, 3, fencelocktest.WithRestore(file.Bytes()))
	dst.Leader(ctx)
	restored, err := dst.Node(1).Groups(ctx)
	require.NoError(t, err)
	require.Equal(t, groups, restored, "the group table, shard IDs and all")
	li, err := dst.Node(3).Inspect(ctx, "refund/1@payments")
	require.NoError(t, err)
	require.True(t, li.Held)
	require.Equal(t, pay.Token(), li.Token)
	require.Equal(t, payID, li.PartID)
	fresh, err := dst.Node(1).NewSession(ctx)
	require.NoError(t, err)
	l, err := fresh.Acquire(ctx, "refund/2@payments")
	require.NoError(t, err)
	require.Greater(t, l.Token(), info.Groups[1].LastToken)
	require.Equal(t, info.Groups[1].GroupID, l.Fence().Group, "the group keeps its ID")
	require.NoError(t, fresh.Close(ctx))
}

// TestRestoreNeverReissuesAFence: a backup is taken while lock res is free;
// the old deployment then grants res 40 more times (to sessions opened after
// the backup), and its last holder is still holding it, as a paused process
// would, when the whole deployment is gone and a new one is restored from
// the file. Every fence the restored deployment grants is above every fence
// the old one granted, before or after the backup, and never equal to one;
// so the old holder's late write, fence-keyed or with a bare token, is
// refused once the restored holder wrote. Its sessions' IDs are above the
// old deployment's too.
func TestRestoreNeverReissuesAFence(t *testing.T) {
	ctx := testCtx(t)
	src := fencelocktest.NewCluster(t, 3)
	src.Leader(ctx)
	var file bytes.Buffer
	require.NoError(t, src.Node(2).Snapshot(ctx, &file))
	info, err := fencelock.ReadBackup(bytes.NewReader(file.Bytes()))
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.Groups[0].RestoreEpoch)

	// After the backup: 40 grants of res, each to a session of its own.
	var old []fencelock.Fence
	var oldSessions []uint64
	var late *fencelock.Lock // the last grant, never released: its holder is paused
	for i := range 40 {
		s, err := src.Node(uint64(1+i%3)).NewSession(ctx, fencelock.WithTTL(20*time.Second))
		require.NoError(t, err)
		oldSessions = append(oldSessions, s.ID())
		l, err := s.Acquire(ctx, "res")
		require.NoError(t, err)
		require.Greater(t, l.Token(), info.Groups[0].LastToken)
		old = append(old, l.Fence())
		if i == 39 {
			late = l
			break
		}
		require.NoError(t, l.Release(ctx))
	}
	lateFence := late.Fence()
	stopAll(src) // the disaster; the late holder's process lives on, paused

	dst := fencelocktest.NewCluster(t, 3, fencelocktest.WithRestore(file.Bytes()))
	dst.Leader(ctx)
	// A session on each replica: each learns its grants from its own
	// replica's state, which another replica's view must agree with (every
	// replica raised its copy alike).
	var sessions []*fencelock.Session
	for id := uint64(1); id <= 3; id++ {
		s, err := dst.Node(id).NewSession(ctx)
		require.NoError(t, err)
		sessions = append(sessions, s)
	}
	for i := range 6 {
		l, err := sessions[i%3].Acquire(ctx, "res")
		require.NoError(t, err)
		f := l.Fence()
		require.Equal(t, info.Groups[0].GroupID, f.Group, "the group keeps its ID")
		li, err := dst.Node(uint64(1+(i+1)%3)).Inspect(ctx, "res")
		require.NoError(t, err)
		require.Equal(t, f.Token, li.Token, "replicas %d and %d agree on the grant", 1+i%3, 1+(i+1)%3)
		if i == 0 {
			// The restored holder writes; the old holder wakes and
			// writes late, with its fence and with its bare token.
			fencer := fencelock.NewFencer()
			require.NoError(t, fencer.DoFence("res", f, func() error { return nil }))
			require.NoError(t, fencer.Do("res-bare", f.Token, func() error { return nil }))
			wrote := false
			err := fencer.DoFence("res", lateFence, func() error { wrote = true; return nil })
			require.ErrorIs(t, err, fencelock.ErrStaleToken, "the old holder's late write (%v) after the restored holder's (%v)", lateFence, f)
			err = fencer.Do("res-bare", lateFence.Token, func() error { wrote = true; return nil })
			require.ErrorIs(t, err, fencelock.ErrStaleToken, "the old holder's late bare-token write (%d) after the restored holder's (%d)", lateFence.Token, f.Token)
			require.False(t, wrote)
		}
		for _, o := range old {
			require.NotEqual(t, o, f, "grant %d of the restored deployment reissues a fence of the old one", i)
			require.Greater(t, f.Token, o.Token, "grant %d of the restored deployment (%v) is below a fence of the old one (%v)", i, f, o)
		}
		require.NoError(t, l.Release(ctx))
	}
	for _, s := range sessions {
		for _, id := range oldSessions {
			require.Greater(t, s.ID(), id, "a restored session's ID is above the old deployment's")
		}
		require.NoError(t, s.Close(ctx))
	}
}
