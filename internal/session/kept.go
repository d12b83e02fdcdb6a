package session

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock/internal/fsm"
)

// keptQueued records a request that the part's resume kept in its queue
// (EventKeptQueued, after an adoption): a waiter with no call yet, which
// the call that asks for the same lock or election again claims (rejoin).
// Its grant, if it comes first, is held by the session meanwhile, and the
// waiter keeps it for that call. A part not resumed with Keep ignores it.
func (p *Part) keptQueued(e *fsm.Event) {
	mode := lockMode(e)
	if e.Election {
		mode = electionMode
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || !p.keeps || p.waiters[e.Seq] != nil {
		return
	}
	p.waiters[e.Seq] = &waiter{ready: make(chan struct{}), maxHold: time.Duration(e.MaxHold), sent: p.keptSent,
		kept: true, name: e.Name, mode: mode}
}

// rejoin claims the kept request (see keptQueued) that a call asking for
// cmd would have made: the same lock or election, in the same mode, the
// oldest first. It returns its number and waiter, nil if there is none. A
// kept request whose grant ended already is forgotten, and not returned:
// the call then asks afresh.
func (p *Part) rejoin(cmd *fsm.Command) (uint64, *waiter) {
	want := cmdMode(cmd)
	p.mu.Lock()
	defer p.mu.Unlock()
	var seq uint64
	var w *waiter
	for s, k := range p.waiters {
		if k.kept && !k.claimed && k.name == cmd.Name && k.mode == want && (w == nil || s < seq) {
			seq, w = s, k
		}
	}
	if w == nil {
		return 0, nil
	}
	if w.grant != nil && w.grant.Err() != nil {
		delete(p.waiters, seq)
		return 0, nil
	}
	w.claimed = true
	return seq, w
}

// awaitKept is request for a call that claimed the kept request seq: it
// waits for that request's grant (at once if it was granted already), and
// withdraws the request if ctx ends first, as request does its own. The
// call's own MaxHold does not apply: the kept request's does.
func (p *Part) awaitKept(ctx context.Context, cmd *fsm.Command, seq uint64, w *waiter, o RequestOptions) (*Grant, error) {
	cmd.Session, cmd.Seq, cmd.MaxHold = p.id, seq, uint64(w.maxHold)
	withdrawn := false
	defer func() {
		if !withdrawn {
			p.finish(seq)
		}
	}()
	select {
	case <-w.ready:
		if w.grant == nil {
			return nil, w.err // withdrawn by the group's seal
		}
		return w.grant, nil
	default:
	}
	g, withdrawn, err := p.awaitQueued(ctx, *cmd, seq, w, o.Position)
	if err == nil {
		trace.SpanFromContext(ctx).AddEvent("granted")
	}
	return g, err
}

// forgetKept forgets the kept requests no call claimed whose grant was
// token, once it ended. p.mu is held.
func (p *Part) forgetKept(token uint64) {
	for seq, w := range p.waiters {
		if w.kept && !w.claimed && w.grant != nil && w.grant.token == token {
			delete(p.waiters, seq)
		}
	}
}

// WithdrawKept withdraws the requests for lock name (with election, for
// election name) that s's part in name's group kept at its adoption (see
// Adopt) and that no call claimed: each is cancelled by its own number, as
// a call that gives up on its request withdraws it (a grant that races
// ahead of the cancel is given back by it). A kept request granted already
// is not withdrawn: the session holds its grant, which its token releases.
// It tries for up to the proposal timeout, then goes on in the background
// (see withdraw), and reports how many requests it withdrew: none for a
// name in no group of the deployment.
func (s *Session) WithdrawKept(name string, election bool) int {
	group, _, err := s.h.Route(context.Background(), name)
	if err != nil {
		return 0
	}
	s.mu.Lock()
	p := s.parts[group]
	s.mu.Unlock()
	if p == nil {
		return 0
	}
	return p.withdrawKept(name, election)
}

func (p *Part) withdrawKept(name string, election bool) int {
	p.mu.Lock()
	var seqs []uint64
	for seq, w := range p.waiters {
		if w.kept && !w.claimed && w.grant == nil && w.name == name && w.mode.election == election {
			w.claimed = true // no call claims it now
			seqs = append(seqs, seq)
		}
	}
	p.mu.Unlock()
	kind := fsm.KindAcquire
	if election {
		kind = fsm.KindCampaign
	}
	for _, seq := range seqs {
		p.withdraw(seq, fsm.Command{Kind: kind, Name: name}, p.rt.h.cfg.ProposalTimeout)
	}
	return len(seqs)
}
