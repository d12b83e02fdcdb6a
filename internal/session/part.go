package session

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// Route is how a part's background commands (its keep-alives, and the
// close of a part its holder gave up) reach its group: the group's replica,
// or what a test wraps around it. The renewer batches parts that share a
// route.
type Route interface {
	Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error)
}

// CommitFunc is how a command reaches a group, as a function.
type CommitFunc func(context.Context, fsm.Command) (fsm.Result, error)

// RouteFunc makes a Route of f. Each call makes a distinct route: parts
// share a batch only if they share the Route value.
func RouteFunc(f CommitFunc) Route { return &routeFunc{f} }

type routeFunc struct{ f CommitFunc }

func (r *routeFunc) Propose(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	return r.f(ctx, cmd)
}

// MaxKeepAlivesInFlight bounds the keep-alives a part has sent and not
// yet heard back about. More than one may be in flight, so that a slow
// commit does not delay the next send. A keep-alive is useless TTL − margin
// after its send, less than three periods of TTL/3, so the regular schedule
// never has more than three that could still help; the bound keeps retries
// after failures from piling up more.
const MaxKeepAlivesInFlight = 3

// lease is the holder's side of a part: the deadline after which it gives
// the part up, measured on the boot clock (clock.Boot), which also counts
// the time the machine was suspended where the OS offers that.
type lease struct {
	life     time.Duration // TTL − margin
	deadline clock.Instant
}

// extend moves the deadline to sent + TTL − margin, for a keep-alive sent at
// sent that the group acknowledged, unless a later-sent one already moved it
// further: acknowledgements can arrive in any order.
func (l *lease) extend(sent clock.Instant) {
	if d := sent.Add(l.life); d.After(l.deadline) {
		l.deadline = d
	}
}

// live reports whether the deadline is still ahead at now.
func (l *lease) live(now clock.Instant) bool { return now.Before(l.deadline) }

// renewals is the keep-alive schedule, on the boot clock: a keep-alive is due
// one period after the previous one was sent, whether or not that one has
// been answered, so a slow commit does not push the next send back; after a
// failed one, the next is due within retry.
type renewals struct {
	period, retry time.Duration
	next          clock.Instant // when the next keep-alive is due
	inFlight      int           // sent, and not yet answered
}

// send reports whether to send a keep-alive at now. If so it counts it in
// flight and makes the next due a period from now. It says no before the
// next is due, or while MaxKeepAlivesInFlight are in flight: then the next
// is sent as soon as one of them is answered.
func (r *renewals) send(now clock.Instant) bool {
	if !r.due(now, 0) {
		return false
	}
	r.sent(now)
	return true
}

// due reports whether a keep-alive may be sent at now, or would be due
// within early of now, with a slot free for it.
func (r *renewals) due(now clock.Instant, early time.Duration) bool {
	return r.inFlight < MaxKeepAlivesInFlight && !now.Add(early).Before(r.next)
}

// sent counts a keep-alive sent at now in flight, and makes the next due a
// period from now.
func (r *renewals) sent(now clock.Instant) {
	r.inFlight++
	r.next = now.Add(r.period)
}

// answered records the answer, at now, to a keep-alive in flight.
func (r *renewals) answered(ok bool, now clock.Instant) {
	r.inFlight--
	if soon := now.Add(r.retry); !ok && soon.Before(r.next) {
		r.next = soon
	}
}

// wait returns how long from now until send may say yes; while the most
// keep-alives are in flight, an answer comes first, so it returns a period.
func (r *renewals) wait(now clock.Instant) time.Duration {
	if r.inFlight >= MaxKeepAlivesInFlight {
		return r.period
	}
	return max(0, r.next.Sub(now))
}

// Part is a Session in one group: the group's session that stands for it
// there, with its own ID, request numbers, grants, lease and lost signal.
type Part struct {
	s     *Session
	rt    *router
	id    uint64
	nonce uint64 // the open's: the secret of its resume token
	ttl   time.Duration
	// margin, clock: the session's, copied for the paths that need them
	margin time.Duration
	clock  clock.Clock
	route  Route    // keep-alives and closeAtGroup go through it
	sched  renewals // its keep-alive schedule, guarded by the renewer's mu
	done   chan struct{}
	// abandoned: given up in this process only (Session.Abandon), for
	// another replica to adopt: its requests stay queued at the group.
	abandoned atomic.Bool
	// endedAs is how the part learned it is over, set before its end: a
	// default part's tells its session what it may close at the other
	// parts' groups (see Session.partEnded).
	endedAs atomic.Uint32

	mu      sync.Mutex
	nextSeq uint64
	// base is the floor its resume set (0: opened here): its session's
	// ownership epoch, for a default part an adoption resumed, which the
	// adoption's resumes of the other parts name (fsm.Command.Fence).
	base    uint64
	pending map[uint64]struct{} // requests whose reply may still be needed
	waiters map[uint64]*waiter  // Acquire and Campaign calls by request number
	grants  map[uint64]*Grant   // locks and leaderships held, by token
	lease   lease               // give up at its deadline
	acked   time.Time           // send time (clock.Now) of the last keep-alive acknowledged
	timer   clock.Timer         // fires at the lease's deadline, by the runtime's clock
	err     error

	// resume is the ID of the resume attempt that has not been applied
	// yet, 0 once it has (or for a part this process opened).
	resume atomic.Uint64
	// keeps marks a part resumed by an adoption, with fsm.Command.Keep:
	// it takes the requests its resume kept queued (EventKeptQueued) as
	// waiters with no call yet. keptSent, by the boot clock, precedes the
	// resume's send, and so the apply of every grant to a kept request.
	// Both are set before the resume is sent, under mu.
	keeps    bool
	keptSent clock.Instant

	pause atomic.Pointer[pause] // tests only: see pause.go
}

// waiter is one Acquire or Campaign call waiting for its grant.
type waiter struct {
	ready chan struct{} // closed when granted (grant), or dropped (err)
	grant *Grant
	// err ends the wait with nothing granted: the request's group is
	// being dropped, and its seal withdrew the request (fsm.KindSeal).
	err     error
	maxHold time.Duration // WithMaxHold's; 0: none
	sent    clock.Instant // when the request was sent, by the boot clock
	// kept marks a request an earlier holder made and an adoption kept in
	// its queue (fsm.EventKeptQueued): no call of this process made it,
	// and the call that re-issues it (claimed) waits for it instead of
	// asking again. name and mode are what such a call must ask for.
	kept, claimed bool
	name          string
	mode          grantMode
}

// newNonce returns a secret for an open or a resume attempt; never 0.
func newNonce() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// ID returns the part's session ID in its group.
func (p *Part) ID() uint64 { return p.id }

// Group returns the name of the part's group.
func (p *Part) Group() string { return p.rt.group }

// heldSince is a time, by the holder's boot clock, before the group applied
// any entry this replica has not applied yet: the send of the last
// keep-alive (or open, or resume) acknowledged. This replica applies the
// log in order and a proposal returns only once applied here, so an entry
// applied after it (a grant out of the queue, say) was committed after that
// send, and every replica's clock started on it later. Call it on the apply
// goroutine, as the entry is reported.
func (p *Part) heldSince() clock.Instant {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lease.deadline.Add(-p.lease.life)
}

// holds reports whether the part holds a grant, or a request that may yet
// be granted: one waiting in a queue, or one sent and not answered yet.
func (p *Part) holds() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.grants) > 0 || len(p.waiters) > 0 || len(p.pending) > 0
}

// deadline returns the holder's deadline for the part, by the boot clock.
func (p *Part) deadline() clock.Instant {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lease.deadline
}

// ended reports whether the part is over for its holder.
func (p *Part) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err returns why the part ended, nil while it lasts.
func (p *Part) Err() error {
	p.poll()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// endedWith returns why the part ended, nil while it lives, without
// checking its deadline (Err does) or taking its lock: the error is set
// before done closes, and never again.
func (p *Part) endedWith() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// poll ends the part if its deadline has passed.
func (p *Part) poll() { p.pollAt(clock.Boot(p.clock)) }

// pollAt ends the part if its deadline has passed at now, by the boot
// clock (the renewer reads it once for all its parts: on Linux it is a
// system call).
func (p *Part) pollAt(now clock.Instant) {
	p.mu.Lock()
	over := p.err == nil && !p.isPaused() && !p.lease.live(now)
	p.mu.Unlock()
	if over {
		p.giveUp()
	}
}

// How a part learned it is over (Part.endedAs).
const (
	// endedHere: by this process alone (its holder's deadline, a close
	// whose answer was lost, the Host's close): the group may still hold
	// it, under this copy or under another replica's that adopted it.
	endedHere uint32 = iota
	// endedThere: its group applied its end (a close of this copy, an
	// expiry, an operator's end): nobody can adopt it any more.
	endedThere
	// endedRefused: its group refused this copy's command as from a
	// session it does not know: the session is over, or another replica
	// adopted it and this copy is superseded. Nothing of it is this
	// copy's to close.
	endedRefused
)

// giveUp ends the part by the holder's clock and closes it at the group
// (a default part: its session does, see Session.partEnded).
func (p *Part) giveUp() {
	if p.end(ErrSessionExpired) {
		p.rt.h.log.Warn("fencelock: session not renewed in time; its holder gave it up", "session", p.id, "ttl", p.ttl)
		if !p.isDefault() {
			p.rt.goBackground(p.closeAtGroup)
		}
	}
}

// isDefault reports whether p is its session's default part.
func (p *Part) isDefault() bool {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.s.def == p
}

// closeAt proposes the part's close at its group, under this copy's
// floor, and reports whether it applied: false, with no error, when the
// group refused it (the part is over, or another replica adopted its
// session: this copy is superseded). It records what it learned in
// endedAs, for the part's end that follows.
func (p *Part) closeAt(ctx context.Context) (applied bool, err error) {
	r, err := p.rt.replica(ctx)
	if err != nil {
		return false, err
	}
	res, err := r.Propose(ctx, fsm.Command{Kind: fsm.KindCloseSession, Session: p.id, Floor: p.floor()})
	switch {
	case err != nil:
		return false, err
	case res.Status == fsm.OK:
		p.endedAs.CompareAndSwap(endedHere, endedThere)
		return true, nil
	default:
		p.endedAs.CompareAndSwap(endedHere, endedRefused)
		return false, nil
	}
}

// renew sends one keep-alive now; on success the holder's deadline moves to
// at least its send time + TTL − margin.
func (p *Part) renew(ctx context.Context) error {
	return p.renewAt(ctx, clock.Boot(p.clock), p.clock.Now())
}

// renewAt sends one keep-alive, sent at sent by the boot clock and at at by
// clock.Now, and extends the holder's deadline when it is acknowledged.
func (p *Part) renewAt(ctx context.Context, sent clock.Instant, at time.Time) error {
	// Past sent + TTL − margin its acknowledgement would extend nothing, and
	// the newer keep-alives in flight are the ones that can still help.
	ctx, cancel := context.WithTimeout(ctx, p.ttl-p.margin)
	defer cancel()
	res, err := p.route.Propose(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: p.id, Floor: p.floor()})
	switch {
	case err != nil:
		return err
	case res.Status == fsm.UnknownSession:
		p.expired()
		return ErrSessionExpired
	case res.Status != fsm.OK:
		return fmt.Errorf("fencelock: keep-alive: unexpected reply %v", res.Status)
	}
	p.extend(sent, at)
	return nil
}

func (p *Part) extend(sent clock.Instant, at time.Time) {
	p.mu.Lock()
	p.lease.extend(sent)
	if at.After(p.acked) {
		p.acked = at
	}
	p.mu.Unlock()
}

// checkDeadline runs when the deadline timer fires: it re-arms for an
// extended deadline, or ends the part.
func (p *Part) checkDeadline() {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return
	}
	if p.deadlineDuringPause() {
		p.mu.Unlock()
		return
	}
	if left := p.lease.deadline.Sub(clock.Boot(p.clock)); left > 0 {
		p.timer.Reset(left)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.giveUp()
}

// closeAtGroup closes a part its holder gave up, so that its locks free
// now rather than when the group's timer runs out.
func (p *Part) closeAtGroup() { p.closeAtGroupApplied() }

// closeAtGroupApplied is closeAtGroup, reporting whether the close applied
// at the group (false: refused, not proposed, or no answer).
func (p *Part) closeAtGroupApplied() bool {
	defer p.rt.forget(p)
	if !p.waitThawed(nil) {
		return false
	}
	res, err := p.route.Propose(p.rt.h.ctx, fsm.Command{Kind: fsm.KindCloseSession, Session: p.id, Floor: p.floor()})
	return err == nil && res.Status == fsm.OK
}

// expired ends the part after the group said it does not know it: over,
// or taken over by another replica (endedRefused).
func (p *Part) expired() {
	p.endedAs.CompareAndSwap(endedHere, endedRefused)
	p.end(ErrSessionExpired)
	p.rt.forget(p)
}

// end makes the part over for its holder, ending its grants; it reports
// whether this call ended it. The default part's end is its session's.
func (p *Part) end(err error) bool {
	if !p.endAlone(err) {
		return false
	}
	p.s.partEnded(p, err)
	return true
}

// endAlone is end without telling the session: for a part that never
// became its session's (a failed resume).
func (p *Part) endAlone(err error) bool {
	p.mu.Lock()
	if p.err != nil {
		p.mu.Unlock()
		return false
	}
	p.err = err
	close(p.done)
	if p.timer != nil {
		p.timer.Stop()
	}
	grants := p.grants
	p.grants = make(map[uint64]*Grant)
	p.mu.Unlock()
	for _, g := range grants {
		g.lose(err)
	}
	return true
}

// replied records that the reply to request seq arrived; the request may
// still wait for a grant.
func (p *Part) replied(seq uint64) {
	p.mu.Lock()
	delete(p.pending, seq)
	p.mu.Unlock()
}

// finish ends request seq.
func (p *Part) finish(seq uint64) {
	p.mu.Lock()
	delete(p.pending, seq)
	delete(p.waiters, seq)
	p.mu.Unlock()
}

// floor is the lowest request number whose reply may still be needed; the
// group forgets replies below it and ignores requests below it.
func (p *Part) floor() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.nextSeq
	for seq := range p.pending {
		f = min(f, seq)
	}
	return f
}
