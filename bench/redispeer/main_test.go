package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/bench/lockbench"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// needServer fails without redis-server in CI (.ci/run installs it) and
// skips elsewhere.
func needServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found, and CI is set")
		}
		t.Skip("redis-server not found (apt-get install redis-server)")
	}
}

// The floor is the most durable single Redis: every write in an AOF fsync'd
// before the reply, no RDB, no replica; and stopping it ends the process.
func TestServerFsyncsEveryWriteAndHasNoReplica(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	s, err := startServer(ctx, t.TempDir())
	require.NoError(t, err)
	cl := redis.NewClient(&redis.Options{Addr: s.addr})
	for key, want := range map[string]string{"appendonly": "yes", "appendfsync": "always", "save": "", "bind": "127.0.0.1"} {
		got, err := cl.ConfigGet(ctx, key).Result()
		require.NoError(t, err)
		require.Equal(t, want, got[key], key)
	}
	info, err := cl.Info(ctx, "replication").Result()
	require.NoError(t, err)
	require.Contains(t, info, "role:master")
	require.Contains(t, info, "connected_slaves:0")
	require.NoError(t, cl.Close())

	s.stop()
	require.NotNil(t, s.cmd.ProcessState, "the process was waited for")
	_, err = net.DialTimeout("tcp", s.addr, time.Second)
	require.Error(t, err, "nothing listens once stopped")
	s.stop() // a second stop is a no-op
}

// redsync excludes a second holder until the first releases, and a release
// after the lock expired says so.
func TestRedsyncLockExcludesUntilReleased(t *testing.T) {
	needServer(t)
	ctx := context.Background()
	c, err := start(ctx, t.TempDir())
	require.NoError(t, err)
	defer c.Close()
	a, err := c.NewClient(ctx, 0, 10*time.Second)
	require.NoError(t, err)
	b, err := c.NewClient(ctx, 0, 10*time.Second)
	require.NoError(t, err)

	ha, err := a.Acquire(ctx, "x")
	require.NoError(t, err)
	require.Zero(t, ha.Token(), "redsync has no fencing token")
	short, cancel := context.WithTimeout(ctx, 400*time.Millisecond)
	_, err = b.Acquire(short, "x")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "held by a: b waits until its context ends")

	got := make(chan error, 1)
	go func() {
		h, err := b.Acquire(ctx, "x")
		if err == nil {
			err = h.Release(ctx)
		}
		got <- err
	}()
	require.NoError(t, ha.Release(ctx))
	select {
	case err := <-got:
		require.NoError(t, err, "b gets the lock once a released it")
	case <-time.After(30 * time.Second):
		t.Fatal("b not granted after a released")
	}

	// A lock whose expiry passed is gone: its release fails.
	e, err := c.NewClient(ctx, 0, 50*time.Millisecond)
	require.NoError(t, err)
	he, err := e.Acquire(ctx, "y")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h, err := b.Acquire(ctx, "y") // granted once y expired
		if err == nil {
			require.NoError(t, h.Release(ctx))
		}
		return err == nil
	}, 30*time.Second, 10*time.Millisecond)
	require.Error(t, he.Release(ctx))
	require.NoError(t, errors.Join(a.Close(ctx), b.Close(ctx), e.Close(ctx)))
}

// run prints a line per workload named: W1's placements and W3 measured
// (W3 without token errors: its grants are untokened), the rest "not run".
func TestRunMeasuresW1AndW3AndSaysWhatItDoesNotRun(t *testing.T) {
	needServer(t)
	var out bytes.Buffer
	o := lockbench.Options{System: "redis", Duration: 500 * time.Millisecond, Iterations: 50}
	require.NoError(t, run(&out, "W1,W3,W4", t.TempDir(), o))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4)
	byWorkload := map[string]lockbench.Result{}
	for _, l := range lines {
		r, err := lockbench.Parse(l)
		require.NoError(t, err, l)
		require.Equal(t, "redis", r.System)
		byWorkload[r.Workload] = r
	}
	for _, w := range []string{lockbench.W1Leader, lockbench.W1Follower} {
		require.Equal(t, 50, byWorkload[w].Ops, w)
		require.Zero(t, byWorkload[w].Errors, w)
		require.Positive(t, byWorkload[w].P50, w)
	}
	w3 := byWorkload["W3"]
	require.Positive(t, w3.Ops)
	require.Zero(t, w3.Errors, w3.Notes)
	overlaps, ok := w3.Note("overlaps")
	require.True(t, ok)
	require.Zero(t, overlaps)
	untokened, ok := w3.Note("untokened_grants")
	require.True(t, ok, w3.Notes)
	require.GreaterOrEqual(t, untokened, float64(w3.Ops))
	require.Contains(t, byWorkload["W4"].Notes, "not run")
	require.Zero(t, byWorkload["W4"].Ops)
}
