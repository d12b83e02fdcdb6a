package main

import (
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/stretchr/testify/require"
)

// `fencelock locks` shows who holds a lock (its session's name) and for how
// long, and who waits by name and place; `locks --sort waiters` ranks it
// among the contended; `sessions` names the sessions; `lock --name` names
// the lock command's session.
func TestLocksShowsNames(t *testing.T) {
	base, _, _ := startOne(t)
	bin := binary(t)
	r := do(t, "POST", base+"/v1/sessions", map[string]any{"ttl_ms": 60000, "name": "reindex@worker-3"})
	require.Equal(t, 201, r.Status, r.Raw)
	holder := r.Str("session_id")
	secrets.Keep(holder, r.Str("session_secret"))
	r = do(t, "POST", lockPath(base, "jobs/reindex", "acquire"), map[string]any{"session_id": holder})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	token := r.Str("fencing_token")

	// The lock command queues behind it, named.
	waiter := exec.Command(bin, "lock", "--http", base, "--name", "backfill@worker-7", "jobs/reindex", "--", "true")
	lock := fencelocktest.StartCmd(t, waiter)
	defer lock.Kill()
	fencelocktest.WaitFor(t, "the lock command to queue", func() bool {
		return do(t, "GET", lockPath(base, "jobs/reindex", ""), nil).Body["waiters"] == float64(1)
	})

	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append(args, "--http", base)...).CombinedOutput()
		require.NoError(t, err, "%v: %s", args, out)
		return string(out)
	}
	// Held for whole seconds: wait until it shows at least one.
	held := regexp.MustCompile(`jobs/reindex\s+reindex@worker-3\s+[1-9][0-9]*s\s`)
	var out string
	fencelocktest.WaitFor(t, "locks to show a hold time of a second or more", func() bool {
		out = run("locks")
		return held.MatchString(out)
	})
	t.Logf("fencelock locks:\n%s", out)
	require.Contains(t, out, "HOLDER")
	require.Contains(t, out, "HELD FOR")
	require.Contains(t, out, token)
	require.Contains(t, out, "backfill@worker-7", "the waiter, by name")

	out = run("locks", "--sort", "waiters", "-n", "5")
	t.Logf("fencelock locks --sort waiters:\n%s", out)
	require.Regexp(t, `jobs/reindex\s+reindex@worker-3\s+[0-9]+s\s+`+holder+`\s+`+token+`\s+1\s+1\s+backfill@worker-7`, out)

	out = run("sessions")
	require.Regexp(t, holder+`\s+reindex@worker-3\s`, out)
	require.Contains(t, out, "backfill@worker-7")

	bad, err := exec.Command(bin, "locks", "--sort", "size", "--http", base).CombinedOutput()
	require.Error(t, err, "%s", bad)
	require.Contains(t, string(bad), "--sort")

	// Released, the lock passes to the lock command, which runs and exits.
	r = do(t, "POST", lockPath(base, "jobs/reindex", "release"), map[string]any{"session_id": holder, "fencing_token": token})
	require.Equal(t, 200, r.Status, r.Raw)
	select {
	case <-lock.Exited():
		err := lock.Err()
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("the lock command did not run within 60s of the release")
	}
}
