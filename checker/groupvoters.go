package checker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/fencelock/fencelock"
)

// votersBound bounds one SetVoters of the group-voters fault: each new
// voter catches up before it is promoted, one change at a time.
const votersBound = 2 * time.Minute

// GroupVoters changes a named group's voters while the clients hold and
// contend for locks in it (register/a@a, register/b@b): the first named
// group with fewer voters than replicas gets every replica as its voter,
// by Node.SetVoters, which moves the raft membership one change at a time
// (each new voter non-voting first, promoted once caught up). No voter is
// taken off, so every replica keeps running the group and its clients keep
// working there. The history checks the clients as always; the fault
// checks, besides, that a lock held in the group before the move is held
// after it by the same grant, that the group grants during and after the
// move, and that its membership is the new one. A cluster whose groups
// vote on every replica already (3 replicas), or has one such group left,
// which one-group-quorum needs, has nothing to change: the fault notes it. The cluster's view of the group's voters follows, so
// that later faults plan with them.
var GroupVoters = Fault{"group-voters", func(ctx context.Context, e *env) error {
	c := e.c
	ids := c.IDs()
	fewer := func(g fencelock.GroupConfig) bool { return len(g.Voters) < len(ids) }
	i := slices.IndexFunc(c.groups, fewer)
	// One group keeps its smaller voter set, for one-group-quorum to take
	// its quorum alone.
	if i < 0 || len(ids)%2 == 0 || !slices.ContainsFunc(c.groups[i+1:], fewer) {
		e.h.logf("group-voters: no named group to give every replica as voters; nothing to change")
		return nil
	}
	target := c.groups[i].Name
	home := ids[0]
	for _, id := range ids {
		if c.Node(id) != nil {
			home = id
			break
		}
	}
	n := c.Node(home)
	if n == nil {
		return fmt.Errorf("group-voters: no replica runs")
	}
	hctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	s, err := n.NewSession(hctx, fencelock.WithTTL(10*e.ttl)) // outlives the move on a loaded machine
	if err != nil {
		return fmt.Errorf("group-voters: holder's session on replica %d: %w", home, err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	held, err := s.Acquire(hctx, atGroup("voters/held", target))
	if err != nil {
		return fmt.Errorf("group-voters: holder's lock in group %q: %w", target, err)
	}

	// The move runs while a probe keeps taking a lock of the group.
	from := slices.Clone(c.groups[i].Voters)
	moved := make(chan error, 1)
	start := time.Now()
	go func() {
		sctx, cancel := context.WithTimeout(ctx, votersBound)
		defer cancel()
		moved <- n.SetVoters(sctx, target, ids)
	}()
	probes := 0
	for done := false; !done; {
		select {
		case err := <-moved:
			if err != nil {
				return fmt.Errorf("group-voters: SetVoters(%q, %v): %w", target, ids, err)
			}
			done = true
		default:
			if err := probeGroup(ctx, e, home, target, recoveryBound); err != nil {
				e.h.violation("group-voters: group %q granted nothing within %v while its voters moved from %v to %v: %v",
					target, recoveryBound, from, ids, err)
			}
			probes++
		}
	}
	c.groups[i].Voters = slices.Clone(ids)
	e.h.logf("group-voters: group %q moved from voters %v to %v in %v, %d probes granted meanwhile",
		target, from, ids, time.Since(start).Round(time.Millisecond), probes)

	mctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	m, err := n.MembersOf(mctx, target)
	if err != nil {
		return fmt.Errorf("group-voters: membership of %q: %w", target, err)
	}
	if got := slices.Sorted(maps.Keys(m.Voters)); !slices.Equal(got, ids) {
		e.h.violation("group-voters: group %q votes on %v after SetVoters(%v)", target, got, ids)
	}
	select {
	case <-held.Done():
		e.h.violation("group-voters: %q lost by its holder while the group's voters moved: %v", held.Name(), held.Err())
		return nil
	default:
	}
	info, err := n.Inspect(mctx, held.Name())
	if err != nil || !info.Held || info.Token != held.Token() {
		e.h.violation("group-voters: %q is not held with token %d after the move: %+v, %v", held.Name(), held.Token(), info, err)
	}
	return probeGroup(ctx, e, home, target, recoveryBound)
}}
