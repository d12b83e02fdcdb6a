package transport_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/transport"
)

// Three replicas in one process over a fault network: a replica cut off
// from the others refuses to grant, and works again once the network heals.
func ExampleNetwork() {
	ctx := context.Background()
	net := transport.NewNetwork(1)
	members := map[uint64]string{1: net.Addr(1), 2: net.Addr(2), 3: net.Addr(3)}
	dir, _ := os.MkdirTemp("", "fencelock-example")
	defer os.RemoveAll(dir)
	var nodes []*fencelock.Node
	for id := uint64(1); id <= 3; id++ {
		n, err := fencelock.Start(ctx, fencelock.Config{
			ReplicaID: id, Members: members, Dir: filepath.Join(dir, fmt.Sprint(id)),
			Transport: net, Logger: quiet,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	session, err := nodes[2].NewSession(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}

	net.Isolate(members[3])
	short, cancel := context.WithTimeout(ctx, time.Second)
	_, err = session.TryAcquire(short, "jobs/reindex")
	cancel()
	fmt.Println("cut off, unavailable:", errors.Is(err, fencelock.ErrUnavailable))

	net.Heal()
	lock, err := session.TryAcquire(ctx, "jobs/reindex")
	fmt.Println("healed, granted:", err == nil && lock.Token() > 0)
	// Output:
	// cut off, unavailable: true
	// healed, granted: true
}
