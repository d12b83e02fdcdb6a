package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"runtime/trace"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A command's chain as a replica's: the worker hands it to a goroutine
// that fsyncs a file and writes to a loopback socket, whose reader wakes
// the worker. The path found must hold the fsync, one loopback hop and the
// wake-ups, and nothing from before the wait.
func TestAnalyzeFollowsWakeUpsSyscallsAndLoopback(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	out, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	in := <-accepted
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer f.Close()

	const commands, skip = 30, 5
	// work is unbuffered: the worker waits for the command only once it is
	// taken, so the command's whole chain is in the wait; answers are
	// buffered, so the receiver never waits for the worker.
	work, answers := make(chan byte), make(chan byte, commands)
	var buf bytes.Buffer
	require.NoError(t, trace.Start(&buf))
	go func() { // the "replica": fsync, then send
		for b := range work {
			_, _ = f.Write([]byte{b})
			_ = f.Sync()
			_, _ = out.Write([]byte{b})
		}
		out.Close()
	}()
	go func() { // the "receiver": wakes the worker
		one := make([]byte, 1)
		for {
			if _, err := in.Read(one); err != nil {
				close(answers)
				return
			}
			answers <- one[0]
		}
	}()
	workerLoop(commands, work, answers)
	close(work)
	for range answers {
	}
	trace.Stop()
	in.Close()

	rep, err := Analyze(&buf, Options{Worker: "critpath.workerLoop", Wait: "critpath.awaitCommand", Skip: skip})
	require.NoError(t, err)
	// A command answered before its worker got to wait (a worker kept
	// off the processor that long) is no wait: at most one per command.
	require.LessOrEqual(t, rep.Waits, commands-skip)
	require.GreaterOrEqual(t, rep.Waits, (commands-skip)/2)
	require.Positive(t, rep.P50)
	require.InDelta(t, 1.0, rep.Counts["loopback hop"], 0.2, "one socket hop per command: %v", rep.Counts)
	require.InDelta(t, 1.0, rep.Counts["syscall: fsync"], 0.2, "one fsync per command: %v", rep.Counts)
	require.Positive(t, rep.Time["syscall: fsync"])
	require.GreaterOrEqual(t, rep.Links, 1.5, "mostly two: the hop and the receiver's wake-up of the worker")
	require.Equal(t, commands, len(rep.SyncsAlone)+len(rep.SyncsOver))
	total := 0.0
	for k, v := range rep.Time {
		if !strings.HasPrefix(k, " ") {
			total += v
		}
	}
	require.InDelta(t, rep.Mean, total, rep.Mean*0.01, "the path accounts for the whole wait")
	var printed bytes.Buffer
	rep.Print(&printed)
	require.Contains(t, printed.String(), "syscall: fsync")
}

func workerLoop(n int, work chan<- byte, answers <-chan byte) {
	for i := range n {
		work <- byte(i)
		awaitCommand(answers)
	}
}

//go:noinline
func awaitCommand(answers <-chan byte) { <-answers }

func TestAnalyzeSaysWhenNoWorkerWaits(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, trace.Start(&buf))
	trace.Stop()
	_, err := Analyze(&buf, Options{Worker: "main.nobody", Wait: "main.nothing"})
	require.ErrorContains(t, err, "no goroutine waits")
}
