package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/lockapi"
)

// now reads the clock the lease is timed on, as the embedded session's: the
// boot clock (CLOCK_BOOTTIME on Linux), which counts a suspend where Go's
// monotonic clock stops; a deadline on the latter would move later by every
// suspend, past the moment the group frees the locks.
func now() clock.Instant { return clock.Boot(clock.Real) }

// maxSleep caps every wait for the deadline: the runtime's timers run on
// the monotonic clock and fire late after a suspend, so the deadline is
// re-checked on the boot clock at least this often.
const maxSleep = 250 * time.Millisecond

// TTL bounds, as the library's (WithTTL).
const (
	minTTL = 100 * time.Millisecond
	maxTTL = 24 * time.Hour
)

// Session is a session of the group held through the API: the remote
// counterpart of *fencelock.Session, with its methods' names and meanings.
// It heartbeats on a goroutine of its own, to whichever endpoint answers.
//
// The holder stops first: with t the send time of the last heartbeat (or
// the create) a replica answered OK, Done closes and Err returns
// ErrSessionExpired at t + lease_ms by this process's boot clock unless a
// later heartbeat is answered first, even while no endpoint answers; the
// replica gives the session up only a margin later. A grant's answer
// (Acquire, Campaign) can bring that deadline earlier: see LeaseLeft. A
// session that is done stays done; open a new one.
//
// Its methods are safe for concurrent use.
type Session struct {
	c      *Client
	id     uint64
	secret string
	ttl    time.Duration
	stop   chan struct{} // closed by end: stops the heartbeat loop
	// reperiod wakes the heartbeat loop when SetHeartbeatPeriod changed
	// every, lowered when a grant's lease brought the deadline earlier.
	reperiod, lowered chan struct{}
	// secretHeader is []string{secret}: the SecretHeader value of the
	// calls that ask or give back a grant, one slice for all (a request's
	// headers are only read).
	secretHeader []string

	mu       sync.Mutex
	lease    time.Duration // the last lease_ms answered
	deadline clock.Instant // the holder's: the last OK send + lease
	lastOK   clock.Instant // the send of the last heartbeat (or create) answered OK
	// capped: a grant's answer bounded the deadline by capDL (the
	// earliest such bound), and a heartbeat sent before capAt (when the
	// last such answer arrived) may have left the grant's part out, so
	// it moves the deadline no later than capDL. The first heartbeat
	// sent after capAt and answered OK lifts the bound.
	capped       bool
	capDL, capAt clock.Instant
	every        time.Duration // between heartbeats
	onBeat       func(err error, left time.Duration)
	done         chan struct{}
	err          error
	grants       map[*grant]struct{}
	// busy holds a slot per lock (and election) name this session has a
	// call or a grant on: the API keeps one request per session and name
	// (a second acquire reports the first's state), so a second Acquire of
	// the same name waits here for the first's grant to end, as a second
	// embedded waiter of one session waits behind the first.
	busy map[string]chan struct{}
}

// NewSession opens a session on the group through the first endpoint that
// answers, and starts its heartbeats.
//
// It takes the root package's session options that the API serves:
// fencelock.WithTTL (default: the replica's --ttl) and
// fencelock.WithSessionName (default: this process's "host:pid"). Options
// the API does not serve (WithSafetyMargin, WithLockDelay, WithResume,
// WithExternalKeepAlive) fail with an error wrapping errors.ErrUnsupported
// rather than being ignored (a remote session resumes by
// Client.ResumeSession); a bad TTL or name fails with
// fencelock.ErrInvalidTTL or ErrInvalidSessionName before any call. A
// create whose answer was lost and that was sent again leaves a session
// nobody heartbeats, which the group expires one TTL later.
func (c *Client) NewSession(ctx context.Context, opts ...lockapi.SessionOption) (*Session, error) {
	o := lockapi.ReadSessionOptions(opts...)
	switch {
	case o.Margin != 0:
		return nil, fmt.Errorf("%w: WithSafetyMargin (the HTTP API fixes the margin at TTL/5)", errors.ErrUnsupported)
	case o.LockDelay != 0:
		return nil, fmt.Errorf("%w: WithLockDelay through the HTTP API", errors.ErrUnsupported)
	case o.Resume:
		return nil, fmt.Errorf("%w: WithResume through the HTTP API: resume with Client.ResumeSession and the client.ResumeToken"+
			" of the session's Resume (a lockapi.ResumeToken is an embedded session's)", errors.ErrUnsupported)
	case o.ExternalKeepAlive:
		return nil, fmt.Errorf("%w: WithExternalKeepAlive (a client session heartbeats on its own)", errors.ErrUnsupported)
	}
	if o.TTL != 0 && (o.TTL < minTTL || o.TTL > maxTTL) {
		return nil, fmt.Errorf("%w: %v outside [%v, %v]", lockapi.ErrInvalidTTL, o.TTL, minTTL, maxTTL)
	}
	name := o.Name
	if !o.Named {
		name = defaultName()
	}
	if err := lockapi.CheckSessionName(name); err != nil {
		return nil, err
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w: the client was closed", lockapi.ErrClosed)
	}
	type create struct {
		TTLMillis int64  `json:"ttl_ms,omitempty"`
		Name      string `json:"name,omitempty"`
	}
	sent := now()
	var a sessionAnswer
	if err := c.call(ctx, callSpec{method: "POST", path: "/v1/sessions", in: create{o.TTL.Milliseconds(), name}}, &a); err != nil {
		return nil, err
	}
	if a.SessionID == 0 || a.SessionSecret == "" || a.TimeoutMS <= 0 || a.LeaseMS <= 0 || a.LeaseMS > a.TimeoutMS {
		return nil, &badAnswerError{endpoint: "create", err: fmt.Errorf("session answer without an ID, a secret or a sane lease: %+v",
			sessionAnswer{SessionID: a.SessionID, TimeoutMS: a.TimeoutMS, LeaseMS: a.LeaseMS})}
	}
	return c.start(uint64(a.SessionID), a.SessionSecret, time.Duration(a.TimeoutMS)*time.Millisecond,
		time.Duration(a.LeaseMS)*time.Millisecond, sent)
}

// start makes the holder's Session of a session the group answered for, by
// a call sent at sent (the create, or the heartbeat of a resume) with
// lease: its deadline is sent + lease, and its heartbeat loop starts. It
// fails with ErrClosed if the client closed meanwhile.
func (c *Client) start(id uint64, secret string, ttl, lease time.Duration, sent clock.Instant) (*Session, error) {
	s := &Session{c: c, id: id, secret: secret, secretHeader: []string{secret}, ttl: ttl, lease: lease,
		lastOK: sent, stop: make(chan struct{}), reperiod: make(chan struct{}, 1), lowered: make(chan struct{}, 1), done: make(chan struct{}),
		grants: map[*grant]struct{}{}, busy: map[string]chan struct{}{}}
	s.deadline = sent.Add(s.lease)
	// The API's lease is TTL − 2·margin (3/5 of the TTL): a period of a
	// third of it leaves two more heartbeats after one that went
	// unanswered before the lease runs out, where TTL/3 would leave none.
	s.every = max(min(s.ttl/3, s.lease/3), 10*time.Millisecond)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		s.end(fmt.Errorf("%w: the client was closed", lockapi.ErrClosed))
		return nil, lockapi.ErrClosed
	}
	c.sessions[s] = struct{}{}
	c.wg.Add(1)
	c.mu.Unlock()
	go s.run()
	return s, nil
}

// defaultName is "host:pid", as the library's default session name.
var defaultName = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	name := fmt.Sprintf("%s:%d", host, os.Getpid())
	if len(name) > lockapi.MaxSessionNameLen {
		name = strings.ToValidUTF8(name[:lockapi.MaxSessionNameLen], "")
	}
	return name
})

// ID returns the session's ID, the API's session_id: unique in the default
// group for good.
func (s *Session) ID() uint64 { return s.id }

// TTL returns the session's time to live, as the replica set it.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session is over for its holder: closed, expired
// or not renewed within its lease by this process's clock, ended at the
// group (a heartbeat answered 404), or its Client closed. Every lock and
// leadership it held is lost then.
//
// Done (like Err, Lock.Done and Lock.Err) also checks the deadline when
// called, so a process that wakes from a pause past it finds it closed on
// its first look.
func (s *Session) Done() <-chan struct{} {
	s.check()
	return s.done
}

// Err returns nil before Done is closed and why the session ended after:
// ErrSessionExpired, ErrSessionClosed or ErrClosed (wrapped, with why).
func (s *Session) Err() error {
	s.check()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close ends the session at the group, releasing all its locks, each to the
// head of its queue. The session is over for its holder at once (Err
// ErrSessionClosed); if no endpoint confirms the end before ctx ends, the
// error says so and the group frees the locks when the TTL runs out.
// Closing a session that is over returns nil.
func (s *Session) Close(ctx context.Context) error {
	return s.close(ctx, lockapi.ErrSessionClosed)
}

func (s *Session) close(ctx context.Context, why error) error {
	s.check()
	s.mu.Lock()
	over := s.err != nil
	s.mu.Unlock()
	if over {
		return nil
	}
	// Over for the holder first: nothing may act on its grants while the
	// delete is in flight.
	s.end(why)
	err := s.c.call(ctx, callSpec{method: "DELETE", path: s.path(), secret: s.secret, session: true}, nil)
	if errors.Is(err, lockapi.ErrSessionExpired) {
		return nil // ended at the group already
	}
	return err
}

func (s *Session) path() string { return "/v1/sessions/" + strconv.FormatUint(s.id, 10) }

// check ends the session if its deadline passed by the holder's clock.
func (s *Session) check() {
	s.mu.Lock()
	passed := s.err == nil && !now().Before(s.deadline)
	lease, byGrant := s.lease, s.capped && s.deadline == s.capDL
	s.mu.Unlock()
	switch {
	case passed && byGrant:
		s.end(fmt.Errorf("%w: a grant's lease ran out by this process's clock before a heartbeat renewed the session in its group",
			lockapi.ErrSessionExpired))
	case passed:
		s.end(fmt.Errorf("%w: no heartbeat answered within the lease (%v) by this process's clock", lockapi.ErrSessionExpired, lease))
	}
}

// grantLease takes the lease_ms of a grant's answer, to a call sent at
// sent and answered at got: the grant lives in the session's part in its
// group, which lasts no longer than sent + lease, and which a heartbeat
// could leave out while it held nothing. The deadline becomes the earlier
// of the two, and a heartbeat sent before got moves it no later than that
// (see answer); the heartbeat loop is woken to time the new deadline, and
// to heartbeat at once if it comes before the next heartbeat is due.
func (s *Session) grantLease(sent, got clock.Instant, lease time.Duration) {
	d := sent.Add(max(lease, 0))
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	if !s.capped || d.Before(s.capDL) {
		s.capDL = d
	}
	s.capped = true
	if got.After(s.capAt) {
		s.capAt = got
	}
	lowered := d.Before(s.deadline)
	if lowered {
		s.deadline = d
	}
	s.mu.Unlock()
	if lowered {
		select {
		case s.lowered <- struct{}{}:
		default: // a wake-up is pending already: it reads the deadline
		}
	}
}

// renewShort takes a grant's lease, to a call sent at sent and answered at
// got, and returns the bound grantLease is to apply. A lease that ends
// before a heartbeat as slow as that call would be answered (lease_ms 0
// promises nothing at all) would end the session before the heartbeat
// loop could renew the grant's part: a heartbeat is sent now instead, and
// if it is answered OK with a lease its send and lease bound the grant
// (the part held the grant when it was renewed). Else the grant's own
// lease stands, and the session ends by it.
func (s *Session) renewShort(ctx context.Context, sent, got clock.Instant, lease time.Duration) (clock.Instant, clock.Instant, time.Duration) {
	if sent.Add(lease).After(got.Add(got.Sub(sent))) {
		return sent, got, lease
	}
	b := s.heartbeat(ctx, s.period(), now())
	s.take(b)
	if b.err != nil || b.a.LeaseMS <= 0 {
		return sent, got, lease
	}
	return b.sent, now(), time.Duration(b.a.LeaseMS) * time.Millisecond
}

// beatSoon reports whether the deadline is bounded by a grant's lease and
// comes before a heartbeat every from now would be answered, while the
// last heartbeat, sent at last, went out before that grant's answer
// arrived (so it cannot lift the bound): one is sent at once rather than
// on the schedule. Once per grant: a failed one is not sent again sooner
// than the schedule's.
func (s *Session) beatSoon(every time.Duration, last clock.Instant) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err == nil && s.capped && last.Before(s.capAt) && s.deadline.Sub(now()) < every
}

// end makes the session over for its holder, with why, and every grant it
// holds with it. The first reason stays.
func (s *Session) end(why error) {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = why
	// Every grant is over before the session is: a holder that finds the
	// session's Done closed finds its locks' closed too, never open a
	// moment longer (the session's lock, then each grant's, is the only
	// order the two are taken in).
	var ended []*grant
	for g := range s.grants {
		if g.over(why) {
			ended = append(ended, g)
		}
	}
	s.grants = nil
	close(s.done)
	close(s.stop)
	s.mu.Unlock()
	for _, g := range ended {
		g.free() // takes the session's lock
	}
	s.c.mu.Lock()
	delete(s.c.sessions, s)
	s.c.mu.Unlock()
}

// margin is the session's safety margin, which the API fixes at TTL/5.
func (s *Session) margin() time.Duration { return s.ttl / 5 }

// left is the time left of the lease by the holder's clock.
func (s *Session) left() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline.Sub(now())
}

// Lease returns the lease the last answered heartbeat (or the create)
// promised: how long after a heartbeat's send the session and its grants
// are sure to live, a margin short of the TTL.
func (s *Session) Lease() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lease
}

// LeaseLeft returns the time left, by this process's boot clock, until the
// holder's deadline: Lease after the send of the last heartbeat (or the
// create) a replica answered OK, or, if earlier, the lease_ms of a grant's
// answer after that call's send (a grant in a group the heartbeats could
// not renew while the session held nothing there lasts only as long as
// the session's part in that group). An answered heartbeat moves it later,
// but past a grant's bound only if it was sent after that grant's answer
// arrived (it then renewed the grant's group); never once the session is
// over. At 0 or below Done is closed (LeaseLeft checks it, as Done does).
// A process that must stop acting before the group may grant its locks to
// another stops by then.
func (s *Session) LeaseLeft() time.Duration {
	s.check()
	return s.left()
}

// MinHeartbeatPeriod is the shortest period SetHeartbeatPeriod takes.
const MinHeartbeatPeriod = 10 * time.Millisecond

// SetHeartbeatPeriod sets the time between heartbeats (by default a third
// of the lease), from the next one on; a heartbeat gives up after d or
// half the lease, whichever is longer, and shares that time among the
// endpoints, a hung one last. A shorter period leaves
// more heartbeats between one that went unanswered and the lease's end: a
// holder that stops a grace before the deadline wants (Lease − grace)/2 or
// less, so that one missed heartbeat never brings it there. The deadline's
// rule does not depend on it. It fails with fencelock.ErrInvalidConfig for
// d below MinHeartbeatPeriod or above half the lease (one missed heartbeat
// would then end the session), changing nothing.
func (s *Session) SetHeartbeatPeriod(d time.Duration) error {
	s.mu.Lock()
	if d < MinHeartbeatPeriod || d > s.lease/2 {
		lease := s.lease
		s.mu.Unlock()
		return fmt.Errorf("%w: heartbeat period %v outside [%v, %v] (half the lease)", lockapi.ErrInvalidConfig, d, MinHeartbeatPeriod, lease/2)
	}
	s.every = d
	s.mu.Unlock()
	select {
	case s.reperiod <- struct{}{}:
	default: // a wake-up is pending already: it reads the new period
	}
	return nil
}

// OnHeartbeat sets f (nil: none) to be called after each heartbeat's
// answer has been taken: err is nil when a replica answered OK (its
// lease_ms moved the deadline, unless it promised no lease), else why not
// (no endpoint answered, or the group refused it: then the session is
// over), and left is LeaseLeft after the answer. It is how a holder reports
// failing heartbeats while the lease runs down. f runs on the session's
// heartbeat goroutine: it must return quickly and must not call the
// session's blocking methods.
func (s *Session) OnHeartbeat(f func(err error, left time.Duration)) {
	s.mu.Lock()
	s.onBeat = f
	s.mu.Unlock()
}

// period returns the heartbeat period.
func (s *Session) period() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.every
}

type beat struct {
	sent clock.Instant
	a    sessionAnswer
	err  error
}

// run heartbeats every s.every until the session ends or the client closes,
// and ends the session at its deadline.
func (s *Session) run() {
	defer s.c.wg.Done()
	every := s.period()
	tick := time.NewTicker(every)
	defer tick.Stop()
	check := time.NewTimer(min(max(s.left(), 0), maxSleep))
	defer check.Stop()
	answers := make(chan beat, 1)
	inFlight := false
	// missed: a tick came while a heartbeat was out; again: it failed, so
	// the missed one goes out at once rather than a period later (a
	// heartbeat that tried every endpoint in vain took its whole budget,
	// half the lease, and the next tick may come too late).
	missed, again := false, false
	var last clock.Instant // the last heartbeat's send
	send := func() {
		inFlight = true
		last = now()
		s.c.wg.Add(1)  // run holds a count: Close waits for this one too
		every := every // the loop may change its own
		go func(sent clock.Instant) {
			defer s.c.wg.Done()
			answers <- s.heartbeat(s.c.ctx, every, sent)
		}(last)
	}
	for {
		select {
		case <-s.c.ctx.Done():
			return
		case <-s.stop:
			return
		case <-s.reperiod:
			if e := s.period(); e != every {
				every = e
				tick.Reset(every)
			}
		case <-s.lowered: // a grant's lease: the deadline is earlier
		case <-tick.C:
			if inFlight {
				missed = true
				break // the previous one is still out: its answer decides
			}
			send()
		case b := <-answers:
			inFlight = false
			s.take(b)
			again, missed = missed && b.err != nil, false
		case <-check.C:
		}
		s.check()
		left := s.left()
		if left <= 0 {
			return // check ended it
		}
		if !inFlight && (again || s.beatSoon(every, last)) {
			// A grant's lease ends before the next heartbeat is due, or a
			// failed heartbeat held back a tick: one sent now renews the
			// session (and a grant's group: the part holds the grant), as
			// the scheduled one would too late.
			again = false
			send()
		}
		check.Reset(min(left, maxSleep))
	}
}

// heartbeat sends one heartbeat, at sent, with a heartbeat period of every.
func (s *Session) heartbeat(ctx context.Context, every time.Duration, sent clock.Instant) beat {
	b := beat{sent: sent}
	// A heartbeat may take up to half the lease (a busy replica, a leader
	// change): the deadline counts from its send, the next waits for it,
	// and one given up sooner is cancelled at the replica too, so under
	// load none would renew the session. That budget is shared by every
	// endpoint (call's tryBound), a hung one tried last once it timed out:
	// a third of it each for three, which leaves a replica that forwards
	// to a hung owner the time to give up on it and adopt the session
	// (httpapi waits a quarter of the margin, TTL/20, for the owner).
	bound := max(every, s.Lease()/2)
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	b.err = s.c.call(ctx, callSpec{method: "POST", path: s.path() + "/heartbeat", secret: s.secret,
		session: true, attempt: bound}, &b.a)
	return b
}

// take takes a heartbeat's answer (answer), and tells OnHeartbeat's f.
func (s *Session) take(b beat) {
	s.answer(b)
	s.mu.Lock()
	f := s.onBeat
	s.mu.Unlock()
	if f != nil {
		s.check()
		f(b.err, s.left())
	}
}

// KeepAlive heartbeats now, off the schedule, and returns once the
// heartbeat is answered. It returns nil when a replica answered OK with a
// lease: everything the session holds was renewed, and the deadline
// (LeaseLeft) lies that lease after this call began, unless a grant
// answered meanwhile bounds it. Otherwise the deadline is unchanged and it
// fails: with the session's error (ErrSessionExpired) if the group says
// the session is over, else with an error that wraps
// fencelock.ErrUnavailable.
func (s *Session) KeepAlive(ctx context.Context) error {
	if err := s.Err(); err != nil {
		return err
	}
	b := s.heartbeat(ctx, s.period(), now())
	s.take(b)
	switch {
	case s.Err() != nil:
		return s.Err()
	case b.err != nil:
		if errors.Is(b.err, lockapi.ErrUnavailable) {
			return b.err
		}
		return fmt.Errorf("%w: heartbeat: %w", lockapi.ErrUnavailable, b.err)
	case b.a.LeaseMS <= 0:
		return fmt.Errorf("%w: the heartbeat was answered without a lease (groups not renewed: %v)",
			lockapi.ErrUnavailable, notRenewed(b.a.Leases))
	}
	return nil
}

// notRenewed names the groups a heartbeat's answer gives no lease, in
// order ("" is the default group).
func notRenewed(leases map[string]int64) []string {
	var out []string
	for g, ms := range leases {
		if ms <= 0 {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out
}

// answer takes a heartbeat's answer: a later deadline, or the session's
// end when the group says it is over.
func (s *Session) answer(b beat) {
	var e *Error
	if errors.As(b.err, &e) && (e.Code == "not_found" || e.Status == 404 || e.Status == 403) {
		// 404: the group ended the session (expired, deleted, revoked).
		// 403: the replica no longer accepts its secret or the token's
		// right to it: it cannot be renewed either way.
		s.end(fmt.Errorf("%w: the session ended at the group: %w", lockapi.ErrSessionExpired, b.err))
		return
	}
	if b.err != nil {
		return // the lease runs on from the last answered one
	}
	// lease_ms is what the answer promises for everything the session
	// holds, timed from this heartbeat's send; 0 promises nothing.
	lease := time.Duration(b.a.LeaseMS) * time.Millisecond
	if lease <= 0 || lease > s.ttl {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.lease = lease
	d := b.sent.Add(lease)
	if s.capped {
		if b.sent.Before(s.capAt) {
			// Sent before a grant's answer arrived: its round may have
			// left that grant's part out (it held nothing yet).
			if s.capDL.Before(d) {
				d = s.capDL
			}
		} else {
			s.capped = false // it renewed every part holding a grant
		}
	}
	if d.After(s.deadline) {
		s.deadline, s.lastOK = d, b.sent
	}
}

// acquireSlot waits until no other call or grant of this session uses name
// (kind "lock" or "election"), and takes the slot; try: do not wait, report
// false. The slot is given back by the returned func.
func (s *Session) acquireSlot(ctx context.Context, key string, try bool) (func(), bool, error) {
	for {
		s.mu.Lock()
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return nil, false, err
		}
		ch := s.busy[key]
		if ch == nil {
			mine := make(chan struct{})
			s.busy[key] = mine
			s.mu.Unlock()
			var once sync.Once
			return func() {
				once.Do(func() {
					s.mu.Lock()
					if s.busy[key] == mine {
						delete(s.busy, key)
					}
					s.mu.Unlock()
					close(mine)
				})
			}, true, nil
		}
		s.mu.Unlock()
		if try {
			return nil, false, nil
		}
		select {
		case <-ch:
		case <-s.done:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// add registers g as held by the session; false if the session is over (g
// is then ended with its reason).
func (s *Session) add(g *grant) bool {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		g.end(err)
		return false
	}
	s.grants[g] = struct{}{}
	s.mu.Unlock()
	return true
}

func (s *Session) remove(g *grant) {
	s.mu.Lock()
	delete(s.grants, g)
	s.mu.Unlock()
}
