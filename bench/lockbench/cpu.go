package lockbench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Processes is what a Cluster whose replicas (or servers) run in other
// processes than the benchmark's also implements: their process IDs, so
// that Throughput's CPU figure counts every process of the system, not
// only the one that drives it.
type Processes interface {
	Pids() []int
}

// cpuClock reads the CPU time (user and system) spent so far by this
// process and by the cluster's other processes. ok is false where it
// cannot be read (no /proc, a process gone): the figure is then left out.
type cpuClock struct{ pids []int }

func newCPUClock(c Cluster) cpuClock {
	if p, ok := c.(Processes); ok {
		return cpuClock{pids: p.Pids()}
	}
	return cpuClock{}
}

func (k cpuClock) read() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	for _, pid := range k.pids {
		d, ok := ProcessCPU(pid)
		if !ok {
			return 0, false
		}
		total += d
	}
	return total, true
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

// ProcessCPU reads process pid's utime and stime from /proc/<pid>/stat.
func ProcessCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, the 12th and 13th after it.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(u+st) * time.Second / clockTicks, true
}

// cpuWindow is the CPU a system spent between two readings, and when they
// were taken.
type cpuWindow struct {
	spent    time.Duration
	from, to time.Time
}

// pairsIn counts the pair ends within w.
func (w cpuWindow) pairsIn(ends []time.Time) int {
	n := 0
	for _, e := range ends {
		if !e.Before(w.from) && !e.After(w.to) {
			n++
		}
	}
	return n
}

// measureCPU reads clock at from and at to, and sends the CPU spent
// between the readings with the instants they were taken (a timer fires
// late on a loaded box: the pairs to set against the CPU are the ones
// between the readings, not between from and to), then closes the
// channel; it closes it without a value if ctx ends first or the clock
// cannot be read.
func measureCPU(ctx context.Context, clock cpuClock, from, to time.Time) <-chan cpuWindow {
	spent := make(chan cpuWindow, 1)
	go func() {
		defer close(spent)
		at := func(t time.Time) (time.Duration, time.Time, bool) {
			timer := time.NewTimer(time.Until(t))
			defer timer.Stop()
			select {
			case <-timer.C:
				cpu, ok := clock.read()
				return cpu, time.Now(), ok
			case <-ctx.Done():
				return 0, time.Time{}, false
			}
		}
		start, fromAt, ok := at(from)
		if !ok {
			return
		}
		if end, toAt, ok := at(to); ok {
			spent <- cpuWindow{end - start, fromAt, toAt}
		}
	}()
	return spent
}
