package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
)

// fencelock version prints the build's version and commit and the log and
// snapshot formats, as text or as /v1/status's JSON; a wrong -o or an
// argument is an error (exit 1), not a guess.
func TestVersionCommand(t *testing.T) {
	bin := binary(t)
	out, err := exec.Command(bin, "version", "-o", "json").CombinedOutput()
	require.NoError(t, err, string(out))
	var v httpapi.VersionJSON
	require.NoError(t, json.Unmarshal(out, &v), string(out))
	want := fencelock.BuildVersion() // this test binary's: the same formats
	require.Equal(t, want.Codec, v.Codec)
	require.Equal(t, want.Snapshot, v.Snapshot)
	require.NotEmpty(t, v.Version)
	if v.Commit != "" { // stamped by go build from this checkout
		require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{40}(\+dirty)?$`), v.Commit)
	}

	out, err = exec.Command(bin, "version").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "fencelock "+v.Version+"\n")
	require.Regexp(t, `log format: +reads 1 to \d+\n`, string(out))

	for _, args := range [][]string{{"version", "-o", "yaml"}, {"version", "extra"}} {
		out, err = exec.Command(bin, args...).CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%v: %s", args, out)
		require.Equal(t, 1, ee.ExitCode(), "%v: %s", args, out)
	}
}

// A build without VCS metadata (the container's: its context leaves .git
// out) reports the version and commit linked in with -ldflags -X, as
// deploy/kubernetes/Dockerfile builds it.
func TestVersionLinkedIn(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fencelock")
	build := exec.Command("go", "build", "-buildvcs=false", "-o", bin, "-ldflags",
		"-X github.com/fencelock/fencelock.linkedVersion=v9.8.7 -X github.com/fencelock/fencelock.linkedCommit=0123abc", ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))
	out, err = exec.Command(bin, "version", "-o", "json").CombinedOutput()
	require.NoError(t, err, string(out))
	var v httpapi.VersionJSON
	require.NoError(t, json.Unmarshal(out, &v), string(out))
	require.Equal(t, "v9.8.7", v.Version)
	require.Equal(t, "0123abc", v.Commit)
}

func TestPrintVersion(t *testing.T) {
	var b bytes.Buffer
	v := fencelock.Version{Version: "v1.2.3", Codec: 7, Snapshot: 6}
	require.NoError(t, printVersion(&b, v, "text"))
	require.Equal(t, "fencelock v1.2.3\ncommit:          unknown\nlog format:      reads 1 to 7\nsnapshot format: reads 1 to 6\n"+
		"writes:          what each group's members all read (fencelock status, WRITES)\n",
		regexp.MustCompile(`go: .*\n`).ReplaceAllString(b.String(), ""))
	require.ErrorContains(t, printVersion(&b, v, "yaml"), "-o must be text or json")
}
