package session

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// Grant is what a Lock and a Leadership share: the group granted a lock, or
// an election, to one request of a part, with a fencing token.
type Grant struct {
	p    *Part // nil for an ended grant (the zero Lock's)
	name string
	grantMode
	token uint64
	seq   uint64
	done  chan struct{}

	mu    sync.Mutex
	err   error  // why the grant ended; nil while it lasts
	value string // a leadership's value
	// until is when, by the boot clock, a grant with a maximum hold ends
	// for its holder (timer fires then); zero without one.
	until clock.Instant
	timer clock.Timer
	// since is when the grant reached a waiting call (zero for one nobody
	// waited for): its hold figure counts from then. It is a figure, not a
	// lease, so it is read off the clock's Now (Go's monotonic reading, a
	// vDSO call) rather than the boot clock (a system call per reading,
	// which under W2 cost a tenth of the process's CPU).
	since time.Time
	// leads, for a leadership, counts it in its election's is-leader
	// figure until it ends (contention.go).
	leads *atomic.Int64
}

// grantMode is what a grant is of: an election, or a lock, exclusive,
// shared, or a permit of a semaphore of permits.
type grantMode struct {
	election bool
	shared   bool
	permits  int
}

func lockMode(e *fsm.Event) grantMode { return grantMode{shared: e.Shared, permits: int(e.Permits)} }

var electionMode = grantMode{election: true}

// Ended returns a grant that is already over (Done closed, Err and give
// back ErrNotHeld, or ErrNotLeader with election): the zero Lock's and the
// zero Leadership's.
func Ended(election bool) *Grant {
	g := &Grant{grantMode: grantMode{election: election}, done: make(chan struct{})}
	g.err = g.notHeld()
	close(g.done)
	return g
}

// Name returns the lock's or election's name, as the group stores it.
func (g *Grant) Name() string { return g.name }

// Token returns the grant's fencing token.
func (g *Grant) Token() uint64 { return g.token }

// Shared reports whether the grant is shared (AcquireShared, a permit).
func (g *Grant) Shared() bool { return g.shared }

// Permits returns the semaphore's permit count; 0 for a lock.
func (g *Grant) Permits() int { return g.permits }

// Session returns the session that holds the grant; nil for an ended one.
func (g *Grant) Session() *Session {
	if g.p == nil {
		return nil
	}
	return g.p.s
}

// GroupID returns the ID of the group that made the grant, 0 while this
// replica has not learnt it. It is read when asked: the ID is set once for
// the group's whole life, so a grant made before this replica learnt it
// still belongs to it.
func (g *Grant) GroupID() uint64 {
	if g.p == nil {
		return 0
	}
	r, err := g.p.rt.replica(context.Background())
	if err != nil {
		return 0
	}
	return r.GroupID()
}

// Value returns a leadership's value.
func (g *Grant) Value() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.value
}

// lose ends the grant for its holder, for why.
func (g *Grant) lose(why error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil {
		g.err = why
		close(g.done)
		if g.timer != nil {
			g.timer.Stop()
		}
		switch {
		case g.leads != nil:
			g.leads.Add(-1)
		case !g.since.IsZero() && g.p != nil:
			g.p.rt.contention.hold.observe(g.p.clock.Now().Sub(g.since))
		}
	}
}

// lead counts the leadership g in n until it ends.
func (g *Grant) lead(n *atomic.Int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err == nil && g.leads == nil {
		g.leads = n
		n.Add(1)
	}
}

// heldFor is how long g has been held by its holder's clock; 0 if unknown.
func (g *Grant) heldFor() time.Duration {
	if g.p == nil || g.since.IsZero() {
		return 0
	}
	return g.p.clock.Now().Sub(g.since)
}

// limit makes the grant end for its holder at until by the boot clock
// (its maximum hold less the session's margin), before the group frees it.
// Call it before anyone else sees g.
func (g *Grant) limit(until clock.Instant) {
	c := g.p.clock
	g.until = until
	g.timer = c.AfterFunc(until.Sub(clock.Boot(c)), g.pollHold)
}

// pollHold ends the grant if its maximum hold is over by the holder's
// clock. The group frees it a margin later, and grants it on then.
func (g *Grant) pollHold() {
	g.mu.Lock()
	over := g.err == nil && g.until != (clock.Instant{}) && !clock.Boot(g.p.clock).Before(g.until)
	g.mu.Unlock()
	if over {
		g.p.grantEnded(g.token, ErrMaxHoldExceeded)
		g.lose(ErrMaxHoldExceeded) // also if the registry had dropped it
	}
}

// Done and Err first check the part's deadline, and the maximum hold, by
// the holder's clock (a timer may fire late after a suspend).
func (g *Grant) Done() <-chan struct{} {
	if g.p != nil {
		g.p.poll()
		g.pollHold()
	}
	return g.done
}

// Err returns nil while the grant lasts, and why it ended after.
func (g *Grant) Err() error {
	if g.p != nil {
		g.p.poll()
		g.pollHold()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// notHeld is the error of a grant the group no longer has.
func (g *Grant) notHeld() error {
	if g.election {
		return ErrNotLeader
	}
	return ErrNotHeld
}

// GiveBack ends the grant at the group: Release for a lock, Resign for a
// leadership. It sends the name and token, so if the grant is no longer
// current nothing changes and the error is ErrNotHeld (ErrNotLeader): a late
// call never frees a successor's grant.
func (g *Grant) GiveBack(ctx context.Context) (err error) {
	if g.p == nil {
		return fmt.Errorf("%w: the zero value was never granted", g.notHeld())
	}
	kind := fsm.KindRelease
	if g.election {
		kind = fsm.KindResign
	}
	ctx, span := g.p.rt.h.startSpan(ctx, &fsm.Command{Kind: kind})
	defer span.End() // after the attributes, deferred below
	if span.IsRecording() {
		held := g.heldFor()
		defer func() {
			span.SetAttributes(attrName.String(g.name), attrGroup.String(g.p.rt.group),
				attrMode.String(g.grantMode.String()), attrToken.Int64(int64(g.token)),
				attrSession.Int64(int64(g.p.id)), attrHeld.Int64(int64(held)))
			r := result(err)
			if r == resultGranted {
				r = resultOK
			}
			span.SetAttributes(attrResult.String(r))
			endErr(span, err)
		}()
	}
	return g.giveBack(ctx, kind)
}

func (g *Grant) giveBack(ctx context.Context, kind fsm.Kind) error {
	p := g.p
	cmd := fsm.Command{Kind: kind, Name: g.name, Token: g.token}
	res, err := p.call(ctx, cmd)
	if err != nil {
		return err
	}
	if res.Status == fsm.LimitExceeded { // refused: the grant stands
		return fmt.Errorf("fencelock: %v %q: %w", kind, g.name, LimitError(res.Value))
	}
	p.grantEnded(g.token, g.notHeld())
	g.lose(g.notHeld()) // also when the part's registry had dropped it
	if res.Status == fsm.UnknownSession {
		// The part is over, and with it the grant: what the caller asked.
		p.expired()
		return fmt.Errorf("%w: %q token %d", g.notHeld(), g.name, g.token)
	}
	return p.replyErr(cmd, res, fsm.OK)
}

// Proclaim replaces a leadership's value at the group; a value longer
// than MaxValueLen is ErrValueTooLarge, whether or not the term is over.
func (g *Grant) Proclaim(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	if err := g.Err(); err != nil {
		return fmt.Errorf("%w: %q term %d is over: %w", ErrNotLeader, g.name, g.token, err)
	}
	cmd := fsm.Command{Kind: fsm.KindProclaim, Name: g.name, Token: g.token, Value: value}
	res, err := g.p.call(ctx, cmd)
	if err != nil {
		return err
	}
	if res.Status == fsm.UnknownSession {
		// Not the part's end: the term is what the caller asked about.
		return fmt.Errorf("%w: %q term %d", ErrNotLeader, g.name, g.token)
	}
	if res.Status == fsm.LimitExceeded {
		return fmt.Errorf("fencelock: proclaim %q: %w", g.name, LimitError(res.Value))
	}
	// On OK this replica applied the entry before the proposal returned, and
	// so set the value, in log order even if Proclaims race.
	return g.p.replyErr(cmd, res, fsm.OK)
}

// granted records that request seq of p was granted lock (or election) name
// with token, and wakes the call waiting for it. It is idempotent: a grant
// may be reported by the applied entry and by the proposal's reply. It
// returns nil if the part is over. since, if not zero, is a time before
// the group applied the grant (heldSince when the grant was reported); a
// maximum hold counts from the later of it and the request's send.
func (p *Part) granted(seq uint64, name string, mode grantMode, token uint64, value string, since clock.Instant) *Grant {
	p.mu.Lock()
	if g := p.grants[token]; g != nil {
		p.mu.Unlock()
		return g
	}
	if p.err != nil {
		p.mu.Unlock()
		return nil
	}
	g := p.newGrant(seq, name, mode, token, value)
	p.grants[token] = g
	w := p.waiters[seq]
	if w != nil && w.maxHold != 0 {
		start := w.sent
		if since.After(start) {
			start = since
		}
		g.limit(start.Add(w.maxHold - p.margin))
	}
	if w != nil && w.grant == nil && w.err == nil {
		g.since = p.clock.Now()
		w.grant = g
		close(w.ready)
	}
	p.mu.Unlock()
	if w == nil {
		// Nobody waits for this grant (its caller gave up and the cancel has
		// not been applied yet): give it back.
		p.rt.goBackground(func() {
			ctx, cancel := context.WithTimeout(p.rt.h.ctx, p.ttl)
			defer cancel()
			_ = g.GiveBack(ctx)
		})
	}
	return g
}

func (p *Part) newGrant(seq uint64, name string, mode grantMode, token uint64, value string) *Grant {
	return &Grant{p: p, name: name, grantMode: mode, token: token, seq: seq, value: value,
		done: make(chan struct{})}
}

// grantEnded records that the grant token ended for why.
func (p *Part) grantEnded(token uint64, why error) {
	p.mu.Lock()
	g := p.grants[token]
	delete(p.grants, token)
	p.forgetKept(token)
	p.mu.Unlock()
	if g != nil {
		g.lose(why)
	}
}

// proclaimed records the new value of the leadership token.
func (p *Part) proclaimed(token uint64, value string) {
	p.mu.Lock()
	g := p.grants[token]
	p.mu.Unlock()
	if g != nil {
		g.mu.Lock()
		g.value = value
		g.mu.Unlock()
	}
}

// held returns p's grants of locks (or, with election, leaderships) in
// token order.
func (p *Part) held(election bool) []*Grant {
	p.mu.Lock()
	var out []*Grant
	for _, g := range p.grants {
		if g.election == election {
			out = append(out, g)
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b *Grant) int { return cmp.Compare(a.token, b.token) })
	return out
}

// IsElection reports whether g is a leadership.
func (g *Grant) IsElection() bool { return g.election }
