package fencelock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/fencelock/fencelock"
)

// Config.Groups runs named groups beside the default group, each a raft
// group of its own (its voters, log, leader and fencing tokens), so that
// one group's load or quorum loss touches no other. A lock whose name ends
// in "@billing" lives in group billing; a name without '@' in the default
// group. One Session holds locks in any of them.
//
// Config.Groups seeds the deployment's group table when it first starts;
// from then on the table rules (CreateGroup, DropGroup and SetVoters change
// it online, and every replica follows). Here one replica runs a default
// group and billing, both voted by replica 1. A real deployment runs 3 or 5
// replicas, with 1, 3 or 5 voters per group.
func ExampleConfig_groups() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, addr, remove := exampleReplica()
	defer remove()
	node, err := fencelock.Start(ctx, fencelock.Config{
		ReplicaID: 1,
		Members:   map[uint64]string{1: addr},
		Dir:       dir,
		Logger:    slog.New(slog.DiscardHandler),
		Groups:    []fencelock.GroupConfig{{Name: "billing", Voters: []uint64{1}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer node.Close()

	session, err := node.NewSession(ctx, fencelock.WithSessionName("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)
	jobs, err := session.Acquire(ctx, "jobs/reindex") // the default group
	if err != nil {
		log.Fatal(err)
	}
	invoice, err := session.Acquire(ctx, "invoice/7@billing") // group billing
	if err != nil {
		log.Fatal(err)
	}
	// Each group fences its own resources: a fence names its group.
	fmt.Println("fenced by different groups:", jobs.Fence().Group != invoice.Fence().Group)

	// Without '@', Locks lists every group, each lock with its Group.
	page, err := node.Locks(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range page.Locks {
		fmt.Printf("%s: group %q, held by %s\n", l.Name, l.Group, l.SessionName)
	}
	// "@billing" lists billing's only.
	page, err = node.Locks(ctx, "@billing")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("group %q: %d lock\n", page.Group, len(page.Locks))
	// Output:
	// fenced by different groups: true
	// invoice/7@billing: group "billing", held by worker-1
	// jobs/reindex: group "", held by worker-1
	// group "billing": 1 lock
}

// CreateGroup adds a group to a running deployment, with no restart: every
// replica starts it as soon as it applies the change, and a name ending in
// "@payments" lives in it from then on. DropGroup removes it again (refused
// while it holds a lock, unless ForceDrop); SetVoters moves its voters one
// change at a time.
func ExampleNode_CreateGroup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()

	// One call: the group runs on this replica when it returns.
	if err := node.CreateGroup(ctx, fencelock.GroupConfig{Name: "payments", Voters: []uint64{1}}); err != nil {
		log.Fatal(err)
	}
	groups, err := node.Groups(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range groups {
		fmt.Printf("group %s, voters %v\n", g.Name, g.Voters)
	}
	err = node.CreateGroup(ctx, fencelock.GroupConfig{Name: "payments", Voters: []uint64{1}})
	fmt.Println("created twice:", errors.Is(err, fencelock.ErrGroupExists))

	session, err := node.NewSession(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)
	lock, err := session.Acquire(ctx, "refund/42@payments")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", lock.Err() == nil)

	// A group that holds a lock is not dropped by accident.
	err = node.DropGroup(ctx, "payments")
	fmt.Println("dropped while held:", errors.Is(err, fencelock.ErrGroupHoldsLocks))
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}
	if err := node.DropGroup(ctx, "payments"); err != nil {
		log.Fatal(err)
	}
	_, err = session.TryAcquire(ctx, "refund/42@payments")
	fmt.Println("after the drop:", errors.Is(err, fencelock.ErrUnknownGroup))
	// Output:
	// group payments, voters [1]
	// created twice: true
	// held: true
	// dropped while held: true
	// after the drop: true
}
