package fencelock_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fencelock/fencelock"
)

// Replace a dead host: add the new replica as non-voting, start it joining,
// wait until it caught up, promote it, then remove the dead one. Replica IDs
// are never reused.
func ExampleNode_AddReplica() {
	ctx := context.Background()
	var live *fencelock.Node // a running replica of the group
	const newID, newAddr, deadID = 4, "10.0.0.4:7001", 3

	if err := live.AddNonVoting(ctx, newID, newAddr); err != nil {
		log.Fatal(err)
	}
	// On the new host:
	fresh, err := fencelock.Start(ctx, fencelock.Config{ReplicaID: newID, Join: true,
		Addr: newAddr, Dir: "/var/lib/myservice/fencelock"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := fresh.Members(ctx); err != nil { // returns once caught up
		log.Fatal(err)
	}
	if err := live.AddReplica(ctx, newID, newAddr); err != nil {
		log.Fatal(err)
	}
	if err := live.RemoveReplica(ctx, deadID); err != nil {
		log.Fatal(err)
	}
}

// List who holds the locks under a prefix, page by page.
func ExampleNode_Locks() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()
	session, err := node.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)
	for _, name := range []string{"jobs/a", "jobs/b", "jobs/c", "other"} {
		if _, err := session.Acquire(ctx, name); err != nil {
			log.Fatal(err)
		}
	}

	var opts []fencelock.ListOption
	for {
		page, err := node.Locks(ctx, "jobs/", append(opts, fencelock.ListLimit(2))...)
		if err != nil {
			log.Fatal(err)
		}
		for _, l := range page.Locks {
			fmt.Printf("%s held by session on replica %d, %d waiting\n", l.Name, l.Owner, l.Waiters)
		}
		if !page.More {
			break
		}
		opts = []fencelock.ListOption{fencelock.ListAfter(page.Locks[len(page.Locks)-1].Name)}
	}
	sessions, err := node.Sessions(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(sessions.Sessions), "session, TTL", sessions.Sessions[0].TTL)
	// Output:
	// jobs/a held by session on replica 1, 0 waiting
	// jobs/b held by session on replica 1, 0 waiting
	// jobs/c held by session on replica 1, 0 waiting
	// 1 session, TTL 10s
}
