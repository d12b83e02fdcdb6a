package fencelock

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/backup"
	"github.com/fencelock/fencelock/transport"
)

// noExportDirs waits until no replica's Dir holds a backup's temporary
// export directory (a voter removes its own once it sent the copy, which
// may be just after the caller has it).
func noExportDirs(t *testing.T, ctx context.Context, c *testCluster) {
	t.Helper()
	waitUntil(t, ctx, "no .snapshot-export-* directory left", func() bool {
		for _, dir := range c.dirs {
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".snapshot-export-") {
					return false
				}
			}
		}
		return true
	})
}

// Five replicas that run only their own groups: a on 1, 2, 3 and b on
// 3, 4, 5. A backup taken on replica 1, which runs no shard of b, holds
// both groups (b's copy exported by one of b's voters, the one that fed
// 1's mirror being stopped first), and restores into a new deployment
// where every lock is held with its token and new grants in b are above
// the backup's. The same file without b's copy, whose group table still
// names b, is refused by Restore before anything is written.
func TestBackupOwnGroupsHoldsEveryGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	groups := withPlacement(PlaceOwnGroups,
		GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}, GroupConfig{Name: "b", Voters: []uint64{3, 4, 5}})
	src := newCluster(t, 5, groups)
	src.waitTable(ctx)
	src.waitStatus(ctx, "a runs on 1-3 and b on 3-5, with leaders", func(id uint64, st Status) bool {
		_, a := group(st, "a")
		_, b := group(st, "b")
		return a == (id <= 3) && b == (id >= 3) && allLeaders(st)
	})

	const ttl = 30 * time.Second
	s1 := newSession(t, ctx, src.node(1), WithTTL(ttl))
	s5 := newSession(t, ctx, src.node(5), WithTTL(ttl))
	held := map[string]*Lock{}
	for _, x := range []struct {
		s    *Session
		name string
	}{{s1, "x@a"}, {s1, "y@b"}, {s5, "z@b"}, {s5, "w@a"}, {s1, "plain"}} {
		l, err := x.s.Acquire(ctx, x.name)
		require.NoError(t, err)
		held[x.name] = l
	}
	require.False(t, runs(src.node(1), "b"))
	feeder := mirrorServer(src.node(1), "b")
	require.Contains(t, []uint64{3, 4, 5}, feeder)
	// b keeps its quorum on the other two; replica 1's backup must get b
	// from one of them.
	src.stop(feeder)

	var file bytes.Buffer
	require.NoError(t, src.node(1).Snapshot(ctx, &file))
	require.False(t, runs(src.node(1), "b"), "a backup starts no shard of b on replica 1")
	noExportDirs(t, ctx, src)

	info, err := ReadBackup(bytes.NewReader(file.Bytes()))
	require.NoError(t, err)
	require.Equal(t, uint64(1), info.TakenBy)
	require.Len(t, info.Groups, 3)
	last := map[string]uint64{}
	for i, name := range []string{"", "a", "b"} {
		g := info.Groups[i]
		require.Equal(t, name, g.Name)
		require.NotZero(t, g.GroupID, name)
		require.NotZero(t, g.Index, name)
		last[name] = g.LastToken
	}
	require.Equal(t, 2, info.Groups[2].Locks, "y@b and z@b")
	require.Len(t, info.Groups[2].Voters, 3)
	groupOf := func(name string) string {
		if i := strings.LastIndex(name, "@"); i >= 0 {
			return name[i+1:]
		}
		return ""
	}
	for name, l := range held {
		require.LessOrEqual(t, l.Token(), last[groupOf(name)], name)
	}
	src.closeAll()

	// The same backup without b's copy, its table still naming b: refused,
	// naming b, before anything is written.
	noB := withoutGroup(t, file.Bytes(), "b")
	_, err = ReadBackup(bytes.NewReader(noB))
	require.ErrorIs(t, err, ErrInvalidBackup)
	require.ErrorContains(t, err, `group "b"`)
	net := transport.NewNetwork(9)
	cfg := Config{ReplicaID: 3, Members: map[uint64]string{}, Dir: filepath.Join(t.TempDir(), "r"), Transport: net, Logger: quietLogger}
	for id := uint64(1); id <= 5; id++ {
		cfg.Members[id] = net.Addr(id)
	}
	groups(&cfg)
	_, err = Restore(bytes.NewReader(noB), cfg)
	require.ErrorIs(t, err, ErrInvalidBackup)
	require.ErrorContains(t, err, `group "b"`)
	_, err = os.Stat(cfg.Dir)
	require.True(t, os.IsNotExist(err), "%v", err)

	dst := restoredCluster(t, file.Bytes(), 5, groups)
	dst.waitStatus(ctx, "a runs on 1-3 and b on 3-5, with leaders", func(id uint64, st Status) bool {
		_, a := group(st, "a")
		_, b := group(st, "b")
		return a == (id <= 3) && b == (id >= 3) && allLeaders(st)
	})
	for name, l := range held {
		for _, id := range []uint64{1, 4} {
			li, err := dst.node(id).Inspect(ctx, name)
			require.NoError(t, err, name)
			require.True(t, li.Held, "%s on replica %d", name, id)
			require.Equal(t, l.Token(), li.Token, "%s on replica %d", name, id)
		}
	}
	fresh := newSession(t, ctx, dst.node(1), WithTTL(ttl))
	for _, name := range []string{"new@b", "new@a"} {
		l, err := fresh.Acquire(ctx, name)
		require.NoError(t, err)
		require.Greater(t, l.Token(), last[groupOf(name)], name)
	}
	require.NoError(t, fresh.Close(ctx))
}

// withoutGroup re-encodes backup file without group name's section (its
// group table unchanged), as a build that copied only the groups its
// replica ran would have written it.
func withoutGroup(t *testing.T, file []byte, name string) []byte {
	t.Helper()
	b, err := backup.Decode(file)
	require.NoError(t, err)
	h := b.Header
	h.Groups = nil
	var src []backup.Source
	for _, s := range b.Sections {
		if s.Name == name {
			continue
		}
		h.Groups = append(h.Groups, s.Group)
		src = append(src, backup.Source{Meta: s.Meta, File: bytes.NewReader(s.File)})
	}
	require.Len(t, src, len(b.Sections)-1)
	var out bytes.Buffer
	require.NoError(t, backup.Encode(&out, h, src))
	return out.Bytes()
}

// A replica asked to export a group it does not run refuses, naming it. A
// backup on a replica that does not run group b fails with
// ErrUnavailable naming b, and each voter asked, once b's only voter is
// stopped: never a backup without b.
func TestBackupOwnGroupsFailsWithoutAGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src := newCluster(t, 5, withPlacement(PlaceOwnGroups,
		GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}, GroupConfig{Name: "b", Voters: []uint64{5}}))
	src.waitTable(ctx)
	src.waitStatus(ctx, "b runs on 5 only, with leaders", func(id uint64, st Status) bool {
		_, b := group(st, "b")
		return b == (id == 5) && allLeaders(st)
	})
	s := newSession(t, ctx, src.node(1), WithTTL(30*time.Second))
	_, err := s.Acquire(ctx, "y@b")
	require.NoError(t, err)
	var ok bytes.Buffer
	require.NoError(t, src.node(1).Snapshot(ctx, &ok), "with b's voter up")

	// The serving side: replica 2 does not run b and says so; replica 5
	// sends its copy, and neither keeps a temporary directory.
	_, err = src.node(1).host.TestingExport(ctx, src.addr(2), "b", t.TempDir())
	require.ErrorContains(t, err, `replica 2 does not run group "b"`)
	index, err := src.node(1).host.TestingExport(ctx, src.addr(5), "b", t.TempDir())
	require.NoError(t, err)
	require.NotZero(t, index)
	noExportDirs(t, ctx, src)

	src.stop(5)
	snapCtx, cancelSnap := context.WithTimeout(ctx, 30*time.Second)
	defer cancelSnap()
	var file bytes.Buffer
	err = src.node(1).Snapshot(snapCtx, &file)
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, `group "b"`)
	require.ErrorContains(t, err, "replica 5")
	_, err = ReadBackup(bytes.NewReader(file.Bytes()))
	require.ErrorIs(t, err, ErrInvalidBackup, "no backup without b")
	noExportDirs(t, ctx, src)
}
