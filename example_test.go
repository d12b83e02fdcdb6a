package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/fencelock/fencelock"
)

// startOne starts a one-replica group for the examples; a real deployment
// runs 3 or 5 replicas on separate hosts, each with the same Members.
func startOne(ctx context.Context) (*fencelock.Node, func()) {
	dir, addr, remove := exampleReplica()
	node, err := fencelock.Start(ctx, fencelock.Config{
		ReplicaID: 1,
		Members:   map[uint64]string{1: addr},
		Dir:       dir,
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	return node, func() { node.Close(); remove() }
}

// exampleReplica returns a new Dir and a free loopback address for an
// example's replica, and a func that removes the Dir.
func exampleReplica() (dir, addr string, remove func()) {
	dir, err := os.MkdirTemp("", "fencelock-example-")
	if err != nil {
		log.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free loopback port
	if err != nil {
		log.Fatal(err)
	}
	addr = l.Addr().String()
	l.Close()
	return dir, addr, func() { os.RemoveAll(dir) }
}

// Acquire a lock and write to the protected resource under its fencing
// token. The resource checks the token, so a holder the group has moved past
// cannot write.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()

	session, err := node.NewSession(ctx, fencelock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)

	lock, err := session.Acquire(ctx, "jobs/reindex")
	if err != nil {
		log.Fatal(err)
	}
	storage := fencelock.NewFencer() // lives with the resource, not the client
	err = storage.Do("jobs/reindex", lock.Token(), func() error {
		fmt.Println("write admitted")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	info, err := node.Inspect(ctx, "jobs/reindex")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held after release:", info.Held)
	// Output:
	// write admitted
	// held after release: false
}

// TryAcquire never waits: it fails with ErrLocked when the lock is held.
func ExampleSession_TryAcquire() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()
	a, _ := node.NewSession(ctx)
	b, _ := node.NewSession(ctx)

	held, err := a.TryAcquire(ctx, "cron/nightly")
	if err != nil {
		log.Fatal(err)
	}
	_, err = b.TryAcquire(ctx, "cron/nightly")
	fmt.Println("second try:", errors.Is(err, fencelock.ErrLocked))
	held.Release(ctx)
	again, err := b.TryAcquire(ctx, "cron/nightly")
	fmt.Println("after release:", err == nil, again.Token() > held.Token())
	// Output:
	// second try: true
	// after release: true true
}

// Acquire waits in the lock's FIFO queue; the group grants the lock to the
// head of the queue in the same step that frees it.
func ExampleSession_Acquire() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()
	a, _ := node.NewSession(ctx)
	b, _ := node.NewSession(ctx)

	first, err := a.Acquire(ctx, "orders/primary")
	if err != nil {
		log.Fatal(err)
	}
	granted := make(chan *fencelock.Lock)
	go func() {
		l, err := b.Acquire(ctx, "orders/primary") // queues behind a
		if err != nil {
			log.Fatal(err)
		}
		granted <- l
	}()
	for { // wait until b is queued, to show the handover
		info, err := node.Inspect(ctx, "orders/primary")
		if err != nil {
			log.Fatal(err) // ctx's deadline ends the wait
		}
		if info.Waiters == 1 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	first.Release(ctx)
	second := <-granted
	fmt.Println("b holds it now, with a larger token:", second.Token() > first.Token())
	// Output: b holds it now, with a larger token: true
}

// Work until the lock's Done channel closes: the holder must stop acting when
// its session could not be renewed, before the group grants the lock again.
func ExampleLock_Done() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()
	session, _ := node.NewSession(ctx)
	lock, err := session.Acquire(ctx, "jobs/compaction")
	if err != nil {
		log.Fatal(err)
	}
	work := make(chan int)
	go func() {
		for i := 1; i <= 3; i++ {
			work <- i
		}
		session.Close(ctx) // releases every lock of the session
	}()
	for {
		select {
		case i := <-work:
			fmt.Println("step", i)
		case <-lock.Done():
			fmt.Println("stopped:", lock.Err())
			return
		}
	}
	// Output:
	// step 1
	// step 2
	// step 3
	// stopped: fencelock: session closed
}

// A Fencer refuses tokens lower than the highest it admitted.
func ExampleFencer() {
	f := fencelock.NewFencer()
	fmt.Println(f.Admit("reports/daily", 34))
	fmt.Println(f.Admit("reports/daily", 35))
	err := f.Do("reports/daily", 34, func() error {
		fmt.Println("never printed")
		return nil
	})
	fmt.Println(errors.Is(err, fencelock.ErrStaleToken), f.Highest("reports/daily"))
	// Output:
	// <nil>
	// <nil>
	// true 35
}
