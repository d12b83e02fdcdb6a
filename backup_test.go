package fencelock

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/transport"
)

// restoredCluster makes a new deployment of size replicas (a new network,
// so new addresses, and new Dirs) whose every replica is first seeded from
// the backup by Restore, as docs/operations.md's disaster recovery does, and
// then started.
func restoredCluster(t *testing.T, file []byte, size int, tune func(*Config)) *testCluster {
	t.Helper()
	c := unstartedCluster(t, transport.NewNetwork(uint64(size)+100), size, tune)
	for id := range c.members {
		_, err := Restore(bytes.NewReader(file), c.config(id))
		require.NoError(t, err)
	}
	c.startAll()
	return c
}

// TestBackupUnderLoadRestoresIntoNewDeployment takes a backup of a
// three-replica deployment with a named group while sessions hold locks and
// a writer loops acquire/release, then makes a new three-replica deployment
// from it (new addresses, new Dirs): every lock of the backup is held there
// by the same session with the same token and group ID, the sessions resume
// within their TTL with their ResumeTokens (one not resumed ends at its
// TTL, its locks passing on), and the first grants are above every token
// in the backup.
func TestBackupUnderLoadRestoresIntoNewDeployment(t *testing.T) {
	ctx := testCtx(t)
	groups := withGroups(GroupConfig{Name: "billing", Voters: []uint64{1, 2, 3}})
	src := newCluster(t, 3, groups)
	// The backup is to carry the group table: the deployment seeds it from
	// Config.Groups once its gate is raised (version-9 commands), a moment
	// after start. (A backup from before that restores with the restoring
	// deployment's Config.Groups, as one from before the table did.)
	waitUntil(t, ctx, "the group table is seeded", func() bool {
		_, set, err := src.node(1).host.GroupTable(ctx)
		return err == nil && set
	})

	keeper, err := src.node(1).NewSession(ctx, WithTTL(20*time.Second), WithSessionName("keeper"))
	require.NoError(t, err)
	quitter, err := src.node(2).NewSession(ctx, WithTTL(2*time.Second), WithSessionName("quitter"))
	require.NoError(t, err)
	held := map[string]*Lock{}
	for _, name := range []string{"jobs/a", "jobs/b", "inv@billing"} {
		l, err := keeper.Acquire(ctx, name)
		require.NoError(t, err)
		held[name] = l
	}
	ql, err := quitter.Acquire(ctx, "jobs/q")
	require.NoError(t, err)
	keeperToken := keeper.Resume()

	// The writer loops acquire/release on a lock of each group until the
	// backup is taken.
	writer, err := src.node(3).NewSession(ctx, WithTTL(20*time.Second), WithSessionName("writer"))
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var grants atomic.Int64
	for _, name := range []string{"hot", "hot@billing"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				l, err := writer.Acquire(ctx, name)
				if err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				grants.Add(1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
			}
		}()
	}
	for grants.Load() < 20 {
		time.Sleep(10 * time.Millisecond)
	}
	var file bytes.Buffer
	require.NoError(t, src.node(2).Snapshot(ctx, &file))
	before := grants.Load()
	for grants.Load() < before+20 { // the load goes on after the backup
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	info, err := ReadBackup(bytes.NewReader(file.Bytes()))
	require.NoError(t, err)
	require.Len(t, info.Groups, 2)
	require.Equal(t, "", info.Groups[0].Name)
	require.Equal(t, "billing", info.Groups[1].Name)
	srcStatus := src.node(1).Status()
	for i, g := range info.Groups {
		require.Equal(t, srcStatus.Groups[i].GroupID, g.GroupID, "group %q", g.Name)
		require.Len(t, g.Voters, 3)
		require.NotZero(t, g.Index)
		require.GreaterOrEqual(t, g.Sessions, 2) // keeper and writer (and quitter in the default group)
	}
	require.GreaterOrEqual(t, info.Groups[0].Locks, 3) // jobs/a, jobs/b, jobs/q (and hot, if held then)
	for name, l := range held {
		g := info.Groups[0]
		if name == "inv@billing" {
			g = info.Groups[1]
		}
		require.LessOrEqual(t, l.Token(), g.LastToken, name)
	}

	// Session IDs in each group, taken before the sessions end with their
	// node.
	keeperBilling, _ := keeper.IDIn("billing")
	writerBilling, _ := writer.IDIn("billing")
	require.NotZero(t, keeperBilling)

	// The disaster: the whole deployment is gone.
	src.closeAll()

	restoreRefusals(t, file.Bytes(), groups)

	dst := restoredCluster(t, file.Bytes(), 3, groups)
	dst.leader(ctx)
	n := dst.node(3)
	st := n.Status()
	for i, g := range info.Groups {
		require.Equal(t, g.GroupID, st.Groups[i].GroupID, "group %q keeps its ID", g.Name)
	}
	// Every lock of the backup is held, by its session, with its token.
	for name, l := range held {
		li, err := n.Inspect(ctx, name)
		require.NoError(t, err)
		require.True(t, li.Held, name)
		require.Equal(t, l.Token(), li.Token, name)
		id := keeper.ID()
		if name == "inv@billing" {
			id = keeperBilling
		}
		require.Equal(t, id, li.PartID, name)
	}
	li, err := n.Inspect(ctx, "jobs/q")
	require.NoError(t, err)
	require.True(t, li.Held)
	require.Equal(t, ql.Token(), li.Token)
	for _, name := range []string{"hot", "hot@billing"} { // held by the writer at the backup, or free
		li, err := n.Inspect(ctx, name)
		require.NoError(t, err)
		if li.Held {
			id := writer.ID()
			if name == "hot@billing" {
				id = writerBilling
			}
			require.Equal(t, id, li.PartID, name)
		}
	}

	// The keeper resumes its session with its token: the same grants.
	resumed, err := dst.node(1).ResumeSession(ctx, keeperToken)
	require.NoError(t, err)
	got := map[string]uint64{}
	for _, l := range resumed.Locks() {
		got[l.Name()] = l.Token()
		if l.Name() == "inv@billing" {
			require.Equal(t, info.Groups[1].GroupID, l.Fence().Group)
		} else {
			require.Equal(t, info.Groups[0].GroupID, l.Fence().Group)
		}
	}
	for name, l := range held {
		require.Equal(t, l.Token(), got[name], name)
	}

	// New grants are above every token of the backup, in each group.
	fresh, err := n.NewSession(ctx)
	require.NoError(t, err)
	for i, name := range []string{"fresh", "fresh@billing"} {
		l, err := fresh.Acquire(ctx, name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), info.Groups[i].LastToken, name)
		require.Equal(t, uint64(1), info.Groups[i].RestoreEpoch, name)
		require.Equal(t, info.Groups[i].RestoreEpoch, l.Token()>>56, "%s: a token of the restore's epoch", name)
	}
	// The quitter never resumes: its session ends at its TTL, and its lock
	// passes to the next waiter.
	waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	next, err := fresh.Acquire(waitCtx, "jobs/q")
	require.NoError(t, err)
	require.Greater(t, next.Token(), info.Groups[0].LastToken)
	_, err = dst.node(2).ResumeSession(ctx, quitter.Resume())
	require.True(t, errors.Is(err, ErrSessionExpired), "%v", err)

	// A restored replica restarts on its Dir like any other (its imported
	// groups start without a members list: fencelock-restored.json).
	dst.stop(2)
	dst.start(2)
	li, err = dst.node(2).Inspect(ctx, "inv@billing")
	require.NoError(t, err)
	require.Equal(t, held["inv@billing"].Token(), li.Token)
	require.NoError(t, resumed.Close(ctx))
	require.NoError(t, fresh.Close(ctx))
	dst.closeAll()

	// Restored with other voters for billing in Groups (replica 1 alone):
	// the backup's group table rules, so billing is voted by 1, 2 and 3 as
	// the table says; SetVoters then gives it replica 1 alone, and 2 and 3
	// stop running it.
	other := restoredCluster(t, file.Bytes(), 3, withGroups(GroupConfig{Name: "billing", Voters: []uint64{1}}))
	m, err := other.node(1).MembersOf(ctx, "billing")
	require.NoError(t, err)
	require.Len(t, m.Voters, 3, "the table's voters")
	li, err = other.node(3).Inspect(ctx, "inv@billing")
	require.NoError(t, err)
	require.True(t, li.Held)
	require.Equal(t, held["inv@billing"].Token(), li.Token)
	require.Equal(t, keeperBilling, li.PartID)
	require.NoError(t, other.node(1).SetVoters(ctx, "billing", []uint64{1}))
	li, err = other.node(1).Inspect(ctx, "inv@billing")
	require.NoError(t, err)
	require.Equal(t, held["inv@billing"].Token(), li.Token)
}

// restoreRefusals: a damaged or truncated file is refused with
// ErrInvalidBackup, a Dir in use or a deployment without the backup's
// groups with ErrInvalidConfig; each leaves the Dir as it was.
func restoreRefusals(t *testing.T, file []byte, groups func(*Config)) {
	t.Helper()
	net := transport.NewNetwork(7)
	cfg := Config{ReplicaID: 1, Members: map[uint64]string{1: net.Addr(1)}, Dir: filepath.Join(t.TempDir(), "r"),
		Transport: net, Logger: quietLogger}
	groups(&cfg)
	cfg.Groups = []GroupConfig{{Name: cfg.Groups[0].Name, Voters: []uint64{1}}} // a copy: the tune's slice is shared
	for _, bad := range [][]byte{file[:len(file)-1], file[:len(file)/2], append(bytes.Clone(file[:100]), 0xff)} {
		_, err := Restore(bytes.NewReader(bad), cfg)
		require.ErrorIs(t, err, ErrInvalidBackup)
		_, err = os.Stat(cfg.Dir)
		require.True(t, os.IsNotExist(err), "%v", err)
	}
	damaged := bytes.Clone(file)
	damaged[len(damaged)/3] ^= 1
	_, err := Restore(bytes.NewReader(damaged), cfg)
	require.ErrorIs(t, err, ErrInvalidBackup)

	noBilling := cfg
	noBilling.Groups = nil
	_, err = Restore(bytes.NewReader(file), noBilling)
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.Contains(t, err.Error(), `group "billing"`)
	_, err = os.Stat(cfg.Dir)
	require.True(t, os.IsNotExist(err), "%v", err)

	require.NoError(t, os.MkdirAll(cfg.Dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(cfg.Dir, "x"), nil, 0o600))
	_, err = Restore(bytes.NewReader(file), cfg)
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.Contains(t, err.Error(), "not empty")
	entries, err := os.ReadDir(cfg.Dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
}
