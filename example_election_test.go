package fencelock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fencelock/fencelock"
)

// Campaign blocks until the session is elected. Candidates are elected in
// the order they campaigned, and every term gets a larger token: its epoch,
// which the leader's writes carry so that resources refuse a deposed leader.
func ExampleSession_Campaign() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()
	a, _ := node.NewSession(ctx)
	b, _ := node.NewSession(ctx)

	lead, err := a.Campaign(ctx, "orders/primary", "10.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a leads:", lead.Value())

	elected := make(chan *fencelock.Leadership)
	go func() {
		next, err := b.Campaign(ctx, "orders/primary", "10.0.0.2:8080") // waits for a to step down
		if err != nil {
			log.Fatal(err)
		}
		elected <- next
	}()

	if err := lead.Resign(ctx); err != nil { // or a's session ends
		log.Fatal(err)
	}
	<-lead.Done() // a leader stops acting when Done closes
	fmt.Println("a stopped:", lead.Err())
	next := <-elected
	fmt.Println("b leads:", next.Value(), "with a larger epoch:", next.Token() > lead.Token())
	// Output:
	// a leads: 10.0.0.1:8080
	// a stopped: fencelock: not the leader
	// b leads: 10.0.0.2:8080 with a larger epoch: true
}

// Observe sends the current leader first, then every change. Token 0 means
// that the election has no leader.
func ExampleNode_Observe() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()

	watching, stopWatching := context.WithCancel(ctx)
	defer stopWatching() // closes the channel
	leaders := node.Observe(watching, "orders/primary")
	show := func() {
		info := <-leaders
		if info.Token == 0 {
			fmt.Println("no leader")
			return
		}
		fmt.Println("leader:", info.Value)
	}
	show()

	session, _ := node.NewSession(ctx)
	lead, err := session.Campaign(ctx, "orders/primary", "10.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	show()
	lead.Proclaim(ctx, "10.0.0.1:9090") // same term, new value
	show()
	lead.Resign(ctx)
	show()
	// Output:
	// no leader
	// leader: 10.0.0.1:8080
	// leader: 10.0.0.1:9090
	// no leader
}

// Leader is a linearizable read of the current leader.
func ExampleNode_Leader() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()

	_, err := node.Leader(ctx, "orders/primary")
	fmt.Println(err)
	session, _ := node.NewSession(ctx)
	lead, _ := session.Campaign(ctx, "orders/primary", "10.0.0.1:8080")
	info, _ := node.Leader(ctx, "orders/primary")
	fmt.Println(info.Value, info.Token == lead.Token(), info.SessionID == session.ID())
	// Output:
	// fencelock: election has no leader: "orders/primary"
	// 10.0.0.1:8080 true true
}

// RunElection is the whole leader loop: it campaigns, runs the work for
// each term with a context that ends with the term, resigns only after the
// work returned, and campaigns again, until its own context ends.
func ExampleNode_RunElection() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, stop := startOne(ctx)
	defer stop()

	run, shutdown := context.WithCancel(ctx)
	err := node.RunElection(run, "billing/primary", "10.0.0.1:8080", fencelock.ElectionCallbacks{
		OnStartedLeading: func(term context.Context, l *fencelock.Leadership) {
			fmt.Println("leading as", l.Value())
			shutdown() // a real service works here until term ends
			<-term.Done()
		},
		OnStoppedLeading: func(err error) { fmt.Println("stopped leading, error:", err) },
	})
	fmt.Println("RunElection returned:", err)
	// Output:
	// leading as 10.0.0.1:8080
	// stopped leading, error: <nil>
	// RunElection returned: context canceled
}
