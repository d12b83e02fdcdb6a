package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Issue 48, item 8, the version gate's second suspicion: the released
// build, which predates the gate, started on the Dir of a replica whose
// group writes a log version above the baseline. That build checks no versions: it would
// replay the log, skip every entry it cannot read as corrupt, and serve
// (and snapshot) a state without them. The Dir refuses it instead: it
// exits before it replays anything, and its error names the file that
// refused it. A one-replica deployment, made in process, keeps it cheap: the
// released build, alone, has a quorum and would serve at once.
func TestReleasedBuildRefusesAnUpgradedDir(t *testing.T) {
	oldBin := buildRevision(t, releasedRevision)
	raftAddr, httpAddr := fencelocktest.FreePort(t), fencelocktest.FreePort(t)
	dir := filepath.Join(t.TempDir(), "1")

	// This build, alone: the gate rises to what it reads, and a session
	// holds x, in entries of this build's log version.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := fencelock.Start(ctx, fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: raftAddr}, Dir: dir,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	v := fencelock.BuildVersion()
	fencelocktest.WaitFor(t, "the group writes this build's versions", func() bool {
		return n.Status().Writes == fencelock.Formats{Codec: v.Codec, Snapshot: v.Snapshot}
	})
	s, err := n.NewSession(ctx, fencelock.WithTTL(time.Hour))
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	n.Close() // as a stop would: the session and its lock stay in the log

	old := exec.Command(oldBin, "serve", "--id", "1", "--peers", "1="+raftAddr, "--dir", dir, "--http", httpAddr, "--log-level", "warn")
	var out fencelocktest.LockedBuffer
	old.Stdout, old.Stderr = &out, &out
	require.NoError(t, old.Start())
	exited := make(chan error, 1)
	go func() { exited <- old.Wait() }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = old.Process.Signal(syscall.SIGKILL)
			<-exited
		}
	}()
	url := "http://" + httpAddr
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.After(60 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err // for the deferred check
			require.Error(t, err, "the released build exits with an error:\n%s", &out)
			require.Contains(t, out.String(), "fencelock-group.json", "its error names the file that refused it")
			t.Logf("the released build refused the Dir: %s", strings.TrimSpace(out.String()))
			return
		case <-deadline:
			t.Fatalf("the released build neither exited nor became ready on the upgraded Dir:\n%s", &out)
		case <-time.After(50 * time.Millisecond):
		}
		if ok, _ := isReady(hc, url); !ok {
			continue
		}
		// It serves: say what it makes of the lock the Dir's log holds.
		var info struct {
			Held  bool   `json:"held"`
			Token string `json:"fencing_token"`
		}
		resp, err := hc.Get(url + "/v1/locks/x")
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&info)
			resp.Body.Close()
		}
		t.Fatalf("the released build started on a Dir whose group writes above the baseline, replayed its log and serves: "+
			"it answers x held %v (token %q; the log holds it with %d): %s\n%s",
			info.Held, info.Token, l.Token(), fmt.Sprint(err), &out)
	}
}
