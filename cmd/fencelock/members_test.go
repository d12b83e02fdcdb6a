package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/stretchr/testify/require"
)

func TestResolveIdentity(t *testing.T) {
	peers := map[uint64]string{1: "a:1", 2: "b:1", 3: "c:1"}
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	four, three := file("four", " 4\n"), file("three", "3")
	for _, tc := range []struct {
		name       string
		id         uint64
		idFile     string
		join       bool
		addr       string
		want       identity
		err        string
		errIsIDBad bool
	}{
		{name: "bootstrap", id: 2, want: identity{id: 2, addr: "b:1"}},
		{name: "bootstrap, --addr its entry", id: 2, addr: "B:1", want: identity{id: 2, addr: "B:1"}},
		{name: "bootstrap, --addr elsewhere", id: 2, addr: "x:1", err: "not replica 2's --peers entry"},
		{name: "no id", err: "--id is required"},
		{name: "--id not in --peers", id: 4, addr: "d:1", err: "give --join"},
		{name: "--join", id: 4, join: true, addr: "d:1", want: identity{id: 4, join: true, addr: "d:1"}},
		{name: "--join without --addr", id: 4, join: true, err: "needs --addr"},
		{name: "--join, in --peers", id: 3, join: true, want: identity{id: 3, join: true, addr: "c:1"}},
		{name: "--join, in --peers, --addr", id: 3, join: true, addr: "x:1", want: identity{id: 3, join: true, addr: "x:1"}},
		{name: "file overrides --id, joins", id: 3, idFile: four, addr: "c:1",
			want: identity{id: 4, join: true, addr: "c:1", fromFile: true, implied: true}},
		{name: "file not in --peers needs --addr", id: 3, idFile: four, err: "needs --addr"},
		{name: "file in --peers bootstraps", id: 1, idFile: three, want: identity{id: 3, addr: "c:1", fromFile: true}},
		{name: "missing file: --id", id: 2, idFile: filepath.Join(dir, "none"), want: identity{id: 2, addr: "b:1"}},
		{name: "missing file, no --id", idFile: filepath.Join(dir, "none"), err: "--id is required"},
		{name: "empty file", id: 2, idFile: file("empty", "\n"), errIsIDBad: true},
		{name: "zero", id: 2, idFile: file("zero", "0"), errIsIDBad: true},
		{name: "not a number", id: 2, idFile: file("word", "four"), errIsIDBad: true},
		{name: "two numbers", id: 2, idFile: file("two", "4 5"), errIsIDBad: true},
		{name: "negative", id: 2, idFile: file("neg", "-4"), errIsIDBad: true},
		{name: "a directory", id: 2, idFile: dir, err: "--id-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolveIdentity(tc.id, tc.idFile, tc.join, tc.addr, peers)
			switch {
			case tc.errIsIDBad:
				require.ErrorIs(t, err, ErrIDFile)
				require.Contains(t, err.Error(), tc.idFile, "the error names the file")
			case tc.err != "":
				require.ErrorContains(t, err, tc.err)
			default:
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			}
		})
	}
}

// call makes an API call with a bearer token, as the client commands do.
func callAs(t *testing.T, token, method, u string, body any, hdr map[string]string) reply {
	t.Helper()
	h := map[string]string{"Authorization": "Bearer " + token}
	for k, v := range hdr {
		h[k] = v
	}
	return fencelocktest.Call(t, hc, method, u, body, h)
}

// flagOf is the value of --name in args.
func flagOf(t *testing.T, args []string, name string) string {
	t.Helper()
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
	}
	t.Fatalf("no --%s in %q", name, args)
	return ""
}

// A replica whose data is lost is replaced with the shipped commands only,
// as deploy/kubernetes/README.md does it: remove its ID, add a new ID at its
// old raft address non-voting, start `serve` with an --id-file naming the
// new ID (not in --peers, so it joins), wait until it is ready, promote it.
// A lock held before keeps its grant and token, and the new replica counts
// toward the quorum: with replica 1 stopped, voters 2 and 4 grant a lock.
func TestServeMembersReplaceLostReplica(t *testing.T) {
	dir := t.TempDir()
	tokens, readerToken := tempFile(t, "tokens", "ops\nreader read:*\n"), tempFile(t, "reader", "reader\n")
	p := startProcs(t, "--tokens-file", tokens)
	bin := p.bin
	peers, err := parseIDMap("peers", flagOf(t, p.args[1], "peers"))
	require.NoError(t, err)
	lostDir := flagOf(t, p.args[3], "dir")
	all := strings.Join([]string{p.urls[1], p.urls[2], p.urls[3]}, ",")
	admin := adminCLI{t: t, bin: bin, urls: all, tokens: tokens}
	cli, mustCLI := admin.run, admin.must

	// A lock held across the replacement, by a session that outlives it.
	r := callAs(t, "ops", "POST", p.urls[2]+"/v1/sessions", map[string]any{"ttl_ms": 600000, "name": "keeper"}, nil)
	require.Equal(t, 201, r.Status, r.Raw)
	keeper, keeperSecret := r.Str("session_id"), map[string]string{"Fencelock-Session-Secret": r.Str("session_secret")}
	r = callAs(t, "ops", "POST", lockPath(p.urls[2], "jobs/kept", "acquire"), map[string]any{"session_id": keeper}, keeperSecret)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	keptToken := r.Str("fencing_token")

	out := mustCLI("members")
	t.Logf("fencelock members:\n%s", out)
	for id := 1; id <= 3; id++ {
		require.Regexp(t, regexp.MustCompile(`(?m)^`+string(rune('0'+id))+`\s+\S+\s+voter$`), out)
	}

	// Replica 3's volume is lost: its process dies, its Dir goes.
	p.Kill(3)
	require.NoError(t, os.RemoveAll(lostDir))

	// A token without admin reads the membership but cannot change it.
	b, err := exec.Command(bin, "members", "remove", "3", "--http", all, "--token-file", readerToken).CombinedOutput()
	require.Error(t, err, "%s", b)
	require.Contains(t, string(b), "403 forbidden")
	require.Contains(t, string(b), "admin")
	b, err = exec.Command(bin, "members", "--http", all, "--token-file", readerToken).CombinedOutput()
	require.NoError(t, err, "%s", b)
	require.Regexp(t, `(?m)^3\s+\S+\s+voter$`, string(b))

	out = mustCLI("members", "remove", "3")
	require.Contains(t, out, "replica 3 is removed")
	require.Contains(t, out, "removed (never to be used again): 3")
	out = mustCLI("members", "add", "--id", "4", "--addr", peers[3])
	require.Contains(t, out, "replica 4 at "+peers[3]+" is a non-voting replica")
	require.Regexp(t, `(?m)^4\s+`+regexp.QuoteMeta(peers[3])+`\s+non-voting$`, out)
	// The removed ID is refused for good, with the server's reason.
	out, err = cli("members", "add", "--id", "3", "--addr", peers[3])
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "%v: %s", err, out)
	require.Contains(t, out, "id_removed")

	// The replacement: the pod of replica 3 comes back on an empty volume
	// as replica 4, from its --id-file, at 3's raft address.
	idFile := filepath.Join(dir, "ids", "fencelock-3")
	require.NoError(t, os.MkdirAll(filepath.Dir(idFile), 0o700))
	require.NoError(t, os.WriteFile(idFile, []byte("4\n"), 0o600))
	web4 := fencelocktest.FreePort(t)
	url4 := "http://" + web4
	args := append([]string{}, p.args[3]...)
	args = append(args, "--id-file", idFile, "--addr", peers[3], "--http", web4, "--log-level", "info")
	logs4 := startReplacement(t, bin, args, web4)
	require.Contains(t, logs4.String(), "joining a running group")
	require.Contains(t, logs4.String(), "replica=4")

	out = mustCLI("members", "add", "--id", "4", "--addr", peers[3], "--voting")
	require.Contains(t, out, "replica 4 at "+peers[3]+" is a voter")
	b, err = exec.Command(bin, "members", "--http", url4, "--token-file", tokens).CombinedOutput()
	require.NoError(t, err, "%s", b)
	t.Logf("fencelock members on replica 4:\n%s", b)
	require.Regexp(t, `(?m)^4\s+`+regexp.QuoteMeta(peers[3])+`\s+voter$`, string(b))
	require.NotRegexp(t, `(?m)^3\s`, string(b))
	b, err = exec.Command(bin, "members", "-o", "json", "--http", url4, "--token-file", tokens).CombinedOutput()
	require.NoError(t, err, "%s", b)
	var m struct {
		Voters  map[string]string `json:"voters"`
		Removed []uint64          `json:"removed"`
	}
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	require.Equal(t, map[string]string{"1": peers[1], "2": peers[2], "4": peers[3]}, m.Voters)
	require.Equal(t, []uint64{3}, m.Removed)

	// The lock granted before is still held, same grant, same token, as
	// replica 4 reads it.
	r = callAs(t, "ops", "GET", lockPath(url4, "jobs/kept", ""), nil, nil)
	require.Equal(t, keeper, r.Str("holder_session"), r.Raw)
	require.Equal(t, keptToken, r.Str("fencing_token"), r.Raw)

	// Voters 2 and 4 are a quorum without 1.
	p.Kill(1)
	r = callAs(t, "ops", "POST", url4+"/v1/sessions", map[string]any{"ttl_ms": 60000}, nil)
	deadline := time.Now().Add(90 * time.Second)
	for r.Status != 201 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		r = callAs(t, "ops", "POST", url4+"/v1/sessions", map[string]any{"ttl_ms": 60000}, nil)
	}
	require.Equal(t, 201, r.Status, r.Raw)
	sid, sh := r.Str("session_id"), map[string]string{"Fencelock-Session-Secret": r.Str("session_secret")}
	r = callAs(t, "ops", "POST", lockPath(url4, "jobs/new", "acquire"), map[string]any{"session_id": sid}, sh)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	r = callAs(t, "ops", "GET", lockPath(p.urls[2], "jobs/kept", ""), nil, nil)
	require.Equal(t, keptToken, r.Str("fencing_token"), "the kept lock, as replica 2 reads it: %s", r.Raw)
}
