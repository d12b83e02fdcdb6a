package fencelock_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/fencelock/fencelock"
)

// Config.Groups runs named groups beside the default group, each a raft
// group of its own (its voters, log, leader and fencing tokens), so that
// one group's load or quorum loss touches no other. A lock whose name ends
// in "@billing" lives in group billing; a name without '@' in the default
// group. One Session holds locks in any of them.
//
// Every replica of a deployment lists the same Groups; here one replica
// runs a default group and billing, both voted by replica 1. A real
// deployment runs 3 or 5 replicas, with 1, 3 or 5 voters per group.
func ExampleConfig_groups() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "fencelock-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free loopback port
	if err != nil {
		log.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
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
