package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Flags stand anywhere among a command's operands, as etcdctl's and
// kubectl's do; lock and elect also take their command without "--", as
// consul lock and etcdctl lock do.
func TestFlagsAnywhere(t *testing.T) {
	t.Run("lock", func(t *testing.T) {
		for _, tc := range []struct {
			args     []string
			ops, cmd []string
			ttl      time.Duration
		}{
			{[]string{"jobs/a", "--ttl", "5s", "--", "cmd", "-x"}, []string{"jobs/a"}, []string{"cmd", "-x"}, 5 * time.Second},
			{[]string{"--ttl", "5s", "jobs/a", "--", "cmd"}, []string{"jobs/a"}, []string{"cmd"}, 5 * time.Second},
			{[]string{"jobs/a", "cmd", "--ttl", "5s"}, []string{"jobs/a"}, []string{"cmd", "--ttl", "5s"}, 10 * time.Second},
			{[]string{"jobs/a", "--ttl=3s", "sh", "-c", "echo -- x"}, []string{"jobs/a"}, []string{"sh", "-c", "echo -- x"}, 3 * time.Second},
			{[]string{"jobs/a", "--", "git", "log", "--", "f"}, []string{"jobs/a"}, []string{"git", "log", "--", "f"}, 10 * time.Second},
		} {
			var f holdFlags
			ops, cmd, err := f.parse("lock", "", 1, tc.args)
			require.NoError(t, err, tc.args)
			require.Equal(t, tc.ops, ops, tc.args)
			require.Equal(t, tc.cmd, cmd, tc.args)
			require.Equal(t, tc.ttl, f.ttl, tc.args)
		}
	})
	t.Run("elect", func(t *testing.T) {
		var f holdFlags
		ops, cmd, err := f.parse("elect", "", 2, []string{"primary", "--ttl", "4s", "host-1", "run", "-v"})
		require.NoError(t, err)
		require.Equal(t, []string{"primary", "host-1"}, ops)
		require.Equal(t, []string{"run", "-v"}, cmd)
		require.Equal(t, 4*time.Second, f.ttl)
	})
	t.Run("mistakes say what to type", func(t *testing.T) {
		for _, tc := range []struct {
			n    int
			args []string
			want string
		}{
			{1, []string{"jobs/a"}, "lock: no command to run: type it after jobs/a, as in: fencelock lock jobs/a -- CMD [ARGS...]"},
			{1, []string{"jobs/a", "--ttl", "5s"}, "lock: no command to run"},
			{1, []string{"--", "cmd"}, "lock: want one lock NAME before the command, got 0 operands (fencelock lock [flags] NAME [--] CMD [ARGS...])"},
			{2, []string{"primary", "--", "cmd"}, "lock: want NAME VALUE before the command, got 1 operand"},
			{1, []string{"jobs/a", "--grace", "-1s", "cmd"}, "lock: --grace -1s: must not be negative"},
		} {
			var f holdFlags
			_, _, err := f.parse("lock", "", tc.n, tc.args)
			require.ErrorContains(t, err, tc.want, tc.args)
		}
	})
	t.Run("listings", func(t *testing.T) {
		var f listFlags
		rest, err := f.parse("sessions", "", []string{"x@pay", "-o", "json", "--http", "http://127.0.0.1:1"})
		require.NoError(t, err)
		require.Equal(t, []string{"x@pay"}, rest)
		require.Equal(t, "json", f.output)

		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		force := fs.Bool("force", false, "")
		rest, err = parseAll(fs, []string{"drop", "g", "--force", "--", "-odd-name"})
		require.NoError(t, err)
		require.True(t, *force)
		require.Equal(t, []string{"drop", "g", "-odd-name"}, rest)
	})
	t.Run("one vocabulary for -o", func(t *testing.T) {
		for _, o := range []string{"text", "table"} {
			got, err := checkOutput("locks", o)
			require.NoError(t, err)
			require.Equal(t, "text", got)
		}
		_, err := checkOutput("locks", "yaml")
		require.EqualError(t, err, "locks: -o yaml: want text (or table, the same) or json")
	})
}

// A mistake in serve's flags is reported in the flags' words, with what to
// type, not in Config's field names or the flag package's.
func TestServeFlagMistakesSpeakFlags(t *testing.T) {
	_, err := parseIDMap("peers", "1=127.0.0.1:7001,2=127.0.0.1")
	require.EqualError(t, err, `--peers 2=127.0.0.1: want HOST:PORT, such as 10.0.0.1:7001 (no port in "127.0.0.1")`)
	_, err = parseIDMap("http-peers", "1=127.0.0.1:7081")
	require.EqualError(t, err, "--http-peers 1=127.0.0.1:7081: want a URL such as http://10.0.0.1:7080")
	m, err := parseIDMap("http-peers", "1=http://127.0.0.1:7081,2=https://b:7082")
	require.NoError(t, err)
	require.Len(t, m, 2)
	require.ErrorContains(t, checkHostPort("7581", "127.0.0.1:7080"), `want HOST:PORT, such as 127.0.0.1:7080 (no port in "7581")`)
	require.ErrorContains(t, checkHostPort("h:70000", "127.0.0.1:7080"), "a port from 1 to 65535")
	require.NoError(t, checkHostPort(":7080", "127.0.0.1:7080"))

	fs := newFlags("serve", "[flags]")
	fs.SetOutput(io.Discard)
	var groups groupFlags
	fs.Var(&groups, "group", "")
	fs.Duration("ttl", 10*time.Second, "")
	for args, want := range map[string]string{
		"--group billing=1,2": "serve: --group billing=1,2: 2 voters; a group has 1, 3 or 5 (an even count survives no more failures than one fewer) (fencelock serve -h lists its flags)",
		"--group billing":     "serve: --group billing: want NAME=ID,ID,..., such as billing=1,2,3",
		"--group b=1,x,3":     `serve: --group b=1,x,3: voter "x" is not a positive replica ID`,
		"--ttl 5":             "serve: --ttl 5: parse error; want a value such as 10s",
		"--nope":              "serve: no flag --nope (fencelock serve -h lists its flags)",
	} {
		_, err := parseAll(fs, strings.Fields(args))
		require.ErrorContains(t, err, want, args)
	}
	_, err = parseAll(fs, []string{"-h"})
	require.ErrorIs(t, err, flag.ErrHelp)
}

// serve --dev only where it is safe: a loopback --http, no tokens file.
func TestServeDevNeedsLoopback(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:7080", "[::1]:7080", "localhost:7080", "127.0.0.2:1"} {
		require.NoError(t, checkDev(ok, ""), ok)
	}
	for _, bad := range []string{"0.0.0.0:7080", ":7080", "10.0.0.1:7080", "[::]:7080"} {
		require.ErrorContains(t, checkDev(bad, ""), "--http must be a loopback address", bad)
	}
	require.ErrorContains(t, checkDev("127.0.0.1:7080", "tokens"), "--dev and --tokens-file do not go together")
}
