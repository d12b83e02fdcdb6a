package checker

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

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
// revokes a term, or ends a session or a session's part in a named group.
// So an operator's command is often in flight across a leader change (a
// retried proposal must apply once), and a grant often ends before the
// lagging replica tells its caller (the history must still linearize).
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
		e.operate(ctx, rng, true)
		wg.Wait()
		if err := wait(ctx, e.ttl/4); err != nil {
			return err
		}
	}
	e.h.logf("lagging-replica: %d leader transfers", transfers)
	return nil
}}
