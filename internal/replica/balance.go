package replica

// Leaders spread over the hosts. Dragonboat balances nothing
// (lni/dragonboat#238), so every host runs a balancer over the groups it
// votes in. The rule, for G groups a host votes in and H hosts voting in
// them: the host should lead at most ⌈G/H⌉ of them. Only a host over its
// bound acts, and only by giving one group away to another voter of it that
// is below its own bound (so a transfer never pushes its target over the
// bound, and two hosts cannot hand a group back and forth) and live (heard
// from within a few heartbeats, and not just back from a restart). It sends
// one transfer request: a pending transfer stops the group's proposals, so a
// target that stopped a moment ago costs the group one election timeout at
// most, once. The choice is deterministic (the first group in Config order,
// the target leading fewest, then the lowest ID), at most one transfer is in
// flight per host (the balancer runs on one goroutine and waits for each),
// and every attempt, successful or not, is followed by a hold-off. A host
// runs every group it votes in (and, under PlaceEveryGroup, the others as a
// non-voting member), so its view of who leads what is local: no I/O per
// round.

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

type balancer struct {
	nudge     chan struct{} // a leader changed somewhere
	holdUntil time.Time     // no transfer before; the run goroutine's own

	// mu is held through each round, so that TestingPauseBalancer returns
	// with no transfer of the balancer's in flight.
	mu     sync.Mutex
	paused bool // tests only (TestingPauseBalancer)
}

func newBalancer() balancer { return balancer{nudge: make(chan struct{}, 1)} }

// leadersChanged wakes the balancer; it runs on Dragonboat's event goroutine
// and never blocks.
func (h *Host) leadersChanged() {
	select {
	case h.bal.nudge <- struct{}{}:
	default:
	}
}

func (h *Host) electionTimeout() time.Duration {
	return time.Duration(h.cfg.ElectionTicks) * h.cfg.RTT
}

// holdOff is the pause after each transfer: long enough for every host to
// see the new leader before anyone decides again.
func (h *Host) holdOff() time.Duration { return max(3*h.electionTimeout(), 500*time.Millisecond) }

// reconcileEvery is how often the leaders of named groups look for hosts
// to add as non-voting replicas, besides after every leader change.
const reconcileEvery = 2 * time.Second

// run is the host's background work for its named groups: their
// membership (reconcile), and the balancer. A host of the default group
// alone does nothing in it but wait for a group to start.
func (h *Host) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-h.closed
		cancel()
	}()
	t := time.NewTicker(max(h.electionTimeout(), 100*time.Millisecond))
	defer t.Stop()
	h.bal.holdUntil = time.Now().Add(h.holdOff())
	var reconciled time.Time
	busy := false // a membership change is under way: reconcile at every tick
	for {
		nudged := false
		select {
		case <-h.closed:
			return
		case <-t.C:
		case <-h.bal.nudge:
			nudged = true
		}
		if nudged || busy || time.Since(reconciled) >= reconcileEvery {
			rctx, rcancel := context.WithTimeout(ctx, 2*h.cfg.ProposalTimeout)
			busy = h.reconcile(rctx)
			rcancel()
			reconciled = time.Now()
		}
		h.balance(ctx)
	}
}

// groupView is one group as the balancer sees it.
type groupView struct {
	r      *Replica
	voters []uint64
	leader uint64
}

// balance makes at most one transfer, if this host leads more groups than
// its bound.
func (h *Host) balance(ctx context.Context) {
	h.bal.mu.Lock()
	defer h.bal.mu.Unlock()
	if len(h.groups()) < 2 || h.bal.paused || time.Now().Before(h.bal.holdUntil) {
		return
	}
	self := h.cfg.ReplicaID
	views := h.views()
	i, to, ok := pickTransfer(views, self, h.live)
	if !ok {
		return
	}
	v := views[i]
	// One request, not TransferLeadership's retries: while a transfer is
	// pending the group takes no proposals, and a target that does not take
	// over within an election timeout (it went down since it was last heard
	// from) must not stall the group again. The next round, after the
	// hold-off, picks afresh.
	tctx, cancel := context.WithTimeout(ctx, h.electionTimeout()+4*h.cfg.RTT)
	err := v.r.Transfer(tctx, to, 1)
	cancel()
	h.bal.holdUntil = time.Now().Add(h.holdOff())
	if err != nil {
		v.r.Logger().Debug("fencelock: leadership transfer to spread the leaders failed; retried after a hold-off", "to", to, "err", err)
		return
	}
	v.r.Logger().Info("fencelock: leadership handed over to spread the leaders", "to", to)
}

// live reports whether the balancer may hand a group to replica id: heard
// from within a few heartbeats (this host leads a group id votes in, so id
// answers its heartbeats) and without a silence for the last settle (not
// just back from a restart). A peer that stopped a moment ago fails the
// first test within a few heartbeats; a transfer to it would refuse the
// group's proposals for an election timeout.
func (h *Host) live(id uint64) bool {
	return h.prog.heardWithin(id, h.freshness()) && h.prog.settled(id)
}

// freshness is how recently a peer must have been heard from to count as
// up: a few heartbeat periods, and no less than 100 ms, so that a loaded
// machine's late heartbeat does not count as a stop.
func (h *Host) freshness() time.Duration {
	return max(4*time.Duration(h.cfg.HeartbeatTicks)*h.cfg.RTT, 100*time.Millisecond)
}

// pickTransfer decides the balancer's next move for host self: the index
// in views of a group it leads and the voter to hand it to, if self leads
// more than its bound. The target is the reachable voter of the group below
// its own bound that leads fewest (then the lowest ID), in the first group
// (in views' order) that has one. Nothing else moves: a host within its
// bound never gives, and a target never ends above its bound.
func pickTransfer(views []groupView, self uint64, reachable func(uint64) bool) (int, uint64, bool) {
	led := leaderCounts(views)
	if led[self] <= leaderBound(views, self) {
		return 0, 0, false
	}
	for i, v := range views {
		if v.leader != self {
			continue
		}
		var cands []uint64
		for _, id := range v.voters {
			if id != self && led[id] < leaderBound(views, id) && reachable(id) {
				cands = append(cands, id)
			}
		}
		if len(cands) == 0 {
			continue
		}
		slices.SortFunc(cands, func(a, b uint64) int {
			if led[a] != led[b] {
				return led[a] - led[b]
			}
			return cmp.Compare(a, b)
		})
		return i, cands[0], true
	}
	return 0, 0, false
}

// views is the local view of every group's voters and leader.
func (h *Host) views() []groupView {
	info := h.nodeHostInfo()
	rs := h.groups()
	views := make([]groupView, 0, len(rs))
	for _, r := range rs {
		v := groupView{r: r, voters: r.ConfiguredVoters(), leader: r.LeaderID.Load()}
		if info != nil {
			// The voters change (AddReplica and RemoveReplica, the group
			// table's moves): use the membership as applied here.
			for _, s := range info.ShardInfoList {
				if s.ShardID == r.ShardID() && !s.Pending {
					v.voters = slices.Sorted(maps.Keys(s.Replicas))
				}
			}
		}
		views = append(views, v)
	}
	return views
}

// leaderCounts counts the groups each host leads.
func leaderCounts(views []groupView) map[uint64]int {
	led := make(map[uint64]int)
	for _, v := range views {
		if v.leader != 0 && slices.Contains(v.voters, v.leader) {
			led[v.leader]++
		}
	}
	return led
}

// leaderBound is ⌈G/H⌉ for host id: G the groups it votes in, H the hosts
// voting in them.
func leaderBound(views []groupView, id uint64) int {
	g := 0
	hosts := make(map[uint64]bool)
	for _, v := range views {
		if !slices.Contains(v.voters, id) {
			continue
		}
		g++
		for _, x := range v.voters {
			hosts[x] = true
		}
	}
	if g == 0 {
		return 0
	}
	return (g + len(hosts) - 1) / len(hosts)
}

// TransferLeadership moves the leadership of group ("" is the default
// group) to replica to, and returns once this host sees to lead it. An
// unknown group is ErrUnknownGroup.
func (h *Host) TransferLeadership(ctx context.Context, group string, to uint64) error {
	r := h.running(group)
	if r == nil {
		return fmt.Errorf("%w: %q", ErrUnknownGroup, truncate(group, 64))
	}
	return r.TransferLeadership(ctx, to)
}
