package main

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
)

// A lock revoked at the group while its session lives on: the watch shows
// the grant ended, and `fencelock lock` sends CMD SIGTERM at once, not at
// the lease's end (the heartbeats go on being answered, so that would be
// never); lock exits with CMD's status.
func TestLockRevokedStopsCommand(t *testing.T) {
	dir := t.TempDir()
	tokens := tempFile(t, "tokens", "sekret\n")
	base, _, _ := startOne(t, "--tokens-file", tokens)
	const name = "jobs/revoked"
	script := `echo "$FENCELOCK_TOKEN" > out.tmp && mv out.tmp out; trap 'echo term >> log; exit 7' TERM; while :; do sleep 0.05; done`
	cmd := exec.Command(binary(t), "lock", "--http", base, "--token-file", tokens, "--ttl", "10s", name, "--", "sh", "-c", script)
	cmd.Dir = dir
	cmd.WaitDelay = 2 * time.Second // CMD may outlive a failed test: do not wait for it to close stderr
	lock := fencelocktest.StartCmd(t, cmd)
	// SIGTERM first: lock passes it to CMD's process group, which a
	// kill of lock alone would leave running.
	defer lock.Stop(5 * time.Second)
	fencelocktest.WaitFor(t, "CMD to start", func() bool {
		_, err := os.Stat(filepath.Join(dir, "out"))
		return err == nil
	})
	revoked := time.Now()
	req, _ := http.NewRequest("POST", lockPath(base, name, "revoke"), strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer sekret")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	select {
	case <-lock.Exited():
		err := lock.Err()
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "%v; stderr: %s", err, lock.Stderr.String())
		require.Equal(t, 7, ee.ExitCode(), "stderr: %s", lock.Stderr.String())
	case <-time.After(5 * time.Second):
		t.Fatalf("CMD still runs 5s after its lock was revoked (its lease is 6s and renewed); stderr: %s", lock.Stderr.String())
	}
	t.Logf("CMD stopped %v after the revoke; stderr:\n%s", time.Since(revoked), lock.Stderr.String())
	log, _ := os.ReadFile(filepath.Join(dir, "log"))
	require.Equal(t, "term\n", string(log), "CMD got no SIGTERM")
	require.Contains(t, lock.Stderr.String(), "the grant ended at the group")
}
