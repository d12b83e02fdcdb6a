package fsm

import (
	"bufio"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// spec is a group of voters ids, each at "h<id>:7000", on shard.
func spec(name string, shard uint64, ids ...uint64) GroupSpec {
	g := GroupSpec{Name: name, Shard: shard, Voters: ids}
	for _, id := range ids {
		g.Bootstrap = append(g.Bootstrap, GroupMember{ID: id, Addr: "h" + string(rune('0'+id)) + ":7000"})
	}
	return g
}

// groupTableCommands is one of each table kind, for the codec.
func groupTableCommands() []Command {
	return []Command{
		{Kind: KindGroupSeed, Op: 1, Groups: []GroupSpec{spec("a", 10, 1, 2, 3), spec("b", 11, 3, 4, 5)}},
		{Kind: KindGroupSeed, Op: 2, Groups: []GroupSpec{}},
		{Kind: KindGroupCreate, Op: 3, Groups: []GroupSpec{spec("billing", 1<<63, 1, 2, 6)}},
		{Kind: KindGroupDrop, Op: 4, Groups: []GroupSpec{{Name: "a"}}},
		{Kind: KindGroupSetVoters, Op: 5, Groups: []GroupSpec{{Name: "b", Voters: []uint64{4, 5, 6}}}},
	}
}

func TestGroupTableCodecRoundTrip(t *testing.T) {
	cmds := groupTableCommands()
	enc := AppendBatchAt(nil, 7, cmds)
	got, err := DecodeBatch(enc, nil)
	require.NoError(t, err)
	for i := range cmds {
		cmds[i].At = 7
	}
	cmds[1].Groups = []GroupSpec{}
	require.Equal(t, cmds, got)
	require.Equal(t, enc, AppendBatchAt(nil, 7, got))
	require.Equal(t, "group-create", KindGroupCreate.String())
	require.Equal(t, "group-set-voters", KindGroupSetVoters.String())

	// The documented bytes: kind, op, then the kind's fields.
	drop := AppendBatchAt(nil, 0, []Command{{Kind: KindGroupDrop, Op: 9, Groups: []GroupSpec{{Name: "ab"}}}})
	require.Equal(t, []byte{codecVersion, 0, 1, 34, 9, 2, 'a', 'b'}, drop)
	set := AppendBatchAt(nil, 0, []Command{{Kind: KindGroupSetVoters, Op: 9, Groups: []GroupSpec{{Name: "ab", Voters: []uint64{1, 6}}}}})
	require.Equal(t, []byte{codecVersion, 0, 1, 35, 9, 2, 'a', 'b', 2, 1, 6}, set)
	create := AppendBatchAt(nil, 0, []Command{{Kind: KindGroupCreate, Op: 9, Groups: []GroupSpec{spec("ab", 5, 1)}}})
	require.Equal(t, []byte{codecVersion, 0, 1, 33, 9, 2, 'a', 'b', 5, 1, 1, 7, 'h', '1', ':', '7', '0', '0', '0'}, create)
}

func TestGroupTableDecodeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"a table kind in a version-8 entry", []byte{8, 0, 1, 34, 9, 2, 'a', 'b'}},
		{"no operation ID", []byte{codecVersion, 0, 1, 34}},
		{"drop without its name", []byte{codecVersion, 0, 1, 34, 9}},
		{"group name too long", append([]byte{codecVersion, 0, 1, 34, 9, 33}, strings.Repeat("a", 33)...)},
		{"too many voters", []byte{codecVersion, 0, 1, 35, 9, 1, 'a', 8, 1, 2, 3, 4, 5, 6, 7, 8}},
		{"voters cut short", []byte{codecVersion, 0, 1, 35, 9, 1, 'a', 3, 1, 2}},
		{"create without addresses", []byte{codecVersion, 0, 1, 33, 9, 1, 'a', 5, 2, 1, 2}},
		{"seed counting more groups than bytes", []byte{codecVersion, 0, 1, 32, 9, 200}},
		{"seed beyond MaxGroups", []byte{codecVersion, 0, 1, 32, 9, 0x81, 0x02}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeBatch(tc.data, nil)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

func TestGroupTableApply(t *testing.T) {
	h := newHarness(t)
	_, set := h.st.GroupTable()
	require.False(t, set, "a new state has no table")
	// A group writes table commands only once its gate is raised (a
	// version-9 kind), so its snapshots are version 7, which hold the table.
	h.st.gate = Gate{Codec: 9, Snapshot: 7}

	// The first seed sets the table; any later one changes nothing.
	r, evs := h.one(Command{Kind: KindGroupSeed, Op: 1, Groups: []GroupSpec{spec("b", 11, 3, 4, 5), spec("a", 10, 1, 2, 3)}})
	require.Equal(t, Result{Status: OK, Value: 2}, r)
	require.Equal(t, []Event{{Kind: EventGroupTable, Index: 1}}, evs)
	r, evs = h.one(Command{Kind: KindGroupSeed, Op: 2, Groups: []GroupSpec{spec("c", 12, 1)}})
	require.Equal(t, NotApplied, r.Status)
	require.Empty(t, evs)
	groups, set := h.st.GroupTable()
	require.True(t, set)
	require.Equal(t, []GroupEntry{
		{Name: "a", Shard: 10, Created: 1, Voters: []uint64{1, 2, 3}, Bootstrap: spec("a", 10, 1, 2, 3).Bootstrap},
		{Name: "b", Shard: 11, Created: 1, Voters: []uint64{3, 4, 5}, Bootstrap: spec("b", 11, 3, 4, 5).Bootstrap},
	}, groups, "in name order")

	// Create: a new name on a new shard; an existing name is Conflict, a
	// taken shard or a bad spec Invalid.
	r, evs = h.one(Command{Kind: KindGroupCreate, Op: 3, Groups: []GroupSpec{spec("billing", 99, 1, 2, 6)}})
	require.Equal(t, Result{Status: OK, Value: 99}, r)
	require.Equal(t, []Event{{Kind: EventGroupTable, Index: 3, Name: "billing"}}, evs)
	r, _ = h.one(Command{Kind: KindGroupCreate, Op: 4, Groups: []GroupSpec{spec("billing", 98, 1)}})
	require.Equal(t, Result{Status: Conflict, Value: 99}, r)
	r, _ = h.one(Command{Kind: KindGroupCreate, Op: 5, Groups: []GroupSpec{spec("other", 99, 1)}})
	require.Equal(t, Result{Status: Invalid, Value: GroupShardTaken}, r)
	for _, bad := range []GroupSpec{
		spec("Upper", 50, 1), spec("", 50, 1), spec(strings.Repeat("x", MaxGroupNameLen+1), 50, 1),
		spec("x", 1, 1), spec("x", 0, 1), spec("x", 50), spec("x", 50, 2, 1), spec("x", 50, 1, 1),
		spec("x", 50, 0), spec("x", 50, 1, 2, 3, 4, 5, 6, 7, 8),
		{Name: "x", Shard: 50, Voters: []uint64{1}},
		{Name: "x", Shard: 50, Voters: []uint64{1}, Bootstrap: []GroupMember{{ID: 2, Addr: "h:1"}}},
		{Name: "x", Shard: 50, Voters: []uint64{1}, Bootstrap: []GroupMember{{ID: 1}}},
	} {
		r, evs = h.one(Command{Kind: KindGroupCreate, Groups: []GroupSpec{bad}})
		require.Equal(t, Result{Status: Invalid, Value: GroupInvalidSpec}, r, "%+v", bad)
		require.Empty(t, evs)
	}
	r, _ = h.one(Command{Kind: KindGroupCreate, Groups: []GroupSpec{spec("x", 50, 1), spec("y", 51, 1)}})
	require.Equal(t, Result{Status: Invalid, Value: GroupInvalidSpec}, r, "one group per create")

	// SetVoters: the voters it drops are removed for good.
	r, evs = h.one(Command{Kind: KindGroupSetVoters, Op: 6, Groups: []GroupSpec{{Name: "a", Voters: []uint64{1, 2, 6}}}})
	require.Equal(t, Result{Status: OK, Value: 10}, r)
	require.Equal(t, []Event{{Kind: EventGroupTable, Index: h.idx, Name: "a"}}, evs)
	r, _ = h.one(Command{Kind: KindGroupSetVoters, Op: 7, Groups: []GroupSpec{{Name: "a", Voters: []uint64{1, 3, 6}}}})
	require.Equal(t, Result{Status: Invalid, Value: GroupVoterRemoved}, r, "3 was removed from a")
	r, _ = h.one(Command{Kind: KindGroupSetVoters, Op: 8, Groups: []GroupSpec{{Name: "a", Voters: []uint64{2, 1}}}})
	require.Equal(t, Result{Status: Invalid, Value: GroupInvalidSpec}, r)
	r, _ = h.one(Command{Kind: KindGroupSetVoters, Op: 9, Groups: []GroupSpec{{Name: "nope", Voters: []uint64{1}}}})
	require.Equal(t, NotApplied, r.Status)
	r, evs = h.one(Command{Kind: KindGroupSetVoters, Op: 10, Groups: []GroupSpec{{Name: "a", Voters: []uint64{1, 2, 6}}}})
	require.Equal(t, Result{Status: OK, Value: 10}, r, "the same voters: nothing to do")
	require.Empty(t, evs)
	r, _ = h.one(Command{Kind: KindGroupSetVoters, Op: 11, Groups: []GroupSpec{{Name: "a", Voters: []uint64{6}}}})
	require.Equal(t, OK, r.Status)
	groups, _ = h.st.GroupTable()
	require.Equal(t, []uint64{6}, groups[0].Voters)
	require.Equal(t, []uint64{1, 2, 3}, groups[0].Removed)
	require.Equal(t, spec("a", 10, 1, 2, 3).Bootstrap, groups[0].Bootstrap, "the bootstrap never changes")

	// A retry of an operation gets its first outcome and changes nothing,
	// though the table has moved on.
	r, evs = h.one(Command{Kind: KindGroupCreate, Op: 3, Groups: []GroupSpec{spec("billing", 99, 1, 2, 6)}})
	require.Equal(t, Result{Status: OK, Value: 99}, r)
	require.Empty(t, evs)

	// Drop: gone from the table; an unknown name is NotApplied. A group
	// created again under the name is another group.
	r, evs = h.one(Command{Kind: KindGroupDrop, Op: 12, Groups: []GroupSpec{{Name: "billing"}}})
	require.Equal(t, Result{Status: OK, Value: 99}, r)
	require.Equal(t, []Event{{Kind: EventGroupTable, Index: h.idx, Name: "billing"}}, evs)
	r, _ = h.one(Command{Kind: KindGroupDrop, Op: 13, Groups: []GroupSpec{{Name: "billing"}}})
	require.Equal(t, NotApplied, r.Status)
	r, _ = h.one(Command{Kind: KindGroupCreate, Op: 14, Groups: []GroupSpec{spec("billing", 100, 3)}})
	require.Equal(t, Result{Status: OK, Value: 100}, r)
	groups, _ = h.st.GroupTable()
	require.Len(t, groups, 3)
	require.Equal(t, GroupEntry{Name: "billing", Shard: 100, Created: h.idx, Voters: []uint64{3}, Bootstrap: spec("billing", 100, 3).Bootstrap}, groups[2])

	// Whatever a caller does to the copy, the state keeps its own.
	groups[0].Voters[0] = 77
	again, _ := h.st.GroupTable()
	require.Equal(t, uint64(6), again[0].Voters[0])

	// The table survives a snapshot, and the restored state goes on alike.
	st, err := DecodeSnapshot(saveBytes(t, h.st))
	require.NoError(t, err)
	restored, set := st.GroupTable()
	require.True(t, set)
	require.Equal(t, again, restored)
	h2 := harnessFor(t, st)
	next := Command{Kind: KindGroupSetVoters, Op: 11, Groups: []GroupSpec{{Name: "b", Voters: []uint64{4}}}}
	r1, _ := h.one(next)
	r2, _ := h2.one(next)
	require.Equal(t, r1, r2, "the remembered operation survives too")
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, h2.st))
}

// A Create beyond MaxGroups is refused.
func TestGroupTableLimit(t *testing.T) {
	h := newHarness(t)
	for i := range MaxGroups {
		r, _ := h.one(Command{Kind: KindGroupCreate, Groups: []GroupSpec{spec(groupName(i), uint64(i+2), 1)}})
		require.Equal(t, OK, r.Status)
	}
	r, _ := h.one(Command{Kind: KindGroupCreate, Groups: []GroupSpec{spec("one-more", 1<<40, 1)}})
	require.Equal(t, limitExceeded(LimitGroups), r)
}

func groupName(i int) string { return "g" + hex.EncodeToString([]byte{byte(i >> 8), byte(i)}) }

// Restore refuses a table Apply could not have made.
func TestGroupTableRestoreRejects(t *testing.T) {
	good := validImage()
	st, err := DecodeSnapshot(good.bytes())
	require.NoError(t, err)
	groups, set := st.GroupTable()
	require.True(t, set)
	require.Equal(t, []GroupEntry{{Name: "billing", Shard: 0x1234, Created: 40, Voters: []uint64{1, 2, 6}, Removed: []uint64{3},
		Bootstrap: []GroupMember{{ID: 1, Addr: "a:1"}, {ID: 2, Addr: "b:2"}, {ID: 3, Addr: "c:3"}}}}, groups)

	entry := func(name string, shard, created byte, voters, removed []byte, boot ...byte) []byte {
		b := append([]byte{byte(len(name))}, name...)
		b = append(b, shard, created, byte(len(voters)))
		b = append(b, voters...)
		b = append(b, byte(len(removed)))
		b = append(b, removed...)
		b = append(b, byte(len(boot)))
		for _, id := range boot {
			b = append(b, id, 3, 'h', ':', '1')
		}
		return b
	}
	table := func(set byte, entries ...[]byte) []byte {
		b := []byte{set, byte(len(entries))}
		for _, e := range entries {
			b = append(b, e...)
		}
		return b
	}
	ok := entry("a", 10, 5, []byte{1, 2}, []byte{3}, 1, 3)
	for _, tc := range []struct {
		name  string
		table []byte
		fine  bool
	}{
		{"a good table", table(1, ok, entry("b", 11, 5, []byte{4}, nil, 4)), true},
		{"set, empty", table(1), true},
		{"groups in a table never set", table(0, ok), false},
		{"a bad flag", table(2), false},
		{"out of order", table(1, entry("b", 11, 5, []byte{4}, nil, 4), ok), false},
		{"a name twice", table(1, ok, ok), false},
		{"a shard twice", table(1, ok, entry("b", 10, 5, []byte{4}, nil, 4)), false},
		{"shard 1", table(1, entry("a", 1, 5, []byte{1}, nil, 1)), false},
		{"created after the state's index", table(1, entry("a", 10, 101, []byte{1}, nil, 1)), false},
		{"created at 0", table(1, entry("a", 10, 0, []byte{1}, nil, 1)), false},
		{"no voters", table(1, entry("a", 10, 5, nil, nil, 1)), false},
		{"a removed voter", table(1, entry("a", 10, 5, []byte{1, 3}, []byte{3}, 1)), false},
		{"removed out of order", table(1, entry("a", 10, 5, []byte{1}, []byte{3, 2}, 1)), false},
		{"no bootstrap", table(1, entry("a", 10, 5, []byte{1}, nil)), false},
		{"a bad name", table(1, entry("A", 10, 5, []byte{1}, nil, 1)), false},
		{"truncated", table(1, ok)[:5], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im := validImage()
			im.table = tc.table
			in := im.bytes()
			_, err := DecodeSnapshot(in)
			_, refErr := refDecodeSnapshot(in)
			if tc.fine {
				require.NoError(t, err)
				require.NoError(t, refErr)
				return
			}
			require.ErrorIs(t, err, ErrCorrupt)
			require.ErrorIs(t, refErr, ErrCorrupt)
		})
	}
}

// groupTableState is a state whose table went through every kind.
func groupTableState(tb testing.TB) *State {
	h := newHarness(tb)
	h.one(Command{Kind: KindLeaderStart, Owner: 1, Term: 2, Nonce: 0xfeed})
	for _, c := range groupTableCommands() {
		h.one(c)
	}
	return h.st
}

// testdata/log-v9-groups.txt and testdata/snapshot-v7-groups.bin freeze
// version 9's table commands (every kind, with their refusals and a retry)
// and the snapshot version 7 saves after them, so that the next version is
// tested against them. FENCELOCK_WRITE_GOLDEN=1 writes them afresh, for a
// new version only.
func TestVersion9GroupTableLogReplays(t *testing.T) {
	const logFile, snapFile = "testdata/log-v9-groups.txt", "testdata/snapshot-v7-groups.bin"
	if os.Getenv("FENCELOCK_WRITE_GOLDEN") != "" {
		st := New()
		var log strings.Builder
		// The table's commands are written once the gate is raised, as a
		// group writes them (the first entry, at the baseline, is version 8).
		entries := append([][]Command{{{Kind: KindLeaderStart, Owner: 1, Term: 2, Nonce: 0xfeed}},
			{{Kind: KindGate, Gate: Gate{Codec: 9, Snapshot: 7}}}},
			[][]Command{
				{{Kind: KindGroupSeed, Op: 1, Groups: []GroupSpec{spec("a", 10, 1, 2, 3), spec("b", 11, 3, 4, 5)}}},
				{{Kind: KindGroupSeed, Op: 2, Groups: []GroupSpec{spec("c", 12, 1)}}}, // NotApplied
				{{Kind: KindGroupCreate, Op: 3, Groups: []GroupSpec{spec("billing", 1<<63, 1, 2, 6)}}},
				{{Kind: KindGroupCreate, Op: 4, Groups: []GroupSpec{spec("billing", 13, 1)}}}, // Conflict
				{{Kind: KindGroupSetVoters, Op: 5, Groups: []GroupSpec{{Name: "b", Voters: []uint64{4, 5, 6}}}}},
				{{Kind: KindGroupSetVoters, Op: 6, Groups: []GroupSpec{{Name: "b", Voters: []uint64{3, 4, 5}}}}}, // removed
				{{Kind: KindGroupDrop, Op: 7, Groups: []GroupSpec{{Name: "a"}}}},
				{{Kind: KindGroupDrop, Op: 7, Groups: []GroupSpec{{Name: "a"}}}}, // a retry: OK again
				{{Kind: KindGroupDrop, Op: 8, Groups: []GroupSpec{{Name: "a"}}}}, // NotApplied
				{{Kind: KindGroupCreate, Op: 9, Groups: []GroupSpec{spec("a", 14, 2)}}},
			}...)
		for i, cmds := range entries {
			data, err := AppendEntry(nil, st.Gate(), frozenAt+uint64(i)*1e7, cmds)
			require.NoError(t, err)
			cmds, err := DecodeBatch(data, nil)
			require.NoError(t, err)
			rs, _ := st.Apply(uint64(i+1), cmds)
			log.WriteString(hex.EncodeToString(data) + " " + hex.EncodeToString(AppendResults(nil, rs)) + "\n")
		}
		require.NoError(t, os.WriteFile(logFile, []byte(log.String()), 0o644))
		require.NoError(t, os.WriteFile(snapFile, saveBytes(t, st), 0o644))
	}
	st, restored := replayOldLog(t, logFile, 9, 12, snapFile)
	golden, err := os.ReadFile(snapFile)
	require.NoError(t, err)
	if golden[len(snapshotMagic)] == snapshotVersion {
		require.Equal(t, golden, saveBytes(t, st), "the log replays to the frozen snapshot")
		require.Equal(t, golden, saveBytes(t, restored), "the frozen snapshot restores to itself")
	}
	groups, set := restored.GroupTable()
	require.True(t, set)
	require.Equal(t, []string{"a", "b", "billing"}, []string{groups[0].Name, groups[1].Name, groups[2].Name})
	require.Equal(t, uint64(14), groups[0].Shard, "a created again on another shard")
	require.Equal(t, []uint64{3}, groups[1].Removed)

	// Every table kind is in the log, with every way it can be answered.
	f, err := os.Open(logFile)
	require.NoError(t, err)
	defer f.Close()
	seen := map[Kind]map[Status]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		entry, results, _ := strings.Cut(sc.Text(), " ")
		data, _ := hex.DecodeString(entry)
		res, _ := hex.DecodeString(results)
		cmds, err := DecodeBatch(data, nil)
		require.NoError(t, err)
		rs, err := DecodeResults(res, nil)
		require.NoError(t, err)
		for i, c := range cmds {
			if seen[c.Kind] == nil {
				seen[c.Kind] = map[Status]bool{}
			}
			seen[c.Kind][rs[i].Status] = true
		}
	}
	require.Equal(t, map[Status]bool{OK: true, NotApplied: true}, seen[KindGroupSeed])
	require.Equal(t, map[Status]bool{OK: true, Conflict: true}, seen[KindGroupCreate])
	require.Equal(t, map[Status]bool{OK: true, Invalid: true}, seen[KindGroupSetVoters])
	require.Equal(t, map[Status]bool{OK: true, NotApplied: true}, seen[KindGroupDrop])
}

// Draining's commands, applied one entry each as a drop proposes them,
// grant nothing: not the shared requests behind an exclusive head, not a
// lock's or an election's next in line when its holder is revoked, not a
// lock a session waits for while it holds another. They leave nothing
// held or queued. (Ending the holders' sessions instead grants each
// queue's head: issue 48, item 7.)
func TestDrainingGrantsNothing(t *testing.T) {
	h := newHarness(t)
	var ids [6]uint64
	for i := range ids {
		ids[i] = h.open(uint64(i + 1))
	}
	a, b, c, d, e, f := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]
	shared := func(s, seq uint64, name string) Command {
		return Command{Kind: KindAcquireShared, Session: s, Seq: seq, Name: name, Wait: true}
	}
	campaign := func(s, seq uint64, name string) Command {
		return Command{Kind: KindCampaign, Session: s, Seq: seq, Name: name, Value: "v", Wait: true}
	}
	want := []Status{Granted, Queued, Queued, Queued, Granted, Queued, Queued, Granted, Queued, Granted, Queued, Queued}
	rs, _ := h.apply(
		shared(a, 1, "s"), acqCmd(b, 1, "s", true), shared(c, 1, "s"), shared(d, 1, "s"), // shared requests behind an exclusive one
		acqCmd(a, 2, "x", true), acqCmd(e, 1, "x", true), acqCmd(f, 1, "x", true),
		acqCmd(e, 2, "y", true), acqCmd(a, 3, "y", true), // a waits for y, held by e, while it holds x
		campaign(f, 2, "el"), campaign(c, 2, "el"), campaign(d, 2, "el"),
	)
	for i, r := range rs {
		require.Equal(t, want[i], r.Status, "command %d", i)
	}

	cmds, held := h.st.Draining()
	require.Equal(t, 4, held, "s, x, y and el's leadership")
	for i, cmd := range cmds {
		if cmd.Kind == KindRevoke {
			cmd.Op = uint64(i + 1)
		}
		r, evs := h.one(cmd)
		require.True(t, r.Status == Cancelled || r.Status == OK, "%v: %v", cmd.Kind, r.Status)
		for _, ev := range evs {
			require.NotContains(t, []EventKind{EventGranted, EventElected}, ev.Kind, "%v of %q granted %+v", cmd.Kind, cmd.Name, ev)
		}
	}
	sessions, locks, waiting := h.st.Counts()
	require.Equal(t, 6, sessions, "every session lives on")
	require.Zero(t, locks)
	require.Zero(t, waiting)
	elections, candidates := h.st.ElectionCounts()
	require.Zero(t, elections)
	require.Zero(t, candidates)
	cmds, held = h.st.Draining()
	require.Empty(t, cmds)
	require.Zero(t, held)
}
