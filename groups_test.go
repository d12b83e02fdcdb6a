package fencelock

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest/logtap"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/transport"
)

// withGroups returns a tune that sets Groups.
func withGroups(groups ...GroupConfig) func(*Config) {
	return func(c *Config) { c.Groups = groups }
}

// waitStatus polls every running node's Status until ok holds for all of
// them, or fails the test when ctx ends. Status is a local read without a
// change notification, so it is polled, as testCluster.leader does.
func (c *testCluster) waitStatus(ctx context.Context, what string, ok func(id uint64, st Status) bool) {
	c.t.Helper()
	for {
		all := true
		var last string
		for id, n := range c.nodes {
			st := n.Status()
			if !ok(id, st) {
				all = false
				last = fmt.Sprintf("replica %d: %+v", id, st.Groups)
				break
			}
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("%s: %v; last: %s", what, ctx.Err(), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// group returns the named group's status in st.
func group(st Status, name string) (GroupStatus, bool) {
	for _, g := range st.Groups {
		if g.Name == name {
			return g, true
		}
	}
	return GroupStatus{}, false
}

// openSession opens a session directly in a group's replica (the root's
// sessions use the default group until the session machinery is wired to
// the named ones); it returns the session's ID.
func openSession(ctx context.Context, n *Node, groupName string, ttl time.Duration) (uint64, error) {
	r := n.host.Group(groupName)
	res, err := r.Propose(ctx, fsm.Command{Kind: fsm.KindOpenSession, Nonce: uint64(time.Now().UnixNano()) | 1,
		TTL: uint64(ttl), Owner: n.cfg.ReplicaID})
	if err != nil {
		return 0, err
	}
	if res.Status != fsm.OK {
		return 0, fmt.Errorf("open session: %v", res.Status)
	}
	return res.Value, nil
}

// acquireIn takes lock name in a group's replica for session id.
func acquireIn(ctx context.Context, n *Node, groupName string, id, seq uint64, name string) (uint64, error) {
	res, err := n.host.Group(groupName).Propose(ctx, fsm.Command{Kind: fsm.KindAcquire, Session: id, Seq: seq, Name: name})
	if err != nil {
		return 0, err
	}
	if res.Status != fsm.Granted {
		return 0, fmt.Errorf("acquire %s: %v", name, res.Status)
	}
	return res.Value, nil
}

// allLeaders reports whether every group st shows has a leader and an ID
// known here (a shard that has not applied its group's first entry yet
// shows ID 0: TestGroupsDoneWhen read it so once, in CI).
func allLeaders(st Status) bool {
	for _, g := range st.Groups {
		if g.LeaderID == 0 || g.GroupID == 0 {
			return false
		}
	}
	return true
}

// Five replicas, groups a (voters 1,2,3) and b (3,4,5): every host runs
// every group (non-voting where it does not vote), their views agree, a
// group without its quorum stops while the other commits, and it comes back
// under the same group ID.
func TestGroupsFiveReplicas(t *testing.T) {
	c := newCluster(t, 5, withGroups(GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}, GroupConfig{Name: "b", Voters: []uint64{3, 4, 5}}))
	ctx := testCtx(t)
	voters := map[string][]uint64{"": {1, 2, 3, 4, 5}, "a": {1, 2, 3}, "b": {3, 4, 5}}

	// Every host runs the three groups; the non-voters of a and b are
	// added as non-voting replicas by the groups' leaders.
	c.waitStatus(ctx, "every host runs every group", func(id uint64, st Status) bool {
		if len(st.Groups) != 3 || st.Groups[0].Name != "" || st.Groups[1].Name != "a" || st.Groups[2].Name != "b" {
			return false
		}
		for _, g := range st.Groups {
			isVoter := false
			for _, v := range voters[g.Name] {
				isVoter = isVoter || v == id
			}
			if g.LeaderID == 0 || g.GroupID == 0 || len(g.Voters) != len(voters[g.Name]) || g.NonVoting == isVoter {
				return false
			}
		}
		return true
	})
	// The views agree, and the top-level fields are the default group's.
	ref := c.node(1).Status()
	require.Equal(t, ref.GroupID, ref.Groups[0].GroupID)
	ids := map[uint64]string{}
	for _, g := range ref.Groups {
		require.NotContains(t, ids, g.GroupID, "each group has its own ID")
		ids[g.GroupID] = g.Name
		require.Contains(t, voters[g.Name], g.LeaderID, "group %q is led by one of its voters", g.Name)
	}
	c.waitStatus(ctx, "the views agree", func(id uint64, st Status) bool {
		for i, g := range st.Groups {
			if g.GroupID != ref.Groups[i].GroupID || g.LeaderID == 0 {
				return false
			}
			want, _ := group(c.node(1).Status(), g.Name)
			if g.LeaderID != want.LeaderID {
				return false
			}
		}
		return true
	})
	groupA := ref.Groups[1].GroupID

	// Replica 4 votes only in b, yet takes locks in a and b locally.
	for _, name := range []string{"a", "b"} {
		s, err := openSession(ctx, c.node(4), name, time.Minute)
		require.NoError(t, err)
		_, err = acquireIn(ctx, c.node(4), name, s, 1, "x@"+name)
		require.NoError(t, err)
	}

	// Without 1 and 2, a has no quorum; b commits through every host left.
	c.stop(1)
	c.stop(2)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	_, err := openSession(short, c.node(4), "a", time.Minute)
	cancel()
	require.ErrorIs(t, err, ErrUnavailable, "group a has 1 of its 3 voters")
	for _, id := range []uint64{3, 4, 5} {
		s, err := openSession(ctx, c.node(id), "b", time.Minute)
		require.NoError(t, err, "group b commits on replica %d while a has no quorum", id)
		_, err = acquireIn(ctx, c.node(id), "b", s, 1, fmt.Sprintf("w%d@b", id))
		require.NoError(t, err)
	}

	// 1 and 2 return: a recovers, under the same group ID.
	c.start(1)
	c.start(2)
	s, err := openSession(ctx, c.node(4), "a", time.Minute)
	require.NoError(t, err)
	_, err = acquireIn(ctx, c.node(4), "a", s, 1, "v@a")
	require.NoError(t, err)
	c.waitStatus(ctx, "a is back with its ID", func(id uint64, st Status) bool {
		g, ok := group(st, "a")
		return ok && g.GroupID == groupA && g.LeaderID != 0
	})
}

// A host keeps one message stream to each peer, whatever the groups: the
// groups' messages share its batches and its connection instead of being
// split over Dragonboat's default four streams (a group's is its shard ID
// modulo 4), each its own goroutine, batch and write.
func TestGroupsShareOneStreamPerPeer(t *testing.T) {
	var groups []GroupConfig
	residues := map[uint64]bool{replica.GroupShardID("") % 4: true}
	for i := range 7 {
		name := fmt.Sprintf("g%d", i)
		groups = append(groups, GroupConfig{Name: name, Voters: []uint64{1, 2, 3}})
		residues[replica.GroupShardID(name)%4] = true
	}
	require.GreaterOrEqual(t, len(residues), 3, "the groups would use several of Dragonboat's default streams")
	c := newCluster(t, 3, withGroups(groups...))
	ctx := testCtx(t)
	c.waitStatus(ctx, "every group has a leader", func(_ uint64, st Status) bool { return len(st.Groups) == 8 && allLeaders(st) })

	// Every host proposes in every group, so each sends to every group's
	// leader and each leader answers: every pair of hosts exchanges
	// messages of the groups either of them leads.
	for id, n := range c.nodes {
		s, err := n.NewSession(ctx)
		require.NoError(t, err)
		for _, g := range append([]GroupConfig{{Name: ""}}, groups...) {
			name := fmt.Sprintf("streams-%d", id)
			if g.Name != "" {
				name += "@" + g.Name
			}
			l, err := s.Acquire(ctx, name)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
		require.NoError(t, s.Close(ctx))
	}
	for id, n := range c.nodes {
		streams := n.host.TestingMessageStreams()
		require.Len(t, streams, 2, "replica %d reaches both peers: %v", id, streams)
		for target, k := range streams {
			require.Equal(t, 1, k, "replica %d: message connections to %s: %v", id, target, streams)
		}
	}
}

// TransferLeadership moves a group's leader and waits for it; it refuses
// unknown groups and targets that do not vote in the group.
func TestTransferLeadership(t *testing.T) {
	c := newCluster(t, 3, withGroups(GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}, GroupConfig{Name: "solo", Voters: []uint64{1}}))
	ctx := testCtx(t)
	// The balancer would undo a transfer that leaves a host above its
	// bound (a target that already leads the other group): the test places
	// the leaders itself.
	c.pauseBalancers()
	c.waitStatus(ctx, "leaders", func(_ uint64, st Status) bool { return allLeaders(st) })
	for _, name := range []string{"", "a"} {
		g, _ := group(c.node(1).Status(), name)
		to := g.LeaderID%3 + 1
		require.NoError(t, c.node(1).TransferLeadership(ctx, name, to), "group %q", name)
		g, _ = group(c.node(1).Status(), name)
		require.Equal(t, to, g.LeaderID, "group %q: replica 1 sees the new leader when the call returns", name)
		c.waitStatus(ctx, "all see the new leader", func(_ uint64, st Status) bool {
			g, _ := group(st, name)
			return g.LeaderID == to
		})
	}
	err := c.node(1).TransferLeadership(ctx, "nope", 2)
	require.ErrorIs(t, err, ErrUnknownGroup)
	err = c.node(1).TransferLeadership(ctx, "solo", 2)
	require.ErrorIs(t, err, ErrMembership, "2 does not vote in solo")
	err = c.node(2).TransferLeadership(ctx, "solo", 1)
	require.ErrorIs(t, err, ErrMembership, "2 does not vote in solo, so cannot ask for it")
}

func TestConfigGroupsValidation(t *testing.T) {
	members := map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: "127.0.0.1:7003"}
	for _, tc := range []struct {
		name   string
		join   bool
		groups []GroupConfig
		field  string // "" = valid
	}{
		{"none", false, nil, ""},
		{"one", false, []GroupConfig{{"billing", []uint64{1, 2, 3}}}, ""},
		{"single voter", false, []GroupConfig{{"a-1", []uint64{2}}}, ""},
		{"empty name", false, []GroupConfig{{"", []uint64{1}}}, "Groups[0].Name"},
		{"upper case", false, []GroupConfig{{"Billing", []uint64{1}}}, "Groups[0].Name"},
		{"at sign", false, []GroupConfig{{"a@b", []uint64{1}}}, "Groups[0].Name"},
		{"too long", false, []GroupConfig{{strings.Repeat("a", 33), []uint64{1}}}, "Groups[0].Name"},
		{"32 long", false, []GroupConfig{{strings.Repeat("a", 32), []uint64{1}}}, ""},
		{"twice", false, []GroupConfig{{"a", []uint64{1}}, {"a", []uint64{2}}}, `Groups[1] ("a").Name`},
		{"no voters", false, []GroupConfig{{"a", nil}}, `Groups[0] ("a").Voters`},
		{"even", false, []GroupConfig{{"a", []uint64{1, 2}}}, `Groups[0] ("a").Voters`},
		{"duplicate voter", false, []GroupConfig{{"a", []uint64{1, 1, 2}}}, `Groups[0] ("a").Voters`},
		{"not a member", false, []GroupConfig{{"a", []uint64{1, 2, 4}}}, `Groups[0] ("a").Voters`},
		{"joining non-voter", true, []GroupConfig{{"a", []uint64{1, 2, 3}}}, ""},
		{"joining voter", true, []GroupConfig{{"a", []uint64{4}}}, `Groups[0] ("a").Voters`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{ReplicaID: 1, Members: members, Dir: "d", Groups: tc.groups}
			if tc.join {
				cfg = Config{ReplicaID: 4, Join: true, Addr: "127.0.0.1:7004", Dir: "d", Groups: tc.groups}
			}
			err := cfg.Validate()
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.Contains(t, err.Error(), tc.field)
		})
	}
}

// A Config without Groups runs the default group alone, as before.
func TestNoGroupsIsTheDefaultGroup(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	c.waitStatus(ctx, "leader", func(_ uint64, st Status) bool { return allLeaders(st) && st.GroupID != 0 })
	st := c.node(1).Status()
	require.Len(t, st.Groups, 1)
	g := st.Groups[0]
	require.Equal(t, GroupStatus{Name: "", GroupID: st.GroupID, LeaderID: st.LeaderID, IsLeader: st.IsLeader,
		Voters: st.Voters, Term: g.Term, AppliedIndex: g.AppliedIndex, LastSnapshotIndex: g.LastSnapshotIndex, Writes: st.Writes}, g)
	require.Equal(t, []string{""}, c.node(1).host.Groups())
	require.Nil(t, c.node(1).host.Group("a"))
}

// Config.Groups only seeds the group table: a replica restarted with
// other voters for a group runs the table's group, and logs the difference.
// One started with other voters from an empty Dir (no table known yet: it
// bootstraps its Config's groups) is refused by its peers, and both sides
// log the difference.
func TestGroupIdentityIsChecked(t *testing.T) {
	tap := logtap.New(slog.LevelDebug)
	ctx := testCtx(t)
	c := newCluster(t, 3, func(cfg *Config) {
		cfg.Logger = tap.Logger()
		cfg.Groups = []GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
	})
	c.waitStatus(ctx, "leaders", func(_ uint64, st Status) bool { return allLeaders(st) })
	c.waitTable(ctx)

	// Restart 3 with other voters for a: it runs the table's a, with its
	// peers, and says what differs.
	c.stop(3)
	cfg := c.config(3)
	cfg.Groups = []GroupConfig{{Name: "a", Voters: []uint64{3}}}
	n3, err := Start(ctx, cfg)
	require.NoError(t, err)
	c.nodes[3] = n3
	tap.Wait(t, ctx, "Config.Groups differs from the deployment's group table", "a: voters [3] in Config.Groups, [1 2 3] in the table")
	_, err = openSession(ctx, n3, "a", time.Minute)
	require.NoError(t, err, "3 runs the table's a with 1 and 2")
	c.stop(3)

	// From an empty Dir, the peers refuse it and say why.
	cfg.Dir = filepath.Join(t.TempDir(), "3")
	n, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { n.Close() })
	// Both sides refuse, and say what differs.
	tap.Wait(t, ctx, "refused the replica at "+c.addr(3), `replica 3 at `+c.addr(3)+` runs group "a" with voters [3], this replica with [1 2 3]`)
	tap.Wait(t, ctx, "the replica at "+c.addr(3)+" refused", `runs group "a" with voters [1 2 3], this replica with [3]`)
	// 1 and 2 still form both groups.
	for _, name := range []string{"", "a"} {
		_, err := openSession(ctx, c.node(1), name, time.Minute)
		require.NoError(t, err)
	}
}

// waitTable waits until every running replica follows the group table.
func (c *testCluster) waitTable(ctx context.Context) {
	c.t.Helper()
	for id, n := range c.nodes {
		for !n.Status().FollowsGroupTable {
			select {
			case <-ctx.Done():
				c.t.Fatalf("replica %d does not follow the group table: %v", id, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// Config.Groups only seeds the group table. Restarted with a longer or a
// shorter list, a replica runs the table's groups, and the locks stay
// held; groups are added and dropped by the table (CreateGroup,
// DropGroup), with no restart.
func TestConfigGroupsOnlySeed(t *testing.T) {
	net := transport.NewNetwork(3)
	c := startCluster(t, net, 3, withGroups(GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}))
	ctx := testCtx(t)
	c.waitStatus(ctx, "leaders", func(_ uint64, st Status) bool { return allLeaders(st) })
	c.waitTable(ctx)
	sa, err := openSession(ctx, c.node(1), "a", time.Hour)
	require.NoError(t, err)
	tokenA, err := acquireIn(ctx, c.node(1), "a", sa, 1, "held@a")
	require.NoError(t, err)
	holds := func(n *Node, group string, session uint64, name string, token uint64) bool {
		v, err := n.host.Group(group).Read(ctx, fsm.Query(func(s *fsm.State) any { return s.Holds(session, name, token) }))
		require.NoError(t, err)
		return v.(bool)
	}

	// A rolling restart with b added, then with a removed: nothing
	// changes but the logs.
	for _, groups := range [][]GroupConfig{
		{{Name: "a", Voters: []uint64{1, 2, 3}}, {Name: "b", Voters: []uint64{1, 2, 3}}},
		{{Name: "b", Voters: []uint64{1, 2, 3}}},
	} {
		c.tune = withGroups(groups...)
		for id := uint64(1); id <= 3; id++ {
			c.stop(id)
			n := c.start(id)
			require.Equal(t, []string{"", "a"}, n.host.Groups())
			require.True(t, holds(c.node(id%3+1), "a", sa, "held@a", tokenA), "after restarting %d", id)
		}
	}
	require.True(t, holds(c.node(3), "a", sa, "held@a", tokenA))

	// The table adds b, with no restart.
	require.NoError(t, c.node(2).CreateGroup(ctx, GroupConfig{Name: "b", Voters: []uint64{1, 2, 3}}))
	c.waitStatus(ctx, "b runs everywhere", func(_ uint64, st Status) bool { return len(st.Groups) == 3 && allLeaders(st) })
	_, err = openSession(ctx, c.node(3), "b", time.Minute)
	require.NoError(t, err)
	// A restart keeps what the table says.
	c.stop(1)
	require.Equal(t, []string{"", "a", "b"}, c.start(1).host.Groups())
	require.True(t, holds(c.node(1), "a", sa, "held@a", tokenA))
}

// A deployment whose table was never set (its replicas ran without Groups)
// gets one from the first replica restarted with Groups: the others start
// the group at once, with no restart, where a rolling restart adding it
// stalled (the first restarted replica's group waited for a quorum of
// voters that only the next restarts would bring).
func TestFirstGroupsSeedTheTable(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	c.leader(ctx)
	for _, n := range c.nodes {
		_, set, err := n.host.GroupTable(ctx)
		require.NoError(t, err)
		require.False(t, set, "no Groups, no table")
	}
	c.tune = withGroups(GroupConfig{Name: "billing", Voters: []uint64{1, 2, 3}})
	c.stop(1)
	n1 := c.start(1)
	// 2 and 3, not restarted, start billing from the table.
	c.waitStatus(ctx, "billing runs everywhere", func(_ uint64, st Status) bool { return len(st.Groups) == 2 && allLeaders(st) })
	_, err := openSession(ctx, c.node(2), "billing", time.Minute)
	require.NoError(t, err)
	require.NoError(t, n1.Ready(ctx))
}

// A replica that joins the deployment runs every named group as a
// non-voting replica: the groups' leaders add it, and remove it from the
// groups once it is removed from the deployment.
func TestJoiningReplicaRunsTheGroups(t *testing.T) {
	c := newCluster(t, 3, withGroups(GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}))
	ctx := testCtx(t)
	c.waitStatus(ctx, "leaders", func(_ uint64, st Status) bool { return allLeaders(st) })
	joinAndLockInA(ctx, t, c, joinConfig(t, c, 4))

	require.NoError(t, c.node(1).RemoveReplica(ctx, 4))
	for {
		m, err := c.node(1).host.Group("a").Members(ctx)
		require.NoError(t, err)
		if _, still := m.NonVoting[4]; !still && slices.Contains(m.Removed, 4) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replica 4 is still a member of a: %+v", m)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A replica that joins after SetVoters moved a group, started with the
// group's current voters in Config.Groups (one configuration for every
// replica, as a StatefulSet has), runs the group as the table has it: the
// group it would bootstrap from those voters is not the deployment's, and
// its peers refused it whole.
func TestJoiningReplicaWithMovedVotersInGroups(t *testing.T) {
	c := newCluster(t, 3, withGroups(GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}))
	ctx := testCtx(t)
	c.waitStatus(ctx, "leaders", func(_ uint64, st Status) bool { return allLeaders(st) })
	require.NoError(t, c.node(1).SetVoters(ctx, "a", []uint64{1}))
	cfg4 := joinConfig(t, c, 4)
	cfg4.Groups = []GroupConfig{{Name: "a", Voters: []uint64{1}}}
	joinAndLockInA(ctx, t, c, cfg4)
}

// joinAndLockInA adds cfg's replica to c as non-voting, starts it, waits
// until it runs group a (it learns its groups from the table), and takes a
// lock there through it.
func joinAndLockInA(ctx context.Context, t *testing.T, c *testCluster, cfg Config) *Node {
	t.Helper()
	require.NoError(t, c.node(1).AddNonVoting(ctx, cfg.ReplicaID, cfg.Addr))
	n := startJoined(t, c, cfg)
	for n.host.Group("a") == nil {
		select {
		case <-ctx.Done():
			t.Fatal("the joined replica does not run a")
		case <-time.After(10 * time.Millisecond):
		}
	}
	s, err := openSession(ctx, n, "a", time.Minute)
	require.NoError(t, err, "the joined replica proposes to a locally")
	_, err = acquireIn(ctx, n, "a", s, 1, "j@a")
	require.NoError(t, err)
	g, _ := group(n.Status(), "a")
	require.True(t, g.NonVoting)
	return n
}

// A replica whose Dir never followed the group table (its only run with
// Groups heard nothing from the deployment) starts with the voters
// SetVoters gave a group meanwhile, as the operator wrote them into every
// replica's Config.Groups: it runs the group as its Dir first had it,
// warns, and then follows the table. It was refused with ErrInvalidConfig,
// as if the group's voters could not change.
func TestDirThatNeverReadTheTableTakesMovedVoters(t *testing.T) {
	net := transport.NewNetwork(4)
	c := startCluster(t, net, 4, nil)
	ctx := testCtx(t)
	// Every member heard from: table commands are allowed from now on,
	// with 4 down.
	waitUntil(t, ctx, "the version gate rises", func() bool {
		return c.node(1).host.Group("").Gate() == fsm.Reads()
	})
	tap := logtap.New(slog.LevelDebug)
	moved := []GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
	c.tune = func(cfg *Config) {
		cfg.Groups = moved
		if cfg.ReplicaID == 4 {
			cfg.Logger = tap.Logger()
		}
	}
	c.stop(4)
	net.Isolate(net.Addr(4))
	c.start(4) // keeps a with voters 1, 2, 3 in its Dir; reads no table
	require.False(t, c.node(4).Status().FollowsGroupTable, "a replica that never read the table runs its Config.Groups")
	c.stop(4)
	net.Heal()
	c.stop(1)
	c.start(1) // seeds the table: 2 and 3 start a from it
	c.waitTable(ctx)
	c.waitStatus(ctx, "a has a leader", func(_ uint64, st Status) bool { return len(st.Groups) == 2 && allLeaders(st) })

	require.NoError(t, c.node(1).SetVoters(ctx, "a", []uint64{1}))
	moved = []GroupConfig{{Name: "a", Voters: []uint64{1}}}
	n4, err := Start(ctx, c.config(4))
	require.NoError(t, err, "the replica whose Dir is older than the move starts")
	c.nodes[4] = n4
	t.Logf("%s", tap.Wait(t, ctx, `Voters [1] differ from the voters [1 2 3] this replica first ran it with`))
	c.waitTable(ctx)
	s := newSession(t, ctx, n4)
	l, err := s.Acquire(ctx, "x@a")
	require.NoError(t, err, "the group works through replica 4")
	m, err := n4.MembersOf(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []uint64{1}, slices.Sorted(maps.Keys(m.Voters)))
	require.NoError(t, l.Release(ctx))
}

// A deployment that runs its groups from Config.Groups with no table yet
// (a member not heard from holds the version gate back), restarted with
// other voters in Config.Groups, seeds the table with the voters each
// group runs with: a seed of the configured ones would make the group's
// leader move its voters to them, as if SetVoters had been called.
func TestSeedKeepsTheVotersGroupsRunWith(t *testing.T) {
	net := transport.NewNetwork(4)
	net.Isolate(net.Addr(4)) // not heard from: no table
	groups := []GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}}
	c := startCluster(t, net, 4, func(cfg *Config) { cfg.Groups = groups })
	ctx := testCtx(t)
	c.stop(4)
	c.waitStatus(ctx, "a has a leader", func(_ uint64, st Status) bool { return len(st.Groups) == 2 && allLeaders(st) })
	groups = []GroupConfig{{Name: "a", Voters: []uint64{1}}}
	for id := uint64(1); id <= 3; id++ {
		c.stop(id)
		c.start(id)
	}
	_, set, err := c.node(1).host.GroupTable(ctx)
	require.NoError(t, err)
	require.False(t, set, "the table was seeded with 4 never heard from")
	net.Heal()
	c.start(4)
	c.waitTable(ctx)
	table, _, err := c.node(1).host.GroupTable(ctx)
	require.NoError(t, err)
	require.Len(t, table, 1)
	require.Equal(t, []uint64{1, 2, 3}, table[0].Voters, "the table's voters of a")
	m, err := c.node(2).MembersOf(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, slices.Sorted(maps.Keys(m.Voters)))
}
