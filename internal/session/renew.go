package session

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// renewer keeps a group's parts alive on this replica: one goroutine for
// all of them (but those renewed by KeepAlive calls), sending one
// keep-alive batch (fsm.KindKeepAliveBatch) for every part due, so that a
// replica with many sessions costs the group a few commands per keep-alive
// period, not one per session. Each group has its own renewer: a group that
// cannot commit delays only its own parts' renewals.
//
// Each part keeps its own schedule (renewals: a keep-alive every TTL/3
// from the previous send, sooner after a failure, at most
// MaxKeepAlivesInFlight in flight), and its own lease: a batch
// acknowledged extends each part it renewed from the batch's send time,
// exactly as its own keep-alive would have. A round sends whatever is due
// and, with it, whatever would be due within half its period: renewing
// early costs a few bytes in a batch already sent, and it brings parts
// opened at different times onto one schedule, so a steady replica sends
// about one batch per period.
type renewer struct {
	rt   *router
	kick chan struct{}

	mu    sync.Mutex
	parts map[uint64]*Part // their sched fields are guarded by mu too
	// minPeriod is the shortest period of the parts at the last round:
	// the renewer wakes within it, so a part added with a period no
	// shorter needs no wake-up of its own (a round costs a look at every
	// part, and a thousand opens should not cost a thousand rounds).
	minPeriod time.Duration
}

func newRenewer(rt *router) *renewer {
	return &renewer{rt: rt, kick: make(chan struct{}, 1), parts: make(map[uint64]*Part)}
}

// add starts renewing p, its first keep-alive a period after sent.
func (r *renewer) add(p *Part, sent clock.Instant) {
	r.mu.Lock()
	p.sched = renewals{period: p.ttl / 3, retry: max(p.ttl/20, r.rt.h.cfg.RTT), next: sent.Add(p.ttl / 3)}
	r.parts[p.id] = p
	soon := len(r.parts) == 1 || p.sched.period < r.minPeriod
	r.mu.Unlock()
	if soon {
		r.wake()
	}
}

// remove stops renewing p.
func (r *renewer) remove(p *Part) {
	r.mu.Lock()
	if r.parts[p.id] == p {
		delete(r.parts, p.id)
	}
	r.mu.Unlock()
}

func (r *renewer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// run renews until the Host closes.
func (r *renewer) run() {
	ctx, cancel := context.WithCancel(r.rt.ctx)
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	defer cancel() // runs first: it ends the batches still in flight
	c := r.rt.h.cfg.Clock
	t := c.NewTimer(time.Hour)
	defer t.Stop()
	for {
		wait := r.round(ctx, &inFlight)
		t.Stop()
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-r.kick:
		}
	}
}

// round sends a batch for the parts due and returns how long until the
// next round. It wakes at least once in the shortest period of its parts,
// so after a suspend (which delays every runtime timer, the parts' deadline
// timers too) it is the first to look at their deadlines, by the boot
// clock.
func (r *renewer) round(ctx context.Context, inFlight *sync.WaitGroup) time.Duration {
	r.mu.Lock()
	all := make([]*Part, 0, len(r.parts))
	for _, p := range r.parts {
		all = append(all, p)
	}
	r.mu.Unlock()
	c := r.rt.h.cfg.Clock
	now := clock.Boot(c)
	at := c.Now()
	for _, p := range all {
		p.pollAt(now) // outside r.mu: it may end p, and an end calls remove
	}

	wait := time.Hour
	var due, early []*Part
	r.mu.Lock()
	r.minPeriod = time.Hour
	for _, p := range r.parts {
		r.minPeriod = min(r.minPeriod, p.sched.period)
		wait = min(wait, p.sched.period)
		if p.ended() {
			delete(r.parts, p.id)
			continue
		}
		if p.heldBack() {
			continue // frozen or paused by a test: its thaw wakes the renewer
		}
		switch {
		case p.sched.due(now, 0):
			due = append(due, p)
		case p.sched.due(now, p.sched.period/2):
			early = append(early, p)
			fallthrough
		default:
			wait = min(wait, p.sched.wait(now))
		}
	}
	// Only what is due starts a round, so a retry waits its time; what
	// would be due soon joins it.
	if len(due) > 0 {
		due = append(due, early...)
		for _, p := range due {
			p.sched.sent(now)
		}
	}
	r.mu.Unlock()
	if len(due) == 0 {
		return wait
	}
	slices.SortFunc(due, func(a, b *Part) int { return cmp.Compare(a.id, b.id) })
	for _, batch := range batches(due) {
		inFlight.Add(1)
		go func() {
			defer inFlight.Done()
			r.send(ctx, batch, now, at)
		}()
	}
	return wait
}

// batches splits parts (in ID order) into the batches to send: parts that
// share a route go together, up to fsm.MaxRenewals to a command.
func batches(parts []*Part) [][]*Part {
	var out [][]*Part
	var order []Route
	by := make(map[Route][]*Part)
	for _, p := range parts {
		if by[p.route] == nil {
			order = append(order, p.route)
		}
		by[p.route] = append(by[p.route], p)
	}
	for _, route := range order {
		same := by[route]
		for len(same) > 0 {
			n := min(len(same), fsm.MaxRenewals)
			out = append(out, same[:n])
			same = same[n:]
		}
	}
	return out
}

// send commits one batch, sent at sent by the boot clock and at at by
// clock.Now, and hands each of its parts the outcome.
func (r *renewer) send(ctx context.Context, batch []*Part, sent clock.Instant, at time.Time) {
	cmd := fsm.Command{Kind: fsm.KindKeepAliveBatch, Owner: r.rt.h.cfg.ReplicaID, Renew: make([]fsm.Renewal, len(batch))}
	// Past sent + TTL − margin an acknowledgement extends nothing for a
	// part, and the batches sent after this one are those that can help.
	life := batch[0].lease.life
	for i, p := range batch {
		cmd.Renew[i] = fsm.Renewal{Session: p.id, Floor: p.floor()}
		life = min(life, p.lease.life)
	}
	ctx, cancel := context.WithTimeout(ctx, life)
	defer cancel()
	res, err := batch[0].route.Propose(ctx, cmd)
	if err == nil && res.Status != fsm.OK && res.Status != fsm.Refused {
		err = fmt.Errorf("fencelock: keep-alive batch: unexpected reply %v", res.Status)
	}
	if err != nil && ctx.Err() == nil {
		r.rt.h.log.Debug("fencelock: keep-alive batch failed", "sessions", len(batch), "group", r.rt.group, "err", err)
	}
	ok := err == nil
	var refused map[uint64]bool
	if ok && res.Status == fsm.Refused {
		refused = make(map[uint64]bool, len(res.Refused))
		for _, id := range res.Refused {
			refused[id] = true
		}
	}
	for _, p := range batch {
		switch {
		case refused[p.id]:
			// The group does not know the session any more, or it lives on
			// with another holder (resumed elsewhere): it is over here.
			p.expired()
		case ok:
			p.extend(sent, at)
		}
	}
	now := clock.Boot(r.rt.h.cfg.Clock)
	r.mu.Lock()
	for _, p := range batch {
		p.sched.answered(ok, now)
	}
	r.mu.Unlock()
	r.wake() // a slot is free, or a failure made the next one due sooner
}
