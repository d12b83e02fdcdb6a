package checker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/transport"
)

// lagDelay is how late every message reaches the lagging replica: long
// enough that it applies each entry well after the others (a grant can end
// before it tells its caller), short of what trips an election.
const lagDelay = 60 * time.Millisecond

// LaggingReplica delays every message into one follower by lagDelay, and
// for three holds moves the leadership of the groups around
// (TransferLeadership to a random voter, the lagging one included) while
// the operator, in step with each transfer, revokes a grant in any group,
// revokes a term, or ends a session or a session's part in a named group,
// through the lagging replica every other time (through the default
// group's leader otherwise). So an operator's command is often in flight
// across a leader change (a retried proposal must apply once), and a grant
// often ends before the lagging replica tells its caller (the history must
// still linearize). A dashboard reads the elections' leaders through the
// lagging replica meanwhile (pollLeaders).
var LaggingReplica = Fault{"lagging-replica", func(ctx context.Context, e *env) error {
	l, err := leader(ctx, e)
	if err != nil {
		return err
	}
	lagging := follower(e, l)
	for _, id := range e.c.IDs() {
		if id != lagging {
			e.c.Net.SetLink(e.c.Addr(id), e.c.Addr(lagging), transport.LinkFault{Delay: lagDelay})
		}
	}
	defer e.c.Net.Heal()
	e.h.logf("lagging-replica: messages into replica %d delayed %v", lagging, lagDelay)
	// A dashboard polls the elections' leaders through the lagging
	// replica meanwhile: each read must show the leader of its moment
	// (check 1), however late that replica applies the terms.
	pctx, stopPolling := context.WithCancel(ctx)
	var polling sync.WaitGroup
	polling.Add(1)
	seed := e.rng.Uint64()
	go func() {
		defer polling.Done()
		pollLeaders(pctx, e, lagging, seed)
	}()
	defer polling.Wait()
	defer stopPolling()
	rng := rand.New(rand.NewPCG(e.rng.Uint64(), 7))
	groups := e.c.groupNames()
	transfers := 0
	for end := time.Now().Add(3 * hold(e)); time.Now().Before(end); {
		group := groups[rng.IntN(len(groups))]
		voters := e.c.voters(group)
		to := voters[rng.IntN(len(voters))]
		var wg sync.WaitGroup
		if n := e.c.Node(to); n != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				if n.TransferLeadership(tctx, group, to) == nil {
					transfers++
				}
			}()
		}
		// Every other act goes through the lagging replica: it forwards
		// the command to the leader and learns of its commit late, so a
		// leader change in between fails the attempt it has in flight
		// and its retry reaches the log beside the first (operatorOnce).
		via := uint64(0)
		if rng.IntN(2) == 0 {
			via = lagging
		}
		e.operate(ctx, rng, true, via)
		wg.Wait()
		if err := wait(ctx, e.ttl/4); err != nil {
			return err
		}
	}
	e.h.logf("lagging-replica: %d leader transfers", transfers)
	return nil
}}

// pollLeaders reads a random election's leader through replica id every
// TTL/15 until ctx ends, recording each read as client -3's.
func pollLeaders(ctx context.Context, e *env, id, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 13))
	for wait(ctx, e.ttl/15) == nil {
		n := e.c.Node(id)
		if n == nil {
			continue
		}
		name := e.elections[rng.IntN(len(e.elections))]
		call := e.h.now()
		rctx, cancel := context.WithTimeout(ctx, e.opTimeout)
		info, err := n.Leader(rctx, name)
		cancel()
		if err != nil && !errors.Is(err, fencelock.ErrNoLeader) {
			continue
		}
		e.h.add(leaderOp(-3, id, name, info, call, e.h.now()))
	}
}

// OperatorLostReplies has the operator act through a follower that hears
// nothing back: every link into it is cut, one way, when its command goes
// out, and healed lostFor later, within the call. The group commits the
// command (the follower forwards it to the leader), but the follower never
// learns of that: its attempt times out (ProposalTimeout), and, the
// follower hearing no leader, it campaigns meanwhile; once healed, its
// retry reaches the log beside the first attempt, often across the
// leader change its campaign made. Twelve times, a TTL apart, it revokes
// a lock by name or an election's term, whose retry applied again would end
// the grant the first one handed on. The group must apply each command
// once (operatorOnce).
var OperatorLostReplies = Fault{"operator-lost-replies", func(ctx context.Context, e *env) error {
	rng := rand.New(rand.NewPCG(e.rng.Uint64(), 11))
	for i := range 12 {
		l, err := leader(ctx, e)
		if err != nil {
			return err
		}
		via := follower(e, l)
		n := e.c.Node(via)
		if n == nil {
			continue
		}
		for _, id := range e.c.IDs() {
			if id != via {
				e.c.Net.Cut(e.c.Addr(id), e.c.Addr(via))
			}
		}
		healed := time.AfterFunc(lostFor, e.c.Net.Heal)
		if i%2 == 0 {
			e.revokeLock(ctx, n, via, lockNames[rng.IntN(len(lockNames))], false)
		} else {
			e.revokeTerm(ctx, n, via, e.elections[rng.IntN(len(e.elections))])
		}
		if healed.Stop() {
			e.c.Net.Heal()
		}
		if err := wait(ctx, e.ttl); err != nil {
			return err
		}
	}
	e.h.logf("operator-lost-replies: %d operator commands reached the log more than once", e.applied.operatorRetries())
	return nil
}}

// lostFor is how long OperatorLostReplies keeps a follower deaf: past the
// first attempt's ProposalTimeout (500ms in the scenarios), well short of
// the call's deadline (opTimeout), so a retry follows.
const lostFor = 700 * time.Millisecond
