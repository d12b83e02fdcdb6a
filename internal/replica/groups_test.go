package replica

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/peering"
)

// The groups file comes from disk: whatever its bytes, decodeGroups
// returns a consistent list or an error, and never panics.
func FuzzDecodeGroups(f *testing.F) {
	good, _ := json.Marshal(groupsFile{Version: 1, Groups: []namedGroup{
		{Name: "a", Group: namedDigest(0, "a", []uint64{1, 2, 3}), Voters: []uint64{1, 2, 3}, Bootstrap: map[uint64]string{1: "a:1", 2: "b:1", 3: "c:1"}},
		{Name: "b", Group: namedDigest(0, "b", []uint64{3}), Voters: []uint64{3}},
	}})
	f.Add(good)
	f.Add([]byte(`{"version":1,"groups":[]}`))
	f.Add([]byte(`{"version":2,"groups":[]}`))
	f.Add([]byte(`{"version":1,"groups":[{"name":"a","group":"x","voters":[1]},{"name":"a","group":"y","voters":[1]}]}`))
	f.Add([]byte(`{"version":1,"groups":[{"name":"a","group":"x","voters":[1],"bootstrap":{"2":"b:1"}}]}`))
	f.Add([]byte(`{"version":1,"table":true,"groups":[{"name":"a","group":"x","voters":[1],"shard":7},{"name":"b","group":"y","voters":[1],"shard":7}]}`))
	f.Add([]byte(`{"version":1,"table":true,"groups":[{"name":"a","group":"x","voters":[1],"shard":1}]}`))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := decodeGroups("f", b)
		if err != nil {
			return
		}
		require.Equal(t, 1, g.Version)
		seen := map[string]bool{}
		shards := map[uint64]bool{}
		for _, x := range g.Groups {
			require.Greater(t, x.shard(), uint64(1))
			require.False(t, shards[x.shard()], "two groups on one shard")
			shards[x.shard()] = true
			require.NotEmpty(t, x.Name)
			require.NotEmpty(t, x.Group)
			require.NotEmpty(t, x.Voters)
			require.False(t, seen[x.Name])
			seen[x.Name] = true
			for id := range x.Bootstrap {
				require.Contains(t, x.Voters, id)
			}
		}
	})
}

func TestGroupShardID(t *testing.T) {
	require.Equal(t, uint64(1), GroupShardID(""), "the default group keeps the shard it always had")
	require.Equal(t, GroupShardID("billing"), GroupShardID("billing"))
	require.NotEqual(t, GroupShardID("billing"), GroupShardID("billinG"))
	require.Greater(t, GroupShardID("a"), uint64(1))
}

// loadGroups keeps the identities in Dir: a restart with other voters runs
// the group as kept, a new group is added, and a group no longer configured is
// reported for the removal check.
func TestLoadGroups(t *testing.T) {
	dir := t.TempDir()
	members := map[uint64]string{1: "a:1", 2: "b:1", 3: "c:1"}
	def := groupFile{Version: 1, Group: groupDigest(0, members), Members: members}
	cfg := Config{ReplicaID: 1, Members: members, Dir: dir, Groups: []GroupConfig{{Name: "a", Voters: []uint64{3, 2, 1}}, {Name: "b", Voters: []uint64{3}}}}
	named, retired, err := loadGroups(cfg, def)
	require.NoError(t, err)
	require.Empty(t, retired)
	require.Equal(t, []uint64{1, 2, 3}, named[0].Voters, "voters are kept sorted")
	require.Equal(t, members, named[0].Bootstrap, "a voter bootstraps with the voters' addresses")
	require.Nil(t, named[1].Bootstrap, "a non-voter joins")

	// Other voters (SetVoters moved the group while this Dir never read
	// the group table): the group runs as kept, with a warning.
	var logged bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	cfg.Groups[0].Voters = []uint64{1}
	named, _, err = loadGroups(cfg, def)
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, named[0].Voters, "the voters it bootstrapped with")
	require.Equal(t, members, named[0].Bootstrap)
	require.Contains(t, logged.String(), `Groups[0] \"a\": Voters [1] differ from the voters [1 2 3] this replica first ran it with (kept in Dir); it runs the group as it first did`)
	cfg.Logger = nil

	cfg.Groups = []GroupConfig{{Name: "b", Voters: []uint64{3}}, {Name: "c", Voters: []uint64{1}}}
	named, retired, err = loadGroups(cfg, def)
	require.NoError(t, err)
	require.Equal(t, []string{"b", "c"}, []string{named[0].Name, named[1].Name})
	require.Len(t, retired, 1)
	require.Equal(t, "a", retired[0].Name)
	// Until the removal check passes, the file still knows a.
	f, err := readGroups(filepath.Join(dir, groupsFileName))
	require.NoError(t, err)
	require.Len(t, f.Groups, 3)

	require.NoError(t, os.WriteFile(filepath.Join(dir, groupsFileName), []byte("{"), 0o600))
	_, _, err = loadGroups(cfg, def)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// The handshake compares the groups both sides run, and only those.
func TestCheckGroups(t *testing.T) {
	g := func(name string, voters ...uint64) peering.GroupHello {
		return peering.GroupHello{Name: name, Group: namedDigest(0, name, voters), Voters: voters}
	}
	here := peering.Hello{Replica: 1, Addr: "a:1", Groups: []peering.GroupHello{g("a", 1, 2, 3), g("b", 1)}}
	require.NoError(t, checkGroups(peering.Hello{Replica: 2, Addr: "b:1", Groups: []peering.GroupHello{g("a", 1, 2, 3)}}, here), "b known here only: a rolling restart")
	require.NoError(t, checkGroups(peering.Hello{Replica: 2, Addr: "b:1", Groups: []peering.GroupHello{g("c", 2)}}, here))
	err := checkGroups(peering.Hello{Replica: 2, Addr: "b:1", Groups: []peering.GroupHello{g("a", 1, 2, 4)}}, here)
	require.ErrorContains(t, err, `runs group "a" with voters [1 2 4], this replica with [1 2 3]`)
	// It names the mend too: a moved group (SetVoters) keeps its first
	// voters as its identity, so the current voters are no remedy.
	require.ErrorIs(t, err, errFirstVoters)
	require.ErrorContains(t, err, "first started with")
	other := g("a", 1, 2, 3)
	other.Group = namedDigest(7, "a", []uint64{1, 2, 3})
	err = checkGroups(peering.Hello{Replica: 2, Addr: "b:1", Groups: []peering.GroupHello{other}}, here)
	require.ErrorContains(t, err, "another DeploymentID")
	inc := g("b", 1)
	inc.GroupID = 5
	here.Groups[1].GroupID = 6
	err = checkGroups(peering.Hello{Replica: 2, Addr: "b:1", Groups: []peering.GroupHello{inc}}, here)
	require.ErrorContains(t, err, "another incarnation of group \"b\"")

	// The same name on another shard is a group dropped and created again,
	// one side not knowing yet: not compared, whatever its voters. A peer
	// that names no shard runs the group on the shard its name gives.
	again := g("a", 4)
	again.Shard = 77
	require.NoError(t, checkGroups(peering.Hello{Replica: 2, Addr: "b:1", Groups: []peering.GroupHello{again}}, here))
	named := g("a", 1, 2, 4)
	named.Shard = GroupShardID("a")
	err = checkGroups(peering.Hello{Replica: 2, Addr: "b:1", Groups: []peering.GroupHello{named}}, here)
	require.ErrorContains(t, err, `runs group "a" with voters [1 2 4]`)
}

// The bound is ⌈G/H⌉ per host, over the groups it votes in.
func TestLeaderBound(t *testing.T) {
	v := func(leader uint64, voters ...uint64) groupView { return groupView{voters: voters, leader: leader} }
	views := []groupView{v(1, 1, 2, 3), v(1, 1, 2, 3), v(1, 1, 2, 3), v(2, 1, 2, 3), v(0, 3)}
	require.Equal(t, map[uint64]int{1: 3, 2: 1}, leaderCounts(views))
	require.Equal(t, 2, leaderBound(views, 1), "4 groups over 3 hosts")
	require.Equal(t, 2, leaderBound(views, 3), "5 groups over 3 hosts")
	require.Equal(t, 0, leaderBound(views, 9), "votes in none")
	five := []groupView{v(1, 1, 2, 3, 4, 5), v(1, 1, 2, 3), v(3, 3, 4, 5)}
	require.Equal(t, 1, leaderBound(five, 1))
	require.Equal(t, 1, leaderBound(five, 3))
	// A leader that is not a voter (a stale view) is counted for nobody.
	require.Empty(t, leaderCounts([]groupView{v(4, 1, 2, 3)}))
}

// The balancer moves only from a host over its bound to a reachable voter
// below its own, deterministically; so two hosts never hand a group back
// and forth.
func TestPickTransfer(t *testing.T) {
	v := func(leader uint64, voters ...uint64) groupView { return groupView{voters: voters, leader: leader} }
	all := func(uint64) bool { return true }
	// 8 groups on 3 hosts, bound 3: host 1 leads 5.
	views := []groupView{v(1, 1, 2, 3), v(1, 1, 2, 3), v(2, 1, 2, 3), v(1, 1, 2, 3), v(3, 1, 2, 3), v(1, 1, 2, 3), v(2, 1, 2, 3), v(1, 1, 2, 3)}
	i, to, ok := pickTransfer(views, 1, all)
	require.True(t, ok)
	require.Equal(t, 0, i, "the first group it leads")
	require.Equal(t, uint64(3), to, "the voter leading fewest (3 leads 1, 2 leads 2)")
	for _, id := range []uint64{2, 3} {
		_, _, ok := pickTransfer(views, id, all)
		require.False(t, ok, "host %d is within its bound: it never gives", id)
	}
	// Host 3 unreachable: host 2 gets it.
	_, to, ok = pickTransfer(views, 1, func(id uint64) bool { return id != 3 })
	require.True(t, ok)
	require.Equal(t, uint64(2), to)
	// The only voter below its bound is unreachable (down): nothing moves,
	// though host 1 is over its bound.
	down := []groupView{v(1, 1, 2), v(1, 1, 2), v(1, 1, 2), v(2, 1, 2)}
	_, _, ok = pickTransfer(down, 1, func(uint64) bool { return false })
	require.False(t, ok)
	// Host 3 down leads nothing; hosts 1 and 2 at bound 3 share 7: the one
	// with 4 finds no target below the bound, so nothing oscillates.
	share := []groupView{v(1, 1, 2, 3), v(1, 1, 2, 3), v(1, 1, 2, 3), v(1, 1, 2, 3), v(2, 1, 2, 3), v(2, 1, 2, 3), v(2, 1, 2, 3)}
	_, _, ok = pickTransfer(share, 1, func(id uint64) bool { return id == 2 })
	require.False(t, ok)
	_, _, ok = pickTransfer(share, 2, func(id uint64) bool { return id == 1 })
	require.False(t, ok)
	at := []groupView{v(1, 1, 2, 3), v(1, 1, 2, 3), v(2, 1, 2, 3), v(3, 1, 2, 3)}
	_, _, ok = pickTransfer(at, 1, all)
	require.False(t, ok, "4 groups over 3 hosts: bound 2, host 1 leads 2")
	// A group with a voter set that excludes the under-loaded host is
	// skipped for one that includes it.
	mixed := []groupView{v(1, 1, 2), v(1, 1, 3), v(1, 1, 3), v(2, 1, 2)}
	i, to, ok = pickTransfer(mixed, 1, all)
	require.True(t, ok)
	require.Equal(t, 1, i)
	require.Equal(t, uint64(3), to)
}
