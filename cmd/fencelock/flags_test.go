package main

import (
	"flag"
	"io"
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
