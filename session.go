package fencelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// SessionOption configures NewSession.
type SessionOption func(*sessionOptions)

type sessionOptions struct {
	ttl, margin time.Duration
	delay       time.Duration // lock-delay
	resume      ResumeToken
	commit      func(commitFunc) commitFunc // tests: how background commands reach the group
	external    bool                        // WithExternalKeepAlive: not renewed by the node (external.go)
}

// commitFunc applies a command through the group, as Node.propose does.
type commitFunc func(context.Context, fsm.Command) (fsm.Result, error)

// WithTTL sets the session's time to live: how long the group keeps it, and
// its locks, after the last keep-alive it applied. Between 100ms and 24h;
// the default is Config.SessionTTL.
func WithTTL(ttl time.Duration) SessionOption { return func(o *sessionOptions) { o.ttl = ttl } }

// WithSafetyMargin sets how long before TTL runs out, by the holder's own
// clock, the holder gives the session up when it could not renew it. The
// default is TTL/5; it must lie in (0, TTL/2], or NewSession fails with an
// error wrapping ErrInvalidTTL.
//
// The margin must cover the difference in clock rates between holder and
// leader over one TTL, plus the holder's scheduling delay in noticing: with
// TTL 10s and margin 2s, the clocks may drift apart by 20% before a holder
// could act after the group expired it. Clocks need not be synchronised:
// only rates matter.
//
// What the margin costs is commit latency: keep-alives are sent every TTL/3,
// so a session survives as long as each keep-alive commits within
// TTL − margin − TTL/3 of being sent (7/15 of the TTL with the default
// margin, TTL/6 at the largest margin). The bound TTL/2 keeps that
// tolerance at least half a keep-alive period; a larger margin would leave a
// session that gives itself up on a healthy group.
func WithSafetyMargin(m time.Duration) SessionOption {
	return func(o *sessionOptions) { o.margin = m }
}

// WithLockDelay gives the session a lock-delay (Chubby's, Consul's): if
// the group expires the session, or an operator ends it (Node.EndSession),
// each lock it held is granted to nobody for d, so that writes its holder
// still had in flight to a resource that checks no token land before the
// next holder starts. A release, a Close, or the holder giving the session
// up by its own clock delays nothing: the holder stopped first. Elections
// are never delayed. The default, 0, is no delay. d must lie in [0,
// MaxLockDelay], else NewSession fails with ErrInvalidLockDelay.
//
// The delay is timed by the group leader's clock, from when it applied the
// end, and a new leader restarts a pending delay in full: a leader change
// makes a delay longer, never shorter. Inspect shows a delayed lock as
// Delayed. An operator's EndSession delays too because the holder did not
// choose to stop: it may be acting right now, unlike after an expiry, where
// its own clock stopped it a margin before.
func WithLockDelay(d time.Duration) SessionOption {
	return func(o *sessionOptions) { o.delay = d }
}

// withCommit wraps how the session's background commands (its keep-alives,
// and the close of a session its holder gave up) reach the group; tests use
// it to delay their commit.
func withCommit(wrap func(commitFunc) commitFunc) SessionOption {
	return func(o *sessionOptions) { o.commit = wrap }
}

// maxKeepAlivesInFlight bounds the keep-alives a session has sent and not
// yet heard back about. More than one may be in flight, so that a slow
// commit does not delay the next send. A keep-alive is useless TTL − margin
// after its send, less than three periods of TTL/3, so the regular schedule
// never has more than three that could still help; the bound keeps retries
// after failures from piling up more.
const maxKeepAlivesInFlight = 3

// lease is the holder's side of a session: the deadline after which it
// gives the session up, measured on the boot clock (clock.Boot), which also
// counts the time the machine was suspended where the OS offers that.
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
// next is due, or while maxKeepAlivesInFlight are in flight: then the next
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
	return r.inFlight < maxKeepAlivesInFlight && !now.Add(early).Before(r.next)
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
	if r.inFlight >= maxKeepAlivesInFlight {
		return r.period
	}
	return max(0, r.next.Sub(now))
}

// Session is a holder of locks, normally one per process. Its node renews
// it with a keep-alive every TTL/3, apart from the caller's work, so a busy
// caller does not look dead; one command renews all the node's sessions
// that are due, so many sessions cost the group little more than one. Each
// is sent a period after the previous one, without waiting for its answer
// (at most 3 in flight), so a session survives keep-alives that each take
// up to TTL − margin − TTL/3 to commit. If the group hears nothing for TTL it expires the session and
// frees all its locks in one step, passing each to the head of its queue.
//
// The holder stops first: with t the send time of the latest keep-alive (or
// the open) the group acknowledged, Done closes and Err returns
// ErrSessionExpired at t + TTL − margin by the holder's clock unless a later
// one is acknowledged first, even while the group is unreachable, and before
// the group could expire it. That clock counts the time
// the machine was suspended on Linux (CLOCK_BOOTTIME); elsewhere it is Go's
// monotonic clock, which may not. A session that is done stays done; open a
// new one. The library closes a dead session at the group as soon as it can,
// so its locks free promptly.
//
// Its methods are safe for concurrent use.
type Session struct {
	n     *Node
	id    uint64
	nonce uint64 // the open's: the secret of its ResumeToken
	// external: renewed only by KeepAlive calls (WithExternalKeepAlive),
	// not renewed by the node's renewer
	external bool
	ttl      time.Duration
	margin   time.Duration
	clock    clock.Clock
	commit   commitFunc // keep-alives and closeAtGroup go through it
	// linked: commit is a test's (withCommit), so its keep-alives go
	// alone, not in the node's batches
	linked bool
	sched  renewals // its keep-alive schedule, guarded by the node's renewer
	done   chan struct{}

	mu      sync.Mutex
	nextSeq uint64
	pending map[uint64]struct{} // requests whose reply may still be needed
	waiters map[uint64]*waiter  // Acquire and Campaign calls by request number
	grants  map[uint64]*grant   // locks and leaderships held, by token
	lease   lease               // give up at its deadline
	acked   time.Time           // send time (clock.Now) of the last keep-alive acknowledged
	timer   clock.Timer         // fires at the lease's deadline, by the runtime's clock
	err     error

	// resume is the ID of the ResumeSession attempt that has not been
	// applied yet, 0 once it has (or for a session this process opened).
	resume atomic.Uint64

	pause atomic.Pointer[pause] // tests only: see pause.go
}

// waiter is one Acquire or Campaign call waiting for its grant.
type waiter struct {
	ready   chan struct{} // closed when granted
	grant   *grant
	maxHold time.Duration // WithMaxHold's; 0: none
	sent    clock.Instant // when the request was sent, by the boot clock
}

// heldSince is a time, by the holder's boot clock, before the group applied
// any entry this replica has not applied yet: the send of the last
// keep-alive (or open, or resume) acknowledged. This replica applies the
// log in order and a proposal returns only once applied here, so an entry
// applied after it (a grant out of the queue, say) was committed after that
// send, and every replica's clock started on it later. Call it on the apply
// goroutine, as the entry is reported.
func (s *Session) heldSince() clock.Instant {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease.deadline.Add(-s.lease.life)
}

// check validates the options and fills in the default margin.
func (o *sessionOptions) check() error {
	if err := checkTTL(o.ttl); err != nil {
		return err
	}
	if o.margin == 0 {
		o.margin = o.ttl / 5
	}
	// Beyond TTL/2 the deadline a keep-alive earns (TTL − margin after its
	// send) leaves too little of the period TTL/3 for its commit: at a margin
	// of 2TTL/3 none at all, and the session gives itself up on a healthy
	// group.
	if o.margin < 0 || o.margin > o.ttl/2 {
		return fmt.Errorf("%w: safety margin %v must lie in (0, %v], half the TTL", ErrInvalidTTL, o.margin, o.ttl/2)
	}
	if o.delay < 0 || o.delay > MaxLockDelay {
		return fmt.Errorf("%w: %v must lie in [0, %v]", ErrInvalidLockDelay, o.delay, MaxLockDelay)
	}
	return nil
}

// NewSession opens a session on the group, owned by this node.
func (n *Node) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: n.cfg.SessionTTL}
	for _, f := range opts {
		f(&o)
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	if o.resume.session != 0 {
		s, err := n.ResumeSession(ctx, o.resume, opts...)
		if !errors.Is(err, ErrSessionExpired) {
			return s, err
		}
		n.log.Info("fencelock: the session to resume is over; opening a new one", "session", o.resume.session)
	}
	c := n.cfg.clock
	sent, sentAt := clock.Boot(c), c.Now()
	// The nonce identifies retries of this open, and is the secret that
	// lets a restarted holder resume the session (ResumeToken): from
	// crypto/rand, never 0.
	nonce := randomID()
	res, err := n.r.Propose(ctx, fsm.Command{
		Kind:  fsm.KindOpenSession,
		Nonce: nonce,
		TTL:   uint64(o.ttl),
		Owner: n.cfg.ReplicaID,
		Delay: uint64(o.delay),
	})
	if err != nil {
		return nil, err
	}
	if res.Status == fsm.LimitExceeded {
		return nil, fmt.Errorf("open session: %w", limitError(res.Value))
	}
	if res.Status != fsm.OK {
		return nil, fmt.Errorf("fencelock: open session: %v", res.Status)
	}
	// The group's timer may have started when the first attempt was applied,
	// so the holder's deadline counts from the first send. If retries took
	// long, renew at once rather than start with a session close to its end.
	if clock.Boot(c).Sub(sent) > o.ttl/3 {
		renewed, renewedAt := clock.Boot(c), c.Now()
		ka, err := n.r.Propose(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: res.Value, Floor: 1})
		if err != nil {
			return nil, err
		}
		if ka.Status != fsm.OK {
			return nil, fmt.Errorf("%w: before its first renewal", ErrSessionExpired)
		}
		sent, sentAt = renewed, renewedAt
	}
	s := n.newSession(res.Value, nonce, o)
	s.lease.deadline = sent.Add(o.ttl - o.margin)
	s.acked = sentAt
	if err := n.startSession(s, sent, false); err != nil {
		return nil, err
	}
	return s, nil
}

// newSession makes the holder's side of session id, opened with nonce.
func (n *Node) newSession(id, nonce uint64, o sessionOptions) *Session {
	commit := commitFunc(n.r.Propose)
	if o.commit != nil {
		commit = o.commit(commit)
	}
	return &Session{
		n: n, id: id, nonce: nonce, external: o.external, ttl: o.ttl, margin: o.margin, clock: n.cfg.clock, commit: commit,
		linked:  o.commit != nil,
		done:    make(chan struct{}),
		nextSeq: 1,
		pending: make(map[uint64]struct{}),
		waiters: make(map[uint64]*waiter),
		grants:  make(map[uint64]*grant),
		lease:   lease{life: o.ttl - o.margin},
	}
}

// startSession makes s live on this node: its events reach it, its
// deadline timer runs and its keep-alives start a period after sent. With
// registered, s is in n.sessions already (a resume registers first).
func (n *Node) startSession(s *Session, sent clock.Instant, registered bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return ErrClosed
	}
	if !registered {
		n.sessions[s.id] = s
	}
	s.mu.Lock()
	s.timer = s.clock.AfterFunc(s.lease.deadline.Sub(clock.Boot(s.clock)), s.checkDeadline)
	s.mu.Unlock()
	if !s.external { // else KeepAlive renews it (external.go)
		n.renew.add(s, sent)
	}
	return nil
}

// ended reports whether the session is over for its holder.
func (s *Session) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// ID returns the session's ID, unique in the group for good.
func (s *Session) ID() uint64 { return s.id }

// TTL returns the session's time to live.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session is over for its holder: closed, expired,
// not renewed in time, or its node closed. Every lock and every leadership it
// held is lost then.
//
// Done (like Err, Lock.Done and Lock.Err) also checks the deadline by the
// holder's clock when called, so a process that wakes from a pause longer
// than the TTL (or, on Linux, a machine that wakes from a suspend) finds it
// closed on its first look, without waiting for its timers: the runtime's
// timers do not count suspended time, and fire late after a suspend. A
// goroutine that only waits on Done sees it close within a keep-alive period
// of waking, when the node's renewer next looks.
func (s *Session) Done() <-chan struct{} {
	s.poll()
	return s.done
}

// Err returns nil before Done is closed and why the session ended after:
// ErrSessionExpired, ErrSessionClosed or ErrClosed.
func (s *Session) Err() error {
	s.poll()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// poll ends the session if its deadline has passed.
func (s *Session) poll() { s.pollAt(clock.Boot(s.clock)) }

// pollAt ends the session if its deadline has passed at now, by the boot
// clock (the renewer reads it once for all its sessions: on Linux it is a
// system call).
func (s *Session) pollAt(now clock.Instant) {
	s.mu.Lock()
	over := s.err == nil && !s.isPaused() && !s.lease.live(now)
	s.mu.Unlock()
	if over && s.end(ErrSessionExpired) {
		s.n.log.Warn("fencelock: session not renewed in time; its holder gave it up", "session", s.id, "ttl", s.ttl)
		s.n.goBackground(s.closeAtGroup)
	}
}

// Close ends the session at the group, releasing all its locks (each passes
// to the head of its queue) in one step. If ctx ends first, the session is
// still over for its holder, and the group frees its locks once it can or
// when its TTL runs out. Closing a session that is over returns nil.
func (s *Session) Close(ctx context.Context) error {
	if s.Err() != nil {
		return nil
	}
	_, err := s.n.r.Propose(ctx, fsm.Command{Kind: fsm.KindCloseSession, Session: s.id, Floor: s.floor()})
	s.end(ErrSessionClosed)
	if err != nil {
		s.n.goBackground(s.closeAtGroup)
		return err
	}
	s.n.forget(s)
	return nil
}

// renew sends one keep-alive now; on success the holder's deadline moves to
// at least its send time + TTL − margin.
func (s *Session) renew(ctx context.Context) error {
	return s.renewAt(ctx, clock.Boot(s.clock), s.clock.Now())
}

// renewAt sends one keep-alive, sent at sent by the boot clock and at at by
// clock.Now, and extends the holder's deadline when it is acknowledged.
func (s *Session) renewAt(ctx context.Context, sent clock.Instant, at time.Time) error {
	// Past sent + TTL − margin its acknowledgement would extend nothing, and
	// the newer keep-alives in flight are the ones that can still help.
	ctx, cancel := context.WithTimeout(ctx, s.ttl-s.margin)
	defer cancel()
	res, err := s.commit(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: s.id, Floor: s.floor()})
	switch {
	case err != nil:
		return err
	case res.Status == fsm.UnknownSession:
		s.expired()
		return ErrSessionExpired
	case res.Status != fsm.OK:
		return fmt.Errorf("fencelock: keep-alive: unexpected reply %v", res.Status)
	}
	s.extend(sent, at)
	return nil
}

func (s *Session) extend(sent clock.Instant, at time.Time) {
	s.mu.Lock()
	s.lease.extend(sent)
	if at.After(s.acked) {
		s.acked = at
	}
	s.mu.Unlock()
}

// checkDeadline runs when the deadline timer fires: it re-arms for an
// extended deadline, or ends the session.
func (s *Session) checkDeadline() {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	if s.deadlineDuringPause() {
		s.mu.Unlock()
		return
	}
	if left := s.lease.deadline.Sub(clock.Boot(s.clock)); left > 0 {
		s.timer.Reset(left)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if s.end(ErrSessionExpired) {
		s.n.log.Warn("fencelock: session not renewed in time; its holder gave it up", "session", s.id, "ttl", s.ttl)
		s.n.goBackground(s.closeAtGroup)
	}
}

// closeAtGroup closes a session its holder gave up, so that its locks free
// now rather than when the group's timer runs out.
func (s *Session) closeAtGroup() {
	defer s.n.forget(s)
	if !s.waitThawed(nil) {
		return
	}
	_, _ = s.commit(s.n.ctx, fsm.Command{Kind: fsm.KindCloseSession, Session: s.id, Floor: s.floor()})
}

// expired ends the session after the group said it does not know it.
func (s *Session) expired() {
	s.end(ErrSessionExpired)
	s.n.forget(s)
}

// end makes the session over for its holder; it reports whether this call
// ended it.
func (s *Session) end(err error) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	s.err = err
	close(s.done)
	if s.timer != nil {
		s.timer.Stop()
	}
	grants := s.grants
	s.grants = make(map[uint64]*grant)
	s.mu.Unlock()
	for _, g := range grants {
		g.lose(err)
	}
	return true
}

// call proposes cmd as the session's next numbered request that waits for
// nothing but its reply (Release, Resign, Proclaim): it numbers it, and the
// request holds the floor back until the reply is in.
func (s *Session) call(ctx context.Context, cmd fsm.Command) (fsm.Result, error) {
	s.mu.Lock()
	seq := s.nextSeq
	s.nextSeq++
	s.pending[seq] = struct{}{}
	s.mu.Unlock()
	defer s.finish(seq)
	cmd.Session, cmd.Seq, cmd.Floor = s.id, seq, s.floor()
	return s.n.r.Propose(ctx, cmd)
}

// replied records that the reply to request seq arrived; the request may
// still wait for a grant.
func (s *Session) replied(seq uint64) {
	s.mu.Lock()
	delete(s.pending, seq)
	s.mu.Unlock()
}

// finish ends request seq.
func (s *Session) finish(seq uint64) {
	s.mu.Lock()
	delete(s.pending, seq)
	delete(s.waiters, seq)
	s.mu.Unlock()
}

// floor is the lowest request number whose reply may still be needed; the
// group forgets replies below it and ignores requests below it.
func (s *Session) floor() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.nextSeq
	for seq := range s.pending {
		f = min(f, seq)
	}
	return f
}
