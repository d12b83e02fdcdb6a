//go:build unix

// Command quickstart runs a three-replica fencelock group on loopback and
// replays the GC-pause timeline that fencing tokens exist for, with a real
// pause: client A is a separate process that the quickstart freezes with
// SIGSTOP.
//
// The quickstart re-executes itself as a child process. The child runs
// replica 3 and client A; the parent runs replicas 1 and 2 (a quorum on their
// own), client B, and the protected resource, a Fencer. The child reaches the
// resource over its stdin/stdout with a line protocol: it prints
// "WRITE <token> <text>" and the parent answers "OK" or "REFUSED <error>";
// the child reports its progress on the same pipe.
//
//  1. Client A (child) acquires "jobs/reindex" and writes through the Fencer.
//  2. Client B (parent) queues for the same lock.
//  3. The parent sends SIGSTOP to the child: every goroutine of A stops,
//     keep-alives included, as in a stop-the-world pause.
//  4. The group expires A's session and grants the lock to B with a larger
//     token; B writes.
//  5. The parent sends SIGCONT. A wakes up, still believing it holds the
//     lock, and writes at once with its old token: the Fencer refuses it.
//
// Run it with: go run ./examples/quickstart (Unix only).
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencelock/fencelock"
)

const (
	lockName = "jobs/reindex"
	childEnv = "FENCELOCK_QUICKSTART_CHILD" // set in client A's process: its data directory
	ttlA     = 1200 * time.Millisecond      // client A's session TTL, short to keep the demo brief
	ttlB     = 3 * time.Second
)

var start = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%5.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	if dir := os.Getenv(childEnv); dir != "" {
		if err := clientA(dir, os.Args[1:]); err != nil {
			fmt.Printf("FAIL %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

var quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))

// child is client A's process as the parent sees it.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex // serialises lines to the child
	events chan string
	exited chan struct{}
}

func (c *child) send(line string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := io.WriteString(c.stdin, line+"\n")
	return err
}

// next returns the child's next event line, starting with verb.
func (c *child) next(ctx context.Context, verb string) (string, error) {
	select {
	case line, ok := <-c.events:
		if !ok {
			return "", errors.New("client A's process exited early")
		}
		if rest, found := strings.CutPrefix(line, "FAIL "); found {
			return "", fmt.Errorf("client A: %s", rest)
		}
		rest, found := strings.CutPrefix(line, verb)
		if !found {
			return "", fmt.Errorf("client A: expected %s, got %q", verb, line)
		}
		return strings.TrimSpace(rest), nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for client A's %s: %w", verb, ctx.Err())
	}
}

// kill ends the child, stopped or not, and reaps it.
func (c *child) kill() {
	c.stdin.Close()
	select {
	case <-c.exited:
		return
	case <-time.After(2 * time.Second):
	}
	c.cmd.Process.Kill()
	<-c.exited
}

// spawn re-executes this binary as client A. WRITE lines are served here,
// against storage; every other line goes to events.
func spawn(dir string, members map[uint64]string, storage *fencelock.Fencer) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, members[1], members[2], members[3])
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = childAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, stdin: stdin, events: make(chan string, 16), exited: make(chan struct{})}
	go func() {
		defer close(c.events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			rest, isWrite := strings.CutPrefix(line, "WRITE ")
			if !isWrite {
				c.events <- line
				continue
			}
			tok, text, _ := strings.Cut(rest, " ")
			token, _ := strconv.ParseUint(tok, 10, 64)
			err := storage.Do(lockName, token, func() error {
				say("storage accepted %q from A (token %d)", text, token)
				return nil
			})
			if err != nil {
				say("storage refused %q from A (token %d): %v", text, token, err)
				c.send("REFUSED " + err.Error())
			} else {
				c.send("OK")
			}
			c.events <- "WROTE " + fmt.Sprint(errors.Is(err, fencelock.ErrStaleToken))
		}
	}()
	go func() { cmd.Wait(); close(c.exited) }()
	return c, nil
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dir, err := os.MkdirTemp("", "fencelock-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		members[id] = addr
	}

	// The protected resource: storage that checks fencing tokens.
	storage := fencelock.NewFencer()

	// Client A's process runs replica 3; it starts at the same time as
	// replicas 1 and 2, as the replicas' hosts would.
	a, err := spawn(filepath.Join(dir, "3"), members, storage)
	if err != nil {
		return err
	}
	defer a.kill() // also sends SIGKILL to a stopped child: no error path leaves it behind
	pid := a.cmd.Process.Pid

	nodes := make([]*fencelock.Node, 2)
	errs := make(chan error, 2)
	for i := range nodes {
		go func() {
			var err error
			nodes[i], err = fencelock.Start(ctx, fencelock.Config{
				ReplicaID: uint64(i + 1),
				Members:   members,
				Dir:       filepath.Join(dir, fmt.Sprint(i+1)),
				Logger:    quiet,
			})
			errs <- err
		}()
	}
	for range nodes {
		err = errors.Join(err, <-errs)
	}
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.Close()
			}
		}
	}()
	if err != nil {
		return err
	}
	say("started replicas 1-2 here on %s, %s; replica 3 runs in client A's process (pid %d) on %s",
		members[1], members[2], pid, members[3])

	sid, err := a.next(ctx, "SESSION")
	if err != nil {
		return err
	}
	say("group has leader replica %d; A opened session %s on replica 3, TTL %v", nodes[0].Status().LeaderID, sid, ttlA)
	tokA, err := a.next(ctx, "ACQUIRED")
	if err != nil {
		return err
	}
	say("A acquired %q with fencing token %s", lockName, tokA)
	if _, err := a.next(ctx, "WROTE"); err != nil {
		return err
	}
	if _, err := a.next(ctx, "WAITING"); err != nil {
		return err
	}

	b, err := nodes[0].NewSession(ctx, fencelock.WithTTL(ttlB))
	if err != nil {
		return err
	}
	type grant struct {
		l   *fencelock.Lock
		err error
	}
	bGranted := make(chan grant, 1)
	go func() {
		l, err := b.Acquire(ctx, lockName)
		bGranted <- grant{l, err}
	}()
	if err := waitWaiters(ctx, nodes[1], 1); err != nil {
		return err
	}
	say("B (session %d, replica 1) is queued behind A (Inspect on replica 2: 1 waiter)", b.ID())

	paused := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	say("SIGSTOP to A's process: A and its replica freeze mid-job, keep-alives and all")

	var lockB *fencelock.Lock
	select {
	case g := <-bGranted:
		if g.err != nil {
			return g.err
		}
		lockB = g.l
	case <-ctx.Done():
		return ctx.Err()
	}
	say("the group (replicas 1, 2) expired A's session after %.2fs and granted the lock to B with token %d (> %s)",
		time.Since(paused).Seconds(), lockB.Token(), tokA)
	if err := storage.Do(lockName, lockB.Token(), func() error {
		say("storage accepted %q from B (token %d)", "reindex part 1, redone", lockB.Token())
		return nil
	}); err != nil {
		return err
	}

	// A was blocked reading its next "go" when it stopped; queue one, then
	// wake it: the first thing it does is write.
	if err := a.send("GO"); err != nil {
		return err
	}
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	say("SIGCONT after %.2fs: A wakes up, unaware of the pause, and writes with its old token %s",
		time.Since(paused).Seconds(), tokA)
	stale, err := a.next(ctx, "WROTE")
	if err != nil {
		return err
	}
	if stale != "true" {
		return errors.New("A's stale write was not refused")
	}
	after, err := a.next(ctx, "AFTER")
	if err != nil {
		return err
	}
	say("A, after the refusal: %s", after)
	rel, err := a.next(ctx, "RELEASE")
	if err != nil {
		return err
	}
	say("A's late Release changes nothing: %s", rel)

	if err := lockB.Release(ctx); err != nil {
		return err
	}
	say("B released %q", lockName)
	if err := b.Close(ctx); err != nil {
		return err
	}
	info, err := nodes[1].Inspect(ctx, lockName)
	if err != nil {
		return err
	}
	say("Inspect(%q): held=%v waiters=%d; storage's highest token %d", lockName, info.Held, info.Waiters,
		storage.Highest(lockName))
	a.kill()
	for _, n := range nodes {
		n.Close()
	}
	nodes = nil
	say("client A's process and replicas closed; done")
	return nil
}

// clientA runs in the child process: replica 3 and client A. It prints its
// events on stdout and reads the resource's answers from stdin.
func clientA(dir string, addrs []string) error {
	if len(addrs) != 3 {
		return errors.New("want three replica addresses")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := bufio.NewScanner(os.Stdin)
	readLine := func() (string, error) {
		if !in.Scan() {
			return "", errors.New("parent went away")
		}
		return in.Text(), nil
	}
	node, err := fencelock.Start(ctx, fencelock.Config{
		ReplicaID: 3,
		Members:   map[uint64]string{1: addrs[0], 2: addrs[1], 3: addrs[2]},
		Dir:       dir,
		Logger:    quiet,
	})
	if err != nil {
		return err
	}
	defer node.Close()
	s, err := node.NewSession(ctx, fencelock.WithTTL(ttlA))
	if err != nil {
		return err
	}
	fmt.Printf("SESSION %d\n", s.ID())
	lock, err := s.Acquire(ctx, lockName)
	if err != nil {
		return err
	}
	fmt.Printf("ACQUIRED %d\n", lock.Token())
	write := func(text string) (string, error) {
		fmt.Printf("WRITE %d %s\n", lock.Token(), text)
		return readLine()
	}
	if reply, err := write("reindex part 1"); err != nil {
		return err
	} else if reply != "OK" {
		return fmt.Errorf("first write: %s", reply)
	}
	// A believes it holds the lock and waits for its next piece of work.
	// This is where SIGSTOP catches it; on SIGCONT it writes straight away,
	// as a holder resuming after a GC pause would, without looking at Done.
	fmt.Println("WAITING")
	if _, err := readLine(); err != nil {
		return err
	}
	if _, err := write("reindex part 2"); err != nil {
		return err
	}
	select {
	case <-lock.Done():
	case <-time.After(2 * time.Second):
	}
	select {
	case <-lock.Done():
		fmt.Printf("AFTER Lock.Done is closed, Lock.Err = %v\n", lock.Err())
	default:
		fmt.Println("AFTER Lock.Done is still open")
	}
	if err := lock.Release(ctx); errors.Is(err, fencelock.ErrNotHeld) || errors.Is(err, fencelock.ErrSessionExpired) {
		fmt.Printf("RELEASE %v\n", err)
	} else {
		return fmt.Errorf("late release: %v", err)
	}
	// Stay up until the parent closes the pipe.
	for in.Scan() {
	}
	return nil
}

// waitWaiters waits until the lock has n waiters, reading the group.
func waitWaiters(ctx context.Context, n *fencelock.Node, waiters int) error {
	for {
		info, err := n.Inspect(ctx, lockName)
		if err != nil {
			return err
		}
		if info.Waiters >= waiters {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// freeAddr asks the kernel for a free loopback port.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
