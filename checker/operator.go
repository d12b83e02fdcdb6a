package checker

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/fencelock/fencelock"
)

// operator is a person at the console during the run: now and then it
// revokes a lock's grant (by the token a read showed it, or whatever grant
// is current), revokes an election's term, or ends a client's session. Its
// revocations are in the history (Revoke, after the Read that named the
// token); a session it ends frees that session's grants as an expiry would
// (Lose). The holder it revokes is not bound to stop first (its replica
// may apply the revocation after the next holder's does); the Fencer still
// refuses its late writes.
func operator(ctx context.Context, e *env, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	for {
		if wait(ctx, e.ttl/2+time.Duration(rng.Int64N(int64(e.ttl)))) != nil {
			return
		}
		e.operate(ctx, rng, false, 0)
	}
}

// operate is one act of the operator, through replica via (0: the default
// group's leader): a revocation of a lock's grant (in any group), of an
// election's term, or the end of a session; with parts, also the end of a
// session's part in a named group (EndSessionIn).
func (e *env) operate(ctx context.Context, rng *rand.Rand, parts bool, via uint64) {
	id := via
	var err error
	if id == 0 {
		id, err = e.c.Leader(ctx)
	}
	n := e.c.Node(id)
	if err != nil || n == nil {
		return
	}
	acts := 4
	if parts {
		acts = 5
	}
	switch rng.IntN(acts) {
	case 0, 1:
		name := e.locks[rng.IntN(len(e.locks))]
		e.revokeLock(ctx, n, id, name, rng.IntN(2) == 0)
	case 2:
		e.revokeTerm(ctx, n, id, e.elections[rng.IntN(len(e.elections))])
	case 3:
		e.endSession(ctx, n, rng)
	case 4:
		groups := e.c.groupNames()[1:]
		e.endPart(ctx, n, rng, groups[rng.IntN(len(groups))])
	}
}

// revokeLock revokes the current grant of lock name: the one a read shows
// (byToken), or whatever grant is current.
func (e *env) revokeLock(ctx context.Context, n *fencelock.Node, node uint64, name string, byToken bool) {
	var token uint64
	if byToken {
		call := e.h.now()
		rctx, cancel := context.WithTimeout(ctx, e.opTimeout)
		info, err := n.Inspect(rctx, name)
		cancel()
		if err != nil {
			return
		}
		e.h.add(Op{Client: -2, Node: node, Kind: OpRead, Lock: name, Outcome: OK, Held: info.Held,
			Session: info.SessionID, Token: info.Token, Call: call, Return: e.h.now(), PartSession: groupOf(name) != "" && info.SessionID == 0})
		if !info.Held {
			return
		}
		token = info.Token
	}
	var i int
	err := e.revoke(ctx, n, groupOf(name), func(b *belief) bool { return b.name == name && (token == 0 || b.token == token) },
		func(ctx context.Context) error {
			i = e.h.begin(Op{Client: -2, Node: node, Kind: OpRevoke, Lock: name, Token: token})
			if byToken {
				return n.RevokeGrant(ctx, name, token)
			}
			return n.Revoke(ctx, name)
		})
	e.h.end(i, e.revoked(err, fencelock.ErrNotHeld), 0)
}

// revokeTerm ends whatever term of election name is current.
func (e *env) revokeTerm(ctx context.Context, n *fencelock.Node, node uint64, name string) {
	key := electionKey(name)
	var i int
	err := e.revoke(ctx, n, groupOf(name), func(b *belief) bool { return b.name == key }, func(ctx context.Context) error {
		i = e.h.begin(Op{Client: -2, Node: node, Kind: OpRevoke, Lock: key})
		return n.RevokeLeadership(ctx, name)
	})
	e.h.end(i, e.revoked(err, fencelock.ErrNotLeader), 0)
}

// revoke runs one revocation through n: call, within the operator's
// timeout, ends in group the grants match selects. Their beliefs are
// marked revoked from before the call until every replica has applied it
// (revocationApplied), so a holder that learns of the end late is not
// taken for one that holds past it. It returns call's error.
func (e *env) revoke(ctx context.Context, n *fencelock.Node, group string, match func(*belief) bool, call func(ctx context.Context) error) error {
	done := e.revoking(match)
	defer done()
	rctx, cancel := context.WithTimeout(ctx, e.opTimeout)
	err := call(rctx)
	cancel()
	e.revocationApplied(ctx, n, group)
	return err
}

// endSession ends a live client session at the group; its holder must then
// find it over (Done closed) within settleBound.
func (e *env) endSession(ctx context.Context, n *fencelock.Node, rng *rand.Rand) {
	e.mu.Lock()
	var live []*fencelock.Session
	for _, id := range slices.Sorted(maps.Keys(e.sessions)) {
		if s := e.sessions[id]; s.Err() == nil {
			live = append(live, s)
		}
	}
	e.mu.Unlock()
	if len(live) == 0 {
		return
	}
	s := live[rng.IntN(len(live))]
	err := e.revoke(ctx, n, "", func(b *belief) bool { return b.session == s.ID() }, func(ctx context.Context) error {
		return n.EndSession(ctx, s.ID())
	})
	if e.revoked(err, nil) != OK {
		return
	}
	t := time.NewTimer(settleBound)
	defer t.Stop()
	select {
	case <-s.Done():
	case <-t.C:
		e.h.violation("session %d ended by the operator is still live for its holder after %v", s.ID(), settleBound)
	case <-ctx.Done():
	}
}

// endPart ends a live client session's part in the named group (by its ID
// there, as an operator reads it from SessionsIn); the holders of its
// grants there must then find them over (Done closed) within settleBound,
// while the session lives on.
func (e *env) endPart(ctx context.Context, n *fencelock.Node, rng *rand.Rand, group string) {
	type target struct {
		s    *fencelock.Session
		part uint64
	}
	e.mu.Lock()
	var live []target
	for _, id := range slices.Sorted(maps.Keys(e.sessions)) {
		s := e.sessions[id]
		if part, ok := s.IDIn(group); ok && s.Err() == nil {
			live = append(live, target{s, part})
		}
	}
	e.mu.Unlock()
	if len(live) == 0 {
		return
	}
	t := live[rng.IntN(len(live))]
	match := func(b *belief) bool { return b.session == t.s.ID() && groupOf(b.name) == group }
	err := e.revoke(ctx, n, group, match, func(ctx context.Context) error { return n.EndSessionIn(ctx, group, t.part) })
	if e.revoked(err, nil) != OK {
		return
	}
	// Every grant the part held when the end applied is over for its
	// holder by now or soon: its replica has applied the end, or will.
	var held []*belief
	e.beliefs.mu.Lock()
	for _, bs := range e.beliefs.m {
		for _, b := range bs {
			if match(b) && e.applied.endedByOperator(b.name, b.token) {
				held = append(held, b)
			}
		}
	}
	e.beliefs.mu.Unlock()
	deadline := time.NewTimer(settleBound)
	defer deadline.Stop()
	for _, b := range held {
		select {
		case <-b.done:
		case <-deadline.C:
			e.h.violation("%q token %d, ended by the operator with its session's part in group %q, is still held for its holder after %v",
				b.name, b.token, group, settleBound)
			return
		case <-ctx.Done():
			return
		}
	}
}

// revocationApplied returns once every running replica has applied
// group's log as far as n had when a revocation through n returned, or a
// TTL later. A grant the revocation ended can return to its holder after
// the revocation returned (the holder's replica lags: it applied the grant,
// not yet the revocation), and its holder learns of the end only when its
// replica applies it: until then its belief stays marked. A holder whose
// replica lags by more than a TTL cannot have renewed since before the
// revocation, so its lease has ended by then.
func (e *env) revocationApplied(ctx context.Context, n *fencelock.Node, group string) {
	target := groupApplied(n, group)
	deadline := time.Now().Add(e.ttl)
	for _, id := range e.c.IDs() {
		for {
			m := e.c.Node(id)
			if m == nil || groupApplied(m, group) >= target || time.Now().After(deadline) {
				break
			}
			if wait(ctx, 5*time.Millisecond) != nil {
				return
			}
		}
	}
}

// groupApplied returns how far n's replica of group has applied its log.
func groupApplied(n *fencelock.Node, group string) uint64 { return groupStatus(n, group).AppliedIndex }

// revoking marks every belief that match selects as revoked, the ones
// granted until done is called included: the revocation may hit them.
func (e *env) revoking(match func(*belief) bool) (done func()) {
	e.beliefs.mu.Lock()
	defer e.beliefs.mu.Unlock()
	for _, bs := range e.beliefs.m {
		for _, b := range bs {
			if match(b) {
				b.revoked = true
			}
		}
	}
	p := &match
	e.beliefs.revoking = append(e.beliefs.revoking, p)
	return func() {
		e.beliefs.mu.Lock()
		defer e.beliefs.mu.Unlock()
		e.beliefs.revoking = slices.DeleteFunc(e.beliefs.revoking, func(q *func(*belief) bool) bool { return q == p })
	}
}

// revoked is the outcome of a revocation that returned err, counted when
// OK; notHeld is the error of one that found nothing to revoke (nil: no
// error means that).
func (e *env) revoked(err error, notHeld error) Outcome {
	switch {
	case err == nil:
		e.mu.Lock()
		e.revokes++
		e.mu.Unlock()
		return OK
	case errors.Is(err, notHeld):
		return NotHeld
	}
	return Unknown
}
