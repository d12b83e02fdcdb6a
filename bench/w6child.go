package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// childReport is what a replica restarted in its own process reports.
type childReport struct {
	CatchUpMS, RestoreMS float64
	RestoredIndex        uint64
	RSSMB, HeapMB        float64
	Error                string
}

// childArgs is how the parent hands a replica's config to the child.
type childArgs struct {
	Config fencelock.Config
	Target uint64 // caught up once this index is applied
}

const childEnv = "LOCKBENCH_W6_REPLICA"

// restartInChild runs this binary again as one replica on cfg's dir, and
// waits for its report: the time to catch up to target, its snapshot
// restore, and its memory once caught up.
func restartInChild(ctx context.Context, cfg fencelock.Config, target uint64) (childReport, error) {
	cfg.Logger = nil // not serialisable; the child uses its own
	args, err := json.Marshal(childArgs{Config: cfg, Target: target})
	if err != nil {
		return childReport{}, err
	}
	self, err := os.Executable()
	if err != nil {
		return childReport{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, self)
	cmd.Env = append(os.Environ(), childEnv+"="+string(args))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return childReport{}, fmt.Errorf("replica process: %w", err)
	}
	var r childReport
	if err := json.Unmarshal(bytes.TrimSpace(out), &r); err != nil {
		return r, fmt.Errorf("replica process printed %q: %w", out, err)
	}
	if r.Error != "" {
		return r, fmt.Errorf("replica process: %s", r.Error)
	}
	return r, nil
}

// runChild is main in the child process, if it is one.
func runChild() bool {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return false
	}
	r := child(spec)
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return true
}

func child(spec string) (r childReport) {
	var a childArgs
	if err := json.Unmarshal([]byte(spec), &a); err != nil {
		return childReport{Error: err.Error()}
	}
	a.Config.Logger = quiet
	start := time.Now()
	n, err := fencelock.Start(context.Background(), a.Config)
	if err != nil {
		return childReport{Error: err.Error()}
	}
	defer n.Close()
	for n.Status().AppliedIndex < a.Target { // no event tells "caught up"
		if time.Since(start) > 2*time.Minute {
			return childReport{Error: "did not catch up in 2 minutes"}
		}
		time.Sleep(2 * time.Millisecond)
	}
	r.CatchUpMS = ms(time.Since(start))
	snap := testhook.SnapshotStats(n)
	r.RestoreMS, r.RestoredIndex = ms(snap.LastRestore), snap.RestoredIndex
	r.HeapMB = heapMB()
	r.RSSMB = rssMB()
	return r
}
