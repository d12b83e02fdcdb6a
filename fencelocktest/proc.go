package fencelocktest

// This file runs a test's own processes (a user's program built on
// fencelock, as the examples' tests run theirs): their raft addresses, their
// output line by line, and their end, so that each test does not carry its
// own copy of the plumbing.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Peers returns a -peers value, "1=127.0.0.1:P1,...,n=127.0.0.1:Pn", of n
// free loopback ports (ListenBelowEphemeral), all different: each is held
// until all are chosen.
func Peers(t testing.TB, n int) string {
	t.Helper()
	var peers []string
	for id := 1; id <= n; id++ {
		l := ListenBelowEphemeral(t)
		defer l.Close()
		peers = append(peers, fmt.Sprintf("%d=%s", id, l.Addr()))
	}
	return strings.Join(peers, ",")
}

// Proc is a process a test started (StartProc, StartCmd): its stderr is
// kept in Stderr, and its end is awaited in the background (Exited).
type Proc struct {
	Cmd    *exec.Cmd
	Stderr LockedBuffer
	exited chan struct{}
	err    error
}

// StartProc starts bin with args, handing each complete line it prints on
// stdout (without the newline) to line, from one goroutine at a time; a
// last line without a newline is not handed on. A process that does not
// start fails the test; the test's cleanup kills one still running.
func StartProc(t testing.TB, line func(string), bin string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Stdout = &lineWriter{line: line}
	return StartCmd(t, cmd)
}

// StartCmd is StartProc for a command the test has set up itself (its
// Dir, Env, WaitDelay, Stdout): its stderr goes to Stderr.
func StartCmd(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Cmd: cmd, exited: make(chan struct{})}
	p.Cmd.Stderr = &p.Stderr
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.Kill()
		}
	})
	return p
}

// Exited is closed when the process has exited and its output is read.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Err is what waiting for the process returned: nil for a clean exit
// (status 0). Read it only once Exited is closed.
func (p *Proc) Err() error {
	<-p.exited
	return p.err
}

// Kill sends SIGKILL and waits for the process to exit. The error is the
// kill's: it fails for a process that had already exited.
func (p *Proc) Kill() error {
	err := p.Cmd.Process.Kill()
	<-p.exited
	return err
}

// Stop sends SIGTERM and waits for the process to exit, and if it has not
// within grace, kills it and waits for that. It fails nothing: it is for a
// test's deferred cleanup, where the process may have exited already.
func (p *Proc) Stop(grace time.Duration) {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = p.Kill()
	}
}

// Terminate sends SIGTERM and waits for the process to exit, failing the
// test (named what) if the signal cannot be sent, if it does not exit
// cleanly, or if it has not exited when ctx ends.
func (p *Proc) Terminate(t testing.TB, ctx context.Context, what string) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("%s: SIGTERM: %v", what, err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Fatalf("%s did not exit cleanly: %v", what, p.err)
		}
	case <-ctx.Done():
		t.Fatalf("%s did not exit after SIGTERM", what)
	}
}

// lineWriter hands what a process writes on to line, line by line.
type lineWriter struct {
	line func(string)
	buf  []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(b), nil
		}
		w.line(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
}
