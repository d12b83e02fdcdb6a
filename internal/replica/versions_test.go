package replica

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/peering"
	"github.com/fencelock/fencelock/internal/replica/gate"
)

// hostWithGates is a Host of the groups named, each writing the gate given,
// for the handshake's checks.
func hostWithGates(t *testing.T, gates map[string]fsm.Gate) (*Host, *peers) {
	h := &Host{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	set := &groupSet{byName: map[string]*Replica{}, byShard: map[uint64]*Replica{}}
	for _, name := range []string{"", "jobs"} {
		g, ok := gates[name]
		if !ok {
			continue
		}
		r := newReplica(h, name, 0, nil) // never started: its proposer's loop alone runs
		t.Cleanup(func() {
			r.Stop()
			r.Wait()
		})
		r.Writes.Store(&g)
		set.list = append(set.list, r)
		set.byName[name] = r
	}
	h.gset.Store(set)
	return h, &peers{h: h}
}

func TestAnnounced(t *testing.T) {
	require.Equal(t, fsm.Baseline, gate.Announced(peering.Hello{Replica: 1, Addr: "a:1"}), "a build before the gate announces nothing")
	require.Equal(t, fsm.Gate{Codec: 9, Snapshot: 7}, gate.Announced(peering.Hello{Codec: 9, Snapshot: 7}))
	require.Equal(t, fsm.Gate{Codec: 9, Snapshot: 6}, gate.Announced(peering.Hello{Codec: 9}))
}

// A peer that reads less than a group it runs writes is refused, the
// versions named; one that reads as much, or does not run the group, is
// not; what it announced is kept, and wakes the groups' leaders.
func TestCheckReads(t *testing.T) {
	raised := fsm.Gate{Codec: 9, Snapshot: 7}
	old := peering.Hello{Replica: 3, Addr: "c:1"}
	newer := peering.Hello{Replica: 3, Addr: "c:1", Codec: 9, Snapshot: 7}

	_, p := hostWithGates(t, map[string]fsm.Gate{"": fsm.Baseline, "jobs": fsm.Baseline})
	require.NoError(t, p.checkReads(old), "everything writes the baseline")

	_, p = hostWithGates(t, map[string]fsm.Gate{"": raised})
	require.EqualError(t, p.checkReads(old), "replica 3 at c:1 reads log versions up to 8 and snapshot versions up to 6, "+
		"but the default group writes log version 9, snapshot version 7: it cannot read the group's entries. "+
		`Run a build on replica 3 that reads them (a replica cannot go back to a build older than what its groups write: docs/operations.md, "Upgrading")`)
	require.NoError(t, p.checkReads(newer))

	_, p = hostWithGates(t, map[string]fsm.Gate{"": fsm.Baseline, "jobs": raised})
	require.NoError(t, p.checkReads(old), "it does not run jobs")
	old.Groups = []peering.GroupHello{{Name: "jobs"}}
	require.ErrorContains(t, p.checkReads(old), `group "jobs" writes log version 9, snapshot version 7`)

	h, p := hostWithGates(t, map[string]fsm.Gate{"": fsm.Baseline, "jobs": fsm.Baseline})
	_, ok := p.readsOf(3)
	require.False(t, ok)
	p.recordReads(3, fsm.Baseline)
	got, ok := p.readsOf(3)
	require.True(t, ok)
	require.Equal(t, fsm.Baseline, got)
	for _, r := range h.groups() {
		if !r.TestingGateNudged() {
			t.Fatalf("group %q's leader was not woken", r.Name())
		}
	}
	p.recordReads(3, fsm.Baseline)
	for _, r := range h.groups() {
		require.False(t, r.TestingGateNudged(), "nothing new, nobody woken")
	}
	p.recordReads(3, raised)
	got, _ = p.readsOf(3)
	require.Equal(t, raised, got, "a restart with another build is heard")
}

// Once a group of the Dir writes more than the baseline, the Dir's
// identity file is version 2, which a build from before the gate refuses
// at its start (it knows version 1 only), before it would replay entries
// it cannot read; a gate at the baseline leaves it at version 1, so that
// a replica may still go back while the group writes what the old build
// reads. The identity stays what it was, and a joining replica's adoption
// keeps version 2. (cmd/fencelock's TestReleasedBuildRefusesAnUpgradedDir
// runs the released build itself.)
func TestGateAboveBaselineRefusesOldBuilds(t *testing.T) {
	for _, join := range []bool{false, true} {
		dir := t.TempDir()
		cfg := &Config{Dir: dir, Members: map[uint64]string{1: "a:1"}, Join: join}
		g, err := loadGroup(cfg)
		require.NoError(t, err)
		v, err := gate.Load(dir, []string{""})
		require.NoError(t, err)
		h := &Host{cfg: *cfg, versions: v}
		h.peers = &peers{h: h, path: filepath.Join(dir, groupFileName), fileVersion: g.Version,
			hello: peering.Hello{Group: g.Group, Members: g.Members}}
		releasedReads := func() error { // the released build's check of the file
			data, err := os.ReadFile(filepath.Join(dir, groupFileName))
			if err != nil {
				return err
			}
			var f struct{ Version int }
			require.NoError(t, json.Unmarshal(data, &f))
			if f.Version != 1 {
				return fmt.Errorf("version %d", f.Version)
			}
			return nil
		}

		require.NoError(t, h.keepGate("", fsm.Baseline))
		if !join { // a joining replica has no file until it adopts a group
			require.NoError(t, releasedReads(), "at the baseline, the old build may still start")
		}
		require.NoError(t, h.keepGate("", fsm.Reads()))
		require.EqualError(t, releasedReads(), "version 2", "join %v", join)
		got, err := readGroup(filepath.Join(dir, groupFileName))
		require.NoError(t, err, "this build reads it")
		require.Equal(t, groupFile{Version: 2, Group: g.Group, Members: g.Members, Note: gatedNote}, got)
		if join {
			h.peers.adopt(peering.Hello{Group: "abc", Members: map[uint64]string{2: "b:1"}})
			got, err = readGroup(filepath.Join(dir, groupFileName))
			require.NoError(t, err)
			require.Equal(t, groupFile{Version: 2, Group: "abc", Members: map[uint64]string{2: "b:1"}, Note: gatedNote}, got)
		}
	}
}
