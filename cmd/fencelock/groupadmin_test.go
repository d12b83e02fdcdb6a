package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
)

// fencelock groups lists, creates, re-votes and drops groups on running
// serve processes, and fencelock members replace moves every group off a
// dead replica onto a new one that joined: the replacement procedure of
// docs/operations.md, with a lock held in a named group throughout.
func TestGroupsCLIAndMembersReplace(t *testing.T) {
	tokens := tempFile(t, "tokens", "ops\nreader read:*\n")
	p := startProcs(t, "--group", "a=1,2,3", "--tokens-file", tokens)
	all := strings.Join([]string{p.urls[1], p.urls[2], p.urls[3]}, ",")
	admin := adminCLI{t: t, bin: p.bin, urls: all, tokens: tokens}
	cli, mustCLI := admin.run, admin.must
	fails := func(want string, args ...string) {
		t.Helper()
		out, err := cli(args...)
		require.Error(t, err, "%v: %s", args, out)
		require.Contains(t, out, want, "%v", args)
	}

	out := mustCLI("groups")
	require.Regexp(t, `(?m)^a\s+1,2,3\s+-\s+\d+$`, out, "the group table, seeded from --group")

	out = mustCLI("groups", "create", "b", "1,2,3")
	require.Contains(t, out, "group b created, voters 1,2,3")
	fails("group_exists", "groups", "create", "b", "1")
	fails("invalid_voters", "groups", "create", "c", "1,2")
	fails("invalid_group", "groups", "create", "C", "1")
	fails("not a positive replica ID", "groups", "create", "c", "1,x")
	// b grants at once, through any replica.
	r := callAs(t, "ops", "POST", p.urls[3]+"/v1/sessions", map[string]any{"ttl_ms": 600000}, nil)
	require.Equal(t, 201, r.Status, r.Raw)
	sid, secret := r.Str("session_id"), map[string]string{"Fencelock-Session-Secret": r.Str("session_secret")}
	r = callAs(t, "ops", "POST", lockPath(p.urls[3], "kept@b", "acquire"), map[string]any{"session_id": sid}, secret)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	keptToken := r.Str("fencing_token")
	out = mustCLI("groups", "-o", "json")
	require.Contains(t, out, `"name": "b"`)

	// Replica 1 dies for good; replica 4 joins at a new address.
	p.Kill(1)
	raft4, web4 := fencelocktest.FreePort(t), fencelocktest.FreePort(t)
	mustCLI("members", "add", "--id", "4", "--addr", raft4)
	idFile := tempFile(t, "id", "4\n")
	args := append([]string{}, p.args[1]...)
	args = append(args, "--id-file", idFile, "--addr", raft4, "--http", web4, "--dir", filepath.Join(t.TempDir(), "4"))
	startReplacement(t, p.bin, args, web4)

	out = mustCLI("members", "replace", "1", "4")
	require.Contains(t, out, "replica 4 took replica 1's place in every group")
	require.Regexp(t, `(?m)^4\s+`+regexp.QuoteMeta(raft4)+`\s+voter$`, out)
	require.Contains(t, out, "removed (never to be used again): 1")
	out = mustCLI("groups")
	require.Regexp(t, `(?m)^a\s+2,3,4\s+1\s+\d+$`, out)
	require.Regexp(t, `(?m)^b\s+2,3,4\s+1\s+\d+$`, out)
	out = mustCLI("members", "--group", "b")
	require.Regexp(t, `(?m)^4\s+\S+\s+voter$`, out)
	require.NotRegexp(t, `(?m)^1\s`, out)
	r = callAs(t, "ops", "GET", lockPath("http://"+web4, "kept@b", ""), nil, nil)
	require.Equal(t, keptToken, r.Str("fencing_token"), "the lock held in b across the move: %s", r.Raw)

	out = mustCLI("groups", "set-voters", "a", "4")
	require.Contains(t, out, "group a votes on 4 (taken off it for good: 1,2,3)")
	fails("invalid_voters", "groups", "set-voters", "a", "2")
	b, err := exec.Command(p.bin, "groups", "drop", "a", "--http", all, "--token-file", filepath.Join(t.TempDir(), "none")).CombinedOutput()
	require.Error(t, err, "%s", b)
	reader := tempFile(t, "reader", "reader\n")
	b, err = exec.Command(p.bin, "groups", "drop", "a", "--http", all, "--token-file", reader).CombinedOutput()
	require.Error(t, err, "%s", b)
	require.Contains(t, string(b), "403 forbidden")
	require.Contains(t, string(b), "changing the group table")

	fails("group_holds_locks", "groups", "drop", "b")
	out = mustCLI("groups", "drop", "b", "--force")
	require.Contains(t, out, "group b dropped")
	out = mustCLI("groups")
	require.NotRegexp(t, `(?m)^b\s`, out)
	fails("unknown_group", "groups", "drop", "b")
}
