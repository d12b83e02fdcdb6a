package fencelock

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Ready reports whether this replica serves every group it runs with the
// group's current state: it knows the group's raft leader and has applied
// everything that leader had committed when Ready asked (a linearizable
// read: one round trip to each group's leader, the groups at once). It is
// what a load balancer's readiness probe asks (GET /readyz).
//
// A named group this replica has not yet seen elect its first leader (it
// knows no group ID for it: a group just created, or one this replica
// started to run a moment ago) is not waited for: a new group never makes
// a replica unready, so adding one never holds up a rollout. Once the
// group has had a leader here, Ready answers for it like for any other.
//
// It returns nil, or the error of the first group (in Status.Groups order)
// that is not ready, naming it: ErrUnavailable (with ErrNoQuorum when that
// is the cause, and ctx's error when ctx ended first), ErrRemoved or
// ErrClosed.
func (n *Node) Ready(ctx context.Context) error {
	rs := n.host.Replicas()
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	for i, r := range rs {
		name := r.Name()
		if name != "" && r.GroupID() == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Read(ctx, func(*fsm.State) any { return nil })
			if err != nil {
				label := "the default group"
				if name != "" {
					label = fmt.Sprintf("group %q", name)
				}
				errs[i] = fmt.Errorf("%s is not ready here: %w", label, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
