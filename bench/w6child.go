package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// childReport is what a replica restarted in its own process reports.
type childReport struct {
	CatchUpMS, RestoreMS float64
	RestoredIndex        uint64
	Restores             int // snapshots it recovered from: its own at start, then the leader's
	// RSSMB is its resident memory once caught up, PeakRSSMB the most it
	// had at any time (VmHWM): the restore's peak, which is what a host
	// must have room for.
	RSSMB, PeakRSSMB, HeapMB float64
	Error                    string
}

// childArgs is how the parent hands a replica's config to the child.
type childArgs struct {
	Config      fencelock.Config
	Target      uint64 // caught up once this index is applied
	HeapProfile string // where to write a heap profile once caught up, if set
	Trace       bool   // print its memory every 200ms to stderr
}

const childEnv = "LOCKBENCH_W6_REPLICA"

// restartInChild runs this binary again as one replica on cfg's dir, and
// waits for its report: the time to catch up to target, its snapshot
// restore, and its memory once caught up.
//
// memLimit, unless empty, is the child's GOMEMLIMIT: a replica deployed on
// a host sized for its state runs with one, and without it the garbage
// collector lets the heap grow to twice the live state (GOGC=100) while a
// snapshot is restored.
func restartInChild(ctx context.Context, cfg fencelock.Config, target uint64, memLimit, heapProfile string, trace bool) (childReport, error) {
	cfg.Logger = nil // not serialisable; the child uses its own
	args, err := json.Marshal(childArgs{Config: cfg, Target: target, HeapProfile: heapProfile, Trace: trace})
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
	if memLimit != "" {
		cmd.Env = append(cmd.Env, "GOMEMLIMIT="+memLimit) // the last of duplicates wins
	}
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
	if a.Trace {
		stop := traceMemory(start, a.HeapProfile)
		defer stop()
	}
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
	r.RestoreMS, r.RestoredIndex, r.Restores = ms(snap.LastRestore), snap.RestoredIndex, snap.Restores
	r.HeapMB = heapMB()
	r.RSSMB = rssMB()
	r.PeakRSSMB = procStatusMB("VmHWM:")
	if a.HeapProfile != "" {
		if err := writeHeapProfile(a.HeapProfile); err != nil {
			r.Error = err.Error()
		}
	}
	return r
}

// traceMemory prints the process's resident memory and the live Go heap
// every 200ms until stopped: where in the restart the peak is. With a heap
// profile path, it also writes a profile to path+".peak" whenever the heap
// reaches a new high: what the peak is made of.
func traceMemory(start time.Time, heapProfile string) func() {
	done := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	var high uint64
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				metrics.Read(sample)
				if h := sample[0].Value.Uint64(); heapProfile != "" && h > high {
					high = h
					_ = writeHeapProfile(heapProfile + ".peak")
				}
				fmt.Fprintf(os.Stderr, "W6 replica %.1fs rss %.0f MB peak %.0f MB heap objects %.0f MB gc %d\n",
					time.Since(start).Seconds(), procStatusMB("VmRSS:"), procStatusMB("VmHWM:"),
					float64(sample[0].Value.Uint64())/(1<<20), sample[1].Value.Uint64())
			}
		}
	}()
	return func() { close(done) }
}

func writeHeapProfile(path string) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// procStatusMB is a field of /proc/self/status given in kB, in MB; -1 if
// there is no such field.
func procStatusMB(field string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return -1
}
