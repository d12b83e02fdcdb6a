package replica

// The handover on Close. Dragonboat does not transfer leadership when a
// NodeHost stops (lni/dragonboat#180): its followers wait an election
// timeout for a leader that is gone, and every call waits with them. So a
// host that closes first hands each group it leads to the voter whose log
// is furthest along, waits for the new leader within a bound, and only then
// stops.
//
// Dragonboat does not expose a leader's view of its followers' logs, so the
// host reads it off the wire: every append a follower acknowledges
// (ReplicateResp) carries the last index of its log, and a wrapper around
// the transport's message handler keeps the highest per group and sender.

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lni/dragonboat/v4/config"
	"github.com/lni/dragonboat/v4/raftio"
	pb "github.com/lni/dragonboat/v4/raftpb"
)

// progress is the highest log index each peer acknowledged, per shard, as
// seen by this host while it led (or received acknowledgements); and the
// highest commit index a leader sent this host, per shard.
type progress struct {
	mu        sync.Mutex
	acked     map[uint64]map[uint64]ack // shard -> replica -> its latest
	committed map[uint64]uint64         // shard -> commit index heard
	// heard and upSince are, per replica, when this host last heard from
	// it and since when without a silence longer than silentGap.
	heard, upSince map[uint64]time.Time
}

// ack is the highest index a replica acknowledged in a shard, and when it
// last answered an append or a heartbeat there.
type ack struct {
	index uint64
	at    time.Time
}

// silentGap is a silence after which a peer counts as back from a restart.
// Raft heartbeats come every few RTTs, so any gap this long is a stop.
const silentGap = 500 * time.Millisecond

// settle is how long a peer back from a restart is not chosen to take a
// group over when another voter can: its peers' connections to it may
// still be backing off (Dragonboat retries a failed peer after 0.5 to 1s),
// and a leader its followers cannot reach stalls every call they forward.
const settle = 1500 * time.Millisecond

func (p *progress) observe(b pb.MessageBatch) {
	if len(b.Requests) > 0 {
		now, from := time.Now(), b.Requests[0].From
		p.mu.Lock()
		if p.heard == nil {
			p.heard, p.upSince = make(map[uint64]time.Time), make(map[uint64]time.Time)
		}
		if last, ok := p.heard[from]; !ok || now.Sub(last) > silentGap {
			p.upSince[from] = now
		}
		p.heard[from] = now
		p.mu.Unlock()
	}
	for i := range b.Requests {
		m := &b.Requests[i]
		if m.Type == pb.Replicate || m.Type == pb.Heartbeat {
			p.mu.Lock()
			if p.committed == nil {
				p.committed = make(map[uint64]uint64)
			}
			p.committed[m.ShardID] = max(p.committed[m.ShardID], m.Commit)
			p.mu.Unlock()
			continue
		}
		// A heartbeat's answer says the replica takes part in the shard
		// now as an append's does (an idle group sends no appends), but
		// carries no index.
		if m.Type != pb.ReplicateResp && m.Type != pb.HeartbeatResp || m.Reject {
			continue
		}
		p.mu.Lock()
		if p.acked == nil {
			p.acked = make(map[uint64]map[uint64]ack)
		}
		s := p.acked[m.ShardID]
		if s == nil {
			s = make(map[uint64]ack)
			p.acked[m.ShardID] = s
		}
		a := s[m.From]
		if m.Type == pb.ReplicateResp {
			a.index = max(a.index, m.LogIndex)
		}
		a.at = time.Now()
		s[m.From] = a
		p.mu.Unlock()
	}
}

// commit is the highest commit index a leader of shard sent this host.
func (p *progress) commit(shard uint64) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.committed[shard]
}

// heardWithin reports whether replica id was heard from within d.
func (p *progress) heardWithin(id uint64, d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	last, ok := p.heard[id]
	return ok && time.Since(last) < d
}

// settled reports whether replica id has been heard from without a
// silence for at least settle.
func (p *progress) settled(id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	up, ok := p.upSince[id]
	return ok && time.Since(up) >= settle
}

// index is the highest index replica id acknowledged in shard, 0 if none.
func (p *progress) index(shard, id uint64) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked[shard][id].index
}

// ackedWithin reports whether replica id answered an append or a heartbeat
// in shard within d: that it takes part in that shard's log now, which
// hearing from it in another shard, or an answer from before a cut, does
// not say.
func (p *progress) ackedWithin(shard, id uint64, d time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, ok := p.acked[shard][id]
	return ok && time.Since(a.at) < d
}

// progressFactory wraps a transport factory so that the host sees every
// batch received before Dragonboat does.
type progressFactory struct {
	config.TransportFactory
	h *Host
}

func (f progressFactory) Create(nhc config.NodeHostConfig, h raftio.MessageHandler, c raftio.ChunkHandler) raftio.ITransport {
	return f.TransportFactory.Create(nhc, func(b pb.MessageBatch) {
		b, whole := f.h.screen(b) // host_shards.go
		if !whole && len(b.Requests) == 0 {
			return
		}
		f.h.prog.observe(b)
		if f.h.holdTimeoutNow(b, h) {
			return
		}
		h(b)
	}, c)
}

// holdTimeoutNow delays a batch that tells this host to take a group's
// leadership over (TimeoutNow, the last step of a transfer) until the
// group's replica here has applied every entry it knows committed, at most
// half an election timeout. Raft skips the campaign of a replica with
// committed entries not yet applied (it could hide a membership change),
// and the old leader then refuses proposals until it abandons the transfer
// an election timeout later: under a steady load the target is nearly
// always an entry or two behind in applying when the message arrives.
// It reports whether it took the batch.
func (h *Host) holdTimeoutNow(b pb.MessageBatch, deliver raftio.MessageHandler) bool {
	var r *Replica
	for i := range b.Requests {
		if b.Requests[i].Type == pb.TimeoutNow {
			r = h.byShard(b.Requests[i].ShardID)
			break
		}
	}
	if r == nil || r.AppliedIndex.Load() >= h.prog.commit(r.ShardID()) {
		return false
	}
	// Handlers run until the NodeHost's transport stops, before Close
	// waits for h.wg: the Add happens before the Wait.
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		deadline := time.Now().Add(h.electionTimeout() / 2)
		for r.AppliedIndex.Load() < h.prog.commit(r.ShardID()) && time.Now().Before(deadline) {
			select {
			case <-h.closed:
				return
			case <-time.After(200 * time.Microsecond): // no event for "applied up to"
			}
		}
		deliver(b)
	}()
	return true
}

// HandoverTimeout bounds the wait for one group's new leader at Close: the
// target catches up and wins an election in a few round trips when the
// group is healthy; past this, a transfer will not happen, and the host
// stops anyway (its followers then elect a leader after an election timeout,
// as after a crash).
func (h *Host) HandoverTimeout() time.Duration {
	return 3*h.electionTimeout() + 2*h.cfg.RTT
}

// Handover hands the leadership of every group this host leads to the most
// caught-up voter it reached recently, concurrently for all groups, and
// returns once each has a new leader or its bound (HandoverTimeout, and
// ctx) passed. It never fails: a group with no voter to hand to (no quorum,
// a group of one) is left as it is. It returns the groups handed over.
func (h *Host) Handover(ctx context.Context) []string {
	if h.closing() {
		return nil
	}
	self := h.cfg.ReplicaID
	window := max(3*h.electionTimeout(), time.Second)
	var (
		mu     sync.Mutex
		moved  []string
		wg     sync.WaitGroup
		bounds = h.HandoverTimeout()
	)
	for _, v := range h.views() {
		if v.leader != self || !slices.Contains(v.voters, self) {
			continue
		}
		acked := func(id uint64) uint64 { return h.prog.index(v.r.ShardID(), id) }
		reachable := func(id uint64) bool { return h.peers.reached(id, window) }
		if _, ok := pickHandover(v.voters, self, acked, reachable, h.prog.settled); !ok {
			v.r.Logger().Warn("fencelock: closing the leader with no reachable voter to hand the group to; the others elect one after an election timeout")
			continue
		}
		wg.Add(1)
		go func(r *Replica, voters []uint64) {
			defer wg.Done()
			tctx, cancel := context.WithTimeout(ctx, bounds)
			defer cancel()
			start := time.Now()
			// One request per target, the best first: a voter heard from a
			// moment ago may have stopped since (a rolling restart closes
			// hosts one after the other), and waiting out the bound on it
			// would leave the group to an election after all.
			tried := map[uint64]bool{}
			for {
				to, ok := pickHandover(voters, self, acked, func(id uint64) bool { return !tried[id] && reachable(id) }, h.prog.settled)
				if !ok && len(tried) > 0 {
					clear(tried) // each was asked once: ask again, until the bound
					to, ok = pickHandover(voters, self, acked, reachable, h.prog.settled)
				}
				if !ok {
					r.Logger().Warn("fencelock: leadership not handed over before closing; the others elect a leader after an election timeout", "tried", slices.Sorted(maps.Keys(tried)))
					return
				}
				tried[to] = true
				err := r.Transfer(tctx, to, 1)
				if ld := r.LeaderID.Load(); err != nil && ld != 0 && ld != self {
					to, err = ld, nil // another voter won the election: handed over all the same
				}
				if err == nil {
					r.Logger().Info("fencelock: leadership handed over before closing", "to", to, "took", time.Since(start).Round(time.Microsecond))
					mu.Lock()
					moved = append(moved, r.Name())
					mu.Unlock()
					return
				}
				if tctx.Err() != nil {
					r.Logger().Warn("fencelock: leadership not handed over before closing; the others elect a leader after an election timeout", "to", to, "err", err)
					return
				}
				r.Logger().Info("fencelock: voter did not take the group over; handing it to another", "to", to, "err", err)
			}
		}(v.r, v.voters)
	}
	wg.Wait()
	return moved
}

// pickHandover chooses the voter to hand a group to: among the voters other
// than self that were reached recently, a settled one (not just back from a
// restart) before one that is not, then the one whose log acknowledged the
// highest index (the transfer waits for the target to catch up, so the
// furthest along is the quickest), then the lowest ID.
func pickHandover(voters []uint64, self uint64, acked func(uint64) uint64, reachable, settled func(uint64) bool) (uint64, bool) {
	var best, bestIdx uint64
	bestSettled, found := false, false
	for _, id := range slices.Sorted(slices.Values(voters)) {
		if id == self || !reachable(id) {
			continue
		}
		idx, st := acked(id), settled(id)
		if !found || st && !bestSettled || st == bestSettled && idx > bestIdx {
			best, bestIdx, bestSettled, found = id, idx, st, true
		}
	}
	return best, found
}
