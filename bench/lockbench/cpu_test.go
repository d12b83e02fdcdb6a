package lockbench

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// /proc's figure of a process is the one getrusage gives it: both are the
// kernel's counters, /proc's in ticks of 10 ms.
func TestProcCPUReadsTheKernelsFigure(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Fatalf("this benchmark's CPU figure needs /proc: %v", err)
	}
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
	}
	self, ok := cpuClock{}.read()
	require.True(t, ok)
	proc, ok := ProcessCPU(os.Getpid())
	require.True(t, ok)
	require.Positive(t, proc)
	require.InDelta(t, self.Seconds(), proc.Seconds(), 0.05)
}

// A process of the system that is gone leaves the figure out rather than
// counting less than the system spent.
func TestThroughputLeavesCPUOutWhenAProcessIsGone(t *testing.T) {
	f := &namingFake{names: map[string]int{}}
	r, err := Throughput(context.Background(), f, 2, 100*time.Millisecond, func(int) string { return "bench/T/0" })
	require.NoError(t, err)
	v, ok := r.Note("cpu_us_per_pair")
	require.True(t, ok, "notes %q", r.Notes)
	require.Positive(t, v)

	cmd := exec.Command("true")
	require.NoError(t, cmd.Run()) // exited and reaped: its pid names nothing now
	g := &goneFake{namingFake{names: map[string]int{}}, cmd.Process.Pid}
	r, err = Throughput(context.Background(), g, 2, 100*time.Millisecond, func(int) string { return "bench/T/0" })
	require.NoError(t, err)
	require.Positive(t, r.Ops)
	_, ok = r.Note("cpu_us_per_pair")
	require.False(t, ok, "notes %q", r.Notes)
}

type goneFake struct {
	namingFake
	pid int
}

func (g *goneFake) Pids() []int { return []int{g.pid} }

// The CPU per pair sets the CPU spent between the two readings against the
// pairs that ended between them, whenever the readings' timers fired.
func TestCPUWindowCountsThePairsBetweenItsReadings(t *testing.T) {
	t0 := time.Now()
	w := cpuWindow{spent: time.Millisecond, from: t0.Add(50 * time.Millisecond), to: t0.Add(100 * time.Millisecond)}
	ends := []time.Time{t0, t0.Add(49 * time.Millisecond), t0.Add(50 * time.Millisecond), t0.Add(75 * time.Millisecond),
		t0.Add(100 * time.Millisecond), t0.Add(101 * time.Millisecond)}
	require.Equal(t, 3, w.pairsIn(ends))
	require.Zero(t, w.pairsIn(nil))
}
