// Command quickstart runs a three-replica fencelock group in one process and
// replays the GC-pause timeline that fencing tokens exist for:
//
//  1. Client A acquires "jobs/reindex" and writes through a Fencer.
//  2. Client B queues for the same lock.
//  3. A pauses (a simulated stop-the-world pause: its keep-alives stop).
//  4. The group expires A's session and grants the lock to B with a larger
//     token; B writes.
//  5. A wakes up, still believing it holds the lock, and writes: the Fencer
//     refuses the stale token.
//
// Run it with: go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/testhook"
)

const lockName = "jobs/reindex"

var start = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%5.2fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	dir, err := os.MkdirTemp("", "fencelock-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Three replicas, as three processes on three hosts would run them; here
	// they share one process and the loopback interface.
	members := map[uint64]string{}
	for id := uint64(1); id <= 3; id++ {
		addr, err := freeAddr()
		if err != nil {
			return err
		}
		members[id] = addr
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// Start the replicas together, as their hosts would: a replica that dials
	// a peer not yet listening backs off for up to a second before retrying.
	nodes := make([]*fencelock.Node, 3)
	errs := make(chan error, 3)
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
	say("started replicas 1-3 on %s, %s, %s", members[1], members[2], members[3])

	// Client A lives on replica 1, client B on replica 2. A short TTL keeps
	// the demonstration brief.
	const ttl = 2 * time.Second
	a, err := nodes[0].NewSession(ctx, fencelock.WithTTL(ttl))
	if err != nil {
		return err
	}
	b, err := nodes[1].NewSession(ctx, fencelock.WithTTL(ttl))
	if err != nil {
		return err
	}
	say("group has leader replica %d; session A=%d (replica 1), B=%d (replica 2), TTL %v",
		nodes[0].Status().LeaderID, a.ID(), b.ID(), ttl)

	// The protected resource: storage that checks fencing tokens.
	storage := fencelock.NewFencer()
	write := func(who string, token uint64, what string) error {
		return storage.Do(lockName, token, func() error {
			say("storage accepted %q from %s (token %d)", what, who, token)
			return nil
		})
	}

	lockA, err := a.Acquire(ctx, lockName)
	if err != nil {
		return err
	}
	say("A acquired %q with fencing token %d", lockName, lockA.Token())
	if err := write("A", lockA.Token(), "reindex part 1"); err != nil {
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
	if err := waitWaiters(ctx, nodes[2], 1); err != nil {
		return err
	}
	say("B is queued behind A (Inspect on replica 3: 1 waiter)")

	paused := time.Now()
	testhook.Freeze(a)
	say("A pauses (simulated stop-the-world GC): its keep-alives stop")

	<-lockA.Done()
	say("A's own clock gave the session up after %.2fs (TTL minus safety margin): Lock.Done closed (%v)."+
		" A is paused, so it cannot notice.", time.Since(paused).Seconds(), lockA.Err())

	g := <-bGranted
	if g.err != nil {
		return g.err
	}
	lockB := g.l
	say("the group expired A's session after %.2fs and granted the lock to B with token %d (> %d)",
		time.Since(paused).Seconds(), lockB.Token(), lockA.Token())
	if err := write("B", lockB.Token(), "reindex part 1, redone"); err != nil {
		return err
	}

	testhook.Thaw(a)
	say("A wakes up, unaware of the pause, and writes with its old token %d", lockA.Token())
	err = write("A", lockA.Token(), "reindex part 2")
	if !errors.Is(err, fencelock.ErrStaleToken) {
		return fmt.Errorf("A's stale write was not refused: %v", err)
	}
	say("storage refused it: %v", err)
	if err := lockA.Release(ctx); errors.Is(err, fencelock.ErrNotHeld) {
		say("A's late Release changes nothing: %v", err)
	} else {
		return fmt.Errorf("A's late release: %v", err)
	}

	if err := lockB.Release(ctx); err != nil {
		return err
	}
	say("B released %q", lockName)
	if err := b.Close(ctx); err != nil {
		return err
	}
	info, err := nodes[2].Inspect(ctx, lockName)
	if err != nil {
		return err
	}
	say("Inspect(%q): held=%v waiters=%d; storage's highest token %d", lockName, info.Held, info.Waiters,
		storage.Highest(lockName))
	for _, n := range nodes {
		n.Close()
	}
	nodes = nil
	say("replicas closed; done")
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
