package main

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

func TestGroupFlag(t *testing.T) {
	var g groupFlags
	require.NoError(t, g.Set("billing=1,2,3"))
	require.NoError(t, g.Set("solo=2"))
	require.Equal(t, groupFlags{{Name: "billing", Voters: []uint64{1, 2, 3}}, {Name: "solo", Voters: []uint64{2}}}, g)
	for _, bad := range []string{"billing", "=1", "billing=", "billing=1,x", "billing=0"} {
		require.Error(t, g.Set(bad), bad)
	}
}

// serve --group runs the named groups; status lists every group and its
// leader.
func TestServeGroups(t *testing.T) {
	p := startProcs(t, "--group", "billing=1,2,3", "--group", "solo=2")
	// Leaders are elected independently per group: wait until replica 1
	// knows one for each.
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := do(t, "GET", p.urls[1]+"/v1/status", nil)
		groups, _ := r.Body["groups"].([]any)
		known := 0
		for _, g := range groups {
			if g.(map[string]any)["leader_id"].(float64) != 0 {
				known++
			}
		}
		if len(groups) == 3 && known == 3 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no leader in every group: %s", r.Raw)
		time.Sleep(50 * time.Millisecond)
	}
	out, err := exec.Command(p.bin, "status", "--http", p.urls[1]).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var rows []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && (f[0] == "(default)" || f[0] == "billing" || f[0] == "solo") {
			rows = append(rows, l)
		}
	}
	require.Len(t, rows, 3, "%s", out)
	solo := strings.Fields(rows[2])
	require.Equal(t, []string{"solo", "2", "2"}, []string{solo[0], solo[2], solo[3]}, "solo is led by its only voter 2: %s", out)
	require.Equal(t, "non-voting", solo[4], "replica 1 runs solo non-voting: %s", out)
	require.Equal(t, "1,2,3", strings.Fields(rows[1])[3])
	// Each group's WRITES: this build's formats once its leader has heard
	// every replica read them (at once here, all running this build).
	v := fencelock.BuildVersion()
	writes := fmt.Sprintf("log %d, snapshot %d", v.Codec, v.Snapshot)
	require.Eventually(t, func() bool {
		out, err = exec.Command(p.bin, "status", "--http", p.urls[1]).CombinedOutput()
		return err == nil && strings.Count(string(out), "  "+writes+"\n") == 3 && // the table's rows
			strings.Contains(string(out), fmt.Sprintf("reads log formats up to %d and snapshots up to %d; the default group writes %s\n", v.Codec, v.Snapshot, writes))
	}, 30*time.Second, 100*time.Millisecond, "every group writes this build's formats: %s", &out)

	// locks and sessions list one group: --group, or a PREFIX's @group.
	sid := session(t, p.urls[1], 10000)
	r := do(t, "POST", p.urls[1]+"/v1/locks/inv%40billing/acquire", map[string]any{"session_id": sid})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	part := r.Str("holder_session")
	for _, args := range [][]string{{"--group", "billing"}, {"@billing"}} {
		out, err = exec.Command(p.bin, append([]string{"locks", "--http", p.urls[2]}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "inv@billing", "%v: %s", args, out)
	}
	// Without a group, every group's locks, with a GROUP column.
	out, err = exec.Command(p.bin, "locks", "--http", p.urls[2]).CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2, "%s", out)
	require.Equal(t, []string{"GROUP", "LOCK", "HOLDER"}, strings.Fields(lines[0])[:3], "%s", out)
	require.Equal(t, []string{"billing", "inv@billing"}, strings.Fields(lines[1])[:2], "%s", out)
	// A named group's holder is its session, by session_id; its part
	// there only with --parts.
	require.Equal(t, "HOLDER SESSION", columnOf(lines, "HOLDER SESSION", 0), "%s", out)
	require.Equal(t, sid, columnOf(lines, "HOLDER SESSION", 1), "%s", out)
	// No part column: the part's ID itself may well be in the table, as
	// the session's (both count from their group's log index, and two
	// groups' logs can stand at the same index: 458752 and 458752 in a CI
	// run).
	require.NotContains(t, lines[0], "HOLDER PART", "%s", out)
	out, err = exec.Command(p.bin, "locks", "--parts", "--http", p.urls[2]).CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Equal(t, sid, columnOf(lines, "HOLDER SESSION", 1), "%s", out)
	require.Equal(t, part, columnOf(lines, "HOLDER PART", 1), "%s", out)
	out, err = exec.Command(p.bin, "locks", "-o", "json", "--http", p.urls[2]).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"all_groups": true`, "%s", out)
	require.Contains(t, string(out), `"group": "billing"`, "%s", out)
	out, err = exec.Command(p.bin, "sessions", "--group", "billing", "--http", p.urls[2]).CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, lines, 2, "%s", out)
	require.Equal(t, []string{"SESSION", "NAME"}, strings.Fields(lines[0])[:2], "%s", out)
	require.Equal(t, sid, strings.Fields(lines[1])[0], "%s", out)
	out, err = exec.Command(p.bin, "sessions", "--parts", "--group", "billing", "--http", p.urls[2]).CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Equal(t, []string{"SESSION", "PART", "NAME"}, strings.Fields(lines[0])[:3], "%s", out)
	require.Equal(t, []string{sid, part}, strings.Fields(lines[1])[:2], "%s", out)
	out, err = exec.Command(p.bin, "locks", "--group", "nope", "--http", p.urls[2]).CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "nope", "%s", out)

	// A bad group is refused before anything starts.
	out, err = exec.Command(p.bin, "serve", "--id", "1", "--peers", "1=127.0.0.1:1", "--dir", t.TempDir(),
		"--http", "127.0.0.1:0", "--group", "Bad=1").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), fencelock.ErrInvalidConfig.Error())
	require.Contains(t, string(out), "Groups[0].Name")
}

// With --placement own, a replica runs only the named groups it votes in
// and serves the others' names through a replica that runs them.
func TestServePlacementOwn(t *testing.T) {
	p := startProcs(t, "--placement", "own", "--group", "solo=2")
	running := func(id uint64) []string {
		r := do(t, "GET", p.urls[id]+"/v1/status", nil)
		groups, _ := r.Body["groups"].([]any)
		var names []string
		for _, g := range groups {
			names = append(names, g.(map[string]any)["name"].(string))
		}
		return names
	}
	require.Eventually(t, func() bool { return slices.Contains(running(2), "solo") }, 60*time.Second, 50*time.Millisecond)
	require.NotContains(t, running(1), "solo", "replica 1 votes in no named group")
	require.NotContains(t, running(3), "solo", "replica 3 votes in no named group")

	// A lock of solo through replica 1, then a waiter through replica 3,
	// granted on release with a higher token.
	s1 := session(t, p.urls[1], 10000)
	r := do(t, "POST", p.urls[1]+"/v1/locks/job%40solo/acquire", map[string]any{"session_id": s1})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	first, err := strconv.ParseUint(r.Str("fencing_token"), 10, 64)
	require.NoError(t, err, r.Raw)
	s3 := session(t, p.urls[3], 10000)
	r = do(t, "POST", p.urls[3]+"/v1/locks/job%40solo/acquire", map[string]any{"session_id": s3, "wait": false})
	require.NotEqual(t, true, r.Body["granted"], "held through replica 1: %s", r.Raw)
	r = do(t, "POST", p.urls[1]+"/v1/locks/job%40solo/release", map[string]any{"session_id": s1, "fencing_token": first})
	require.Equal(t, 200, r.Status, r.Raw)
	r = do(t, "POST", p.urls[3]+"/v1/locks/job%40solo/acquire", map[string]any{"session_id": s3})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	second, err := strconv.ParseUint(r.Str("fencing_token"), 10, 64)
	require.NoError(t, err, r.Raw)
	require.Greater(t, second, first)

	// Replica 3 reaches solo through a mirror fed by solo's only voter, 2:
	// its status lists the mirror apart from the groups it runs.
	r = do(t, "GET", p.urls[3]+"/v1/status", nil)
	mirrors, _ := r.Body["mirrors"].([]any)
	require.Len(t, mirrors, 1, r.Raw)
	m := mirrors[0].(map[string]any)
	require.Equal(t, "solo", m["name"], r.Raw)
	require.Equal(t, float64(2), m["mirror"], r.Raw)
	st, err := exec.Command(p.bin, "status", "--http", p.urls[3]).CombinedOutput()
	require.NoError(t, err, string(st))
	lines := strings.Split(string(st), "\n")
	at := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "MIRRORED GROUP") })
	require.GreaterOrEqual(t, at, 0, string(st))
	require.Equal(t, "solo", columnOf(lines[at:], "MIRRORED GROUP", 1), string(st))
	require.Equal(t, "2", columnOf(lines[at:], "FED BY", 1), string(st))

	out, err := exec.Command(p.bin, "serve", "--id", "1", "--peers", "1=127.0.0.1:1", "--dir", t.TempDir(),
		"--http", "127.0.0.1:0", "--placement", "some").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `--placement: "some" is neither every nor own`)
}

// columnOf returns, from a table's lines, the text of line i under the
// column headed head: the header's columns are aligned by tabwriter, so
// a cell starts where its header does and ends at the next space.
func columnOf(lines []string, head string, i int) string {
	at := strings.Index(lines[0], head)
	if at < 0 || at >= len(lines[i]) {
		return ""
	}
	if i == 0 {
		return head
	}
	cell := lines[i][at:]
	if end := strings.IndexByte(cell, ' '); end >= 0 {
		cell = cell[:end]
	}
	return cell
}
