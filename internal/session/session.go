// Package session is the client side of fencelock: everything a process
// keeps about its sessions, their requests, grants, keep-alives and
// watches, and the one home of routing. Package fencelock (the root) is
// its only caller and its front door: each public call folds its options
// and calls in here, where its arguments are checked, its name is taken to
// its group (`base@group`, SplitName and Host.Route), its command is built
// or its read made; this package proposes commands to and reads from the
// group through its Group (group.go: the role, whose two makers, a local
// shard and a mirror, live in internal/replica), and hears back from it on
// that group's Sink.
// The root never sees internal/fsm: the constants and views it publishes
// are named here (limits.go, views.go).
//
// # Roles
//
//	Group     a group's role (group.go): propose, read, stale read,
//	          membership, status (leader, group ID), background work; what
//	          is applied comes back on the group's Sink. A shard or a mirror
//	          in internal/replica; this package knows neither.
//	Host      one per fencelock.Node: the groups this process reaches
//	          (Groups, a Group each), a router per group, background work,
//	          Close.
//	router    one per group: replica.Sink for that group (events come
//	          back here, on its apply goroutine), the parts living in the
//	          group by session ID, the group's renewer, its election and
//	          lock watches, and the one route its parts' background
//	          commands take to the group's Group of the moment (a shard,
//	          or a mirror where this process does not run the group).
//	          (router.go, renew.go, watch.go, observe.go)
//	Session   one per fencelock.Session: its parts by group name, opened
//	          lazily, and the rule for when the whole session is over.
//	Part      the session in one group: its ID there, request numbers,
//	          pending requests, grants, lease and deadline, and its own
//	          lost signal (done/err). (part.go)
//	Grant     a lock or leadership granted to one request of a part; it
//	          points to its part, so a part's end ends only its grants.
//	          (grant.go, context.go)
//	request   the one skeleton of a numbered request (request.go).
//	Resume    what a resume token carries (a PartToken per part) and the
//	          taking back of every part (resume.go).
//	Testing   test hooks, reached through one accessor (testing.go,
//	          pause.go); the production path never branches on them.
//	tracing   a span per Request and GiveBack, a child span per proposal
//	          (trace.go); attributes only for a recording span.
//	contention  per router, atomics: wait and hold histograms, grants,
//	          timeouts, cancellations; per Host, the elections campaigned
//	          in and whether they are led (contention.go). Counted by the
//	          caller's side, read by the root's Stats.
//	front door  what each public call of the root does here: names.go
//	          (checking a name, SplitName, Route, Group), calls.go
//	          (Acquire, Campaign: their checks and commands), views.go
//	          (Inspect, Locks, Contended, Sessions, Election, Candidates,
//	          Elections, Ready: reads of a group's state), admin.go
//	          (Revoke, EndSession, Members), limits.go (the state
//	          machine's constants and formats, as the root publishes them).
//
// # Data flow
//
//	fencelock (root: API, options, public types)
//	     │ Session.Acquire(name, …),          ▲ Grant / Done / Err,
//	     │ Host.Inspect(name), …              │ views
//	     ▼ names.go: name -> group            │
//	  Session ──parts[group]──► Part ──► Group.Propose   (a shard or a mirror,
//	                             ▲                            │   internal/replica)
//	                             │                            │ applies (internal/fsm)
//	                             └── router (replica.Sink) ◄──┘ events of that group
//
// Calls flow down only; events come back up on one typed Sink per group,
// never through exported methods of the root.
//
// # The whole session
//
// A Session's default part (the group named "") is opened by Open, as
// fencelock.NewSession always did: its ID is Session.ID, and the open's
// errors are NewSession's. A part in another group is opened by the first
// call that names that group. The session as a whole ends when it is
// closed, when the Host closes, or when its default part ends; then every
// part ends with the same error. A part in another group that ends (its
// group lost quorum for longer than the TTL, an operator ended it) ends
// only the grants held there; the next call naming that group opens a new
// part.
package session

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/seeded"
)

// Groups resolves a group's name to the Group this process reaches it
// through; "" is the default group. Group returns nil (a nil interface) for
// a group it does not know; Names lists the groups it runs, the default group first.
// fencelock.Node implements it.
type Groups interface {
	Group(name string) Group
	// Lookup is Group for a call that names the group: a group this host
	// has not started yet but the group table has (created a moment ago)
	// is waited for, and the error says why there is none (wrapping
	// replica.ErrUnknownGroup, or replica.ErrGroupMoved).
	Lookup(ctx context.Context, name string) (Group, error)
	Names() []string
	// Reachable lists every group a call here can name (replica.Host.
	// Reachable): Names, and the group table's others, read then.
	Reachable(ctx context.Context) ([]string, error)
}

// Config is what a Host needs of its Node.
type Config struct {
	ReplicaID       uint64
	ProposalTimeout time.Duration
	RTT             time.Duration
	Clock           clock.Clock
	Log             *slog.Logger
	Groups          Groups
	// UnknownGroup is the error (wrapped) of a call naming a group Groups
	// does not know: the root's sentinel.
	UnknownGroup error
	// Tracer makes the spans of Acquire, Campaign, Release and Resign
	// (trace.go); nil: none recorded.
	Tracer trace.Tracer
	// Tracing reports whether Tracer may record a span now (see
	// Tracing); nil: it may. While it says no, a call whose context
	// carries no recording span makes no span at all.
	Tracing func() bool
}

// Host is the client-side machinery of one fencelock.Node.
type Host struct {
	cfg    Config
	log    *slog.Logger
	tracer trace.Tracer
	// tracing is Config.Tracing, or always true.
	tracing func() bool
	ctx     context.Context // cancelled by Close: bounds background work
	cancel  context.CancelFunc
	closed  chan struct{}

	mu       sync.RWMutex
	closing  bool
	closeErr error // Close's error: what a part's call returns from then on
	routers  map[string]*router
	sessions map[*Session]struct{} // open, to end on Close

	leading leading // elections campaigned in (contention.go)
}

// NewHost makes the machinery of a Node; its routers are made by Sink.
func NewHost(cfg Config) *Host {
	h := &Host{cfg: cfg, log: cfg.Log, tracer: cfg.Tracer, closed: make(chan struct{}),
		routers: make(map[string]*router), sessions: make(map[*Session]struct{})}
	if h.tracer == nil {
		h.tracer = noop.NewTracerProvider().Tracer("")
		h.tracing = func() bool { return false }
	}
	if h.tracing == nil {
		h.tracing = cfg.Tracing
	}
	if h.tracing == nil {
		h.tracing = func() bool { return true }
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// Sink returns the Sink of group: the replica of that group reports what it
// applies through it. Call it before the replica starts.
func (h *Host) Sink(group string) replica.Sink { return h.router(group) }

// router returns group's router, made on first use.
func (h *Host) router(group string) *router {
	h.mu.Lock()
	defer h.mu.Unlock()
	rt := h.routers[group]
	if rt == nil {
		rt = newRouter(h, group)
		h.routers[group] = rt
	}
	return rt
}

// routerOf returns group's router, nil if it has none.
func (h *Host) routerOf(group string) *router {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.routers[group]
}

// Close ends every session of the Host with ErrClosed (without closing
// them at their groups, as a crash would not) and cancels background work.
// The replicas' Close waits for that work.
func (h *Host) Close(err error) {
	h.mu.Lock()
	if h.closing {
		h.mu.Unlock()
		return
	}
	h.closing, h.closeErr = true, err
	sessions := make([]*Session, 0, len(h.sessions))
	for s := range h.sessions {
		sessions = append(sessions, s)
	}
	routers := make([]*router, 0, len(h.routers))
	for _, rt := range h.routers {
		routers = append(routers, rt)
	}
	h.mu.Unlock()
	close(h.closed)
	h.cancel()
	for _, s := range sessions {
		s.end(err, leaveParts)
	}
	for _, rt := range routers { // parts whose session had ended already
		for _, p := range rt.localParts() {
			p.end(err)
		}
	}
}

// Context is cancelled when the Host closes.
func (h *Host) Context() context.Context { return h.ctx }

// Go runs f in the background on group's replica unless the Host is
// closing; the replica's Close waits for it.
func (h *Host) Go(group string, f func()) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closing {
		return false
	}
	r := h.cfg.Groups.Group(group)
	return r != nil && r.Go(f)
}

// Options are a session's settings, checked by the caller.
type Options struct {
	TTL, Margin time.Duration
	Delay       time.Duration // lock-delay
	External    bool          // renewed only by KeepAlive
	// Name is the session's name, carried by the open of every part so
	// that each group shows the same holder; checked by the caller
	// (fsm.CheckSessionName).
	Name string
	// Route wraps how the session's background commands (keep-alives, the
	// close of a part its holder gave up) reach a group: tests delay them.
	Route func(Route) Route
	// Nonce, if set, gives the nonce each part opens with (its resume
	// secret) from its group's name, instead of a random one: the HTTP
	// service derives it from its client's secret, so that any replica
	// given that secret can resume the session (see Adopt). It must never
	// return 0, and two sessions must never share a nonce in a group.
	Nonce func(group string) uint64
}

// Session is one process-wide session: a part per group it has used.
type Session struct {
	h     *Host
	o     Options
	owner any // the root's *Session
	done  chan struct{}

	mu      sync.Mutex
	parts   map[string]*Part
	def     *Part                    // the default group's part: never replaced
	opening map[string]chan struct{} // a part being opened, closed when done
	err     error
}

func (h *Host) newSession(o Options, owner any) *Session {
	return &Session{h: h, o: o, owner: owner, done: make(chan struct{}),
		parts: make(map[string]*Part), opening: make(map[string]chan struct{})}
}

// Open opens a session: its default part, at once. owner is the root's
// wrapper, returned by Owner.
func (h *Host) Open(ctx context.Context, o Options, owner any) (*Session, error) {
	s := h.newSession(o, owner)
	p, err := s.openPart(ctx, "")
	if err != nil {
		return nil, err
	}
	if err := s.register(p); err != nil {
		return nil, err
	}
	return s, nil
}

// setDefault makes p s's default part: from then on p's end is s's. Call it
// before p can hear from its group, so that no end of p goes unseen.
func (s *Session) setDefault(p *Part) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.def = p
}

// register makes s, whose default part p is live, known to the Host, which
// ends it on Close.
func (s *Session) register(p *Part) error {
	s.mu.Lock()
	s.parts[""] = p
	over := s.err != nil // p ended already, and s with it
	s.mu.Unlock()
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	if s.h.closing {
		return replica.ErrClosed
	}
	if !over {
		s.h.sessions[s] = struct{}{}
	}
	return nil
}

// Owner returns the root's wrapper of s.
func (s *Session) Owner() any { return s.owner }

// ID returns the session's ID in the default group.
func (s *Session) ID() uint64 { return s.def.id }

// TTL returns the session's time to live.
func (s *Session) TTL() time.Duration { return s.o.TTL }

// SafetyMargin returns the session's safety margin.
func (s *Session) SafetyMargin() time.Duration { return s.o.Margin }

// Done is closed when the whole session is over (see the package doc). It
// first checks the default part's deadline by the holder's clock.
func (s *Session) Done() <-chan struct{} {
	s.settle()
	return s.done
}

// Err returns nil before Done is closed and why the session ended after.
func (s *Session) Err() error {
	s.settle()
	select {
	case <-s.done:
	default:
		return nil // over, perhaps, but its parts are still ending (end)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// settle checks the default part's deadline by the holder's clock and,
// once that part has ended, here or on another goroutine (the renewer, or
// a lock's own look at its deadline), waits for the session's end that
// follows it: local work (every part and grant ended, then done closed;
// what reaches the groups runs in the background), so that a holder that
// found a lock over because its session ended finds the session over too,
// at its first look.
func (s *Session) settle() {
	s.def.poll()
	if s.def.ended() {
		<-s.done
	}
}

// What a session's end does at the groups of the parts it ends.
type partsAtGroups int

const (
	// leaveParts: nothing; they may be another copy's (Abandon), or a
	// restarted process's to resume (the Host's close), or Close closed
	// them already.
	leaveParts partsAtGroups = iota
	// forgetParts: nothing at the groups, and the parts are forgotten
	// here: the default part's group refused this copy (the session is
	// over, or another replica adopted it), so the others are not this
	// copy's to close; they end by their groups' expiry, or live on with
	// the adopter.
	forgetParts
	// closeParts: the default part's end applied at its group (nobody can
	// adopt the session any more): close the others at theirs.
	closeParts
	// closeDefaultFirst: the default part ended here alone: close it at
	// its group first, and the others only once that applied. Closing
	// them first would free locks at their groups while another replica
	// that adopted the session tells its client it holds them.
	closeDefaultFirst
)

// end makes the whole session over with err: every part ends with it, and
// what happens at their groups is at's. It reports whether this call ended
// it.
func (s *Session) end(err error, at partsAtGroups) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	s.err = err
	parts := make([]*Part, 0, len(s.parts))
	for _, p := range s.parts {
		parts = append(parts, p)
	}
	s.mu.Unlock()
	s.h.mu.Lock()
	delete(s.h.sessions, s)
	s.h.mu.Unlock()
	// Every part, and every grant with it, ends before Done closes: a
	// holder that finds the session over finds its locks over too, in
	// every group. (A part's end tells the session, which is over already.)
	s.mu.Lock()
	def := s.def
	s.mu.Unlock()
	var ended []*Part
	for _, p := range parts {
		if p.end(err) && p != def {
			ended = append(ended, p)
		}
	}
	switch at {
	case forgetParts:
		for _, p := range ended {
			p.rt.forget(p)
		}
	case closeParts:
		for _, p := range ended {
			p.rt.goBackground(p.closeAtGroup)
		}
	case closeDefaultFirst:
		if def == nil || !def.rt.goBackground(func() {
			applied := def.closeAtGroupApplied()
			for _, p := range ended {
				if applied {
					p.closeAtGroup()
				} else {
					p.rt.forget(p)
				}
			}
		}) {
			for _, p := range ended {
				p.rt.forget(p)
			}
		}
	}
	close(s.done)
	return true
}

// partEnded is told by a part that it ended: the default part's end is the
// session's.
func (s *Session) partEnded(p *Part, err error) {
	s.mu.Lock()
	def := s.def
	s.mu.Unlock()
	if p == def {
		switch p.endedAs.Load() {
		case endedThere:
			s.end(err, closeParts)
		case endedRefused:
			s.end(err, forgetParts)
		default:
			s.end(err, closeDefaultFirst)
		}
	}
}

// Part returns s's live part in group, opening it if s has none there yet
// (or its last one there ended): one round trip, shared by the calls that
// need it at once.
func (s *Session) Part(ctx context.Context, group string) (*Part, error) {
	for {
		s.mu.Lock()
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return nil, err
		}
		if p := s.parts[group]; p != nil && (group == "" || !p.ended()) {
			s.mu.Unlock()
			return p, nil
		}
		if wait := s.opening[group]; wait != nil {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		wait := make(chan struct{})
		s.opening[group] = wait
		s.mu.Unlock()
		p, err := s.openPart(ctx, group)
		s.mu.Lock()
		delete(s.opening, group)
		close(wait)
		if err == nil && s.err != nil { // the session ended meanwhile
			err = s.err
			over := s.def.endedAs.Load() == endedThere
			s.mu.Unlock()
			p.end(err)
			// Closed at its group only once the default part's end applied
			// there: the open may have named a live part another replica
			// adopted with the session (see partsAtGroups).
			if over {
				p.rt.goBackground(p.closeAtGroup)
			} else {
				p.rt.forget(p)
			}
			return nil, err
		}
		if err == nil {
			s.parts[group] = p
		}
		s.mu.Unlock()
		return p, err
	}
}

// parentIn is the parent a part of s in group is opened with
// (fsm.Command.Parent): the session's ID, for a named group's part, so
// that every replica's views of that group name the part's holder by it;
// 0 for the default part, which is the session. A group that does not
// write log version 10 yet drops it, and its views then do not know it.
func (s *Session) parentIn(group string) uint64 {
	if group == "" {
		return 0
	}
	return s.ID()
}

// openPart opens s's part in group.
func (s *Session) openPart(ctx context.Context, group string) (*Part, error) {
	r, err := s.h.Group(ctx, group)
	if err != nil {
		return nil, err
	}
	rt := s.h.router(group)
	c := s.h.cfg.Clock
	sent, sentAt := clock.Boot(c), c.Now()
	// The nonce identifies retries of this open, and is the secret that
	// lets a restarted holder resume the session (a resume token); never 0.
	nonce := newNonce()
	if s.o.Nonce != nil {
		nonce = s.o.Nonce(group)
	}
	res, err := r.Propose(ctx, fsm.Command{
		Kind:   fsm.KindOpenSession,
		Nonce:  nonce,
		TTL:    uint64(s.o.TTL),
		Owner:  s.h.cfg.ReplicaID,
		Delay:  uint64(s.o.Delay),
		Name:   s.o.Name,
		Parent: s.parentIn(group),
	})
	if err != nil {
		return nil, err
	}
	if res.Status == fsm.LimitExceeded {
		return nil, fmt.Errorf("open session: %w", LimitError(res.Value))
	}
	if res.Status == fsm.Invalid && res.Value == fsm.InvalidSessionName {
		return nil, fmt.Errorf("open session: %w: %q", fsm.ErrInvalidSessionName, s.o.Name)
	}
	if res.Status != fsm.OK {
		return nil, fmt.Errorf("fencelock: open session: %v", res.Status)
	}
	// The group's timer may have started when the first attempt was applied,
	// so the holder's deadline counts from the first send. If retries took
	// long, renew at once rather than start with a session close to its end.
	if clock.Boot(c).Sub(sent) > s.o.TTL/3 {
		renewed, renewedAt := clock.Boot(c), c.Now()
		ka, err := r.Propose(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: res.Value, Floor: 1})
		if err != nil {
			return nil, err
		}
		if ka.Status != fsm.OK {
			return nil, fmt.Errorf("%w: before its first renewal", ErrSessionExpired)
		}
		sent, sentAt = renewed, renewedAt
	}
	p := rt.newPart(s, res.Value, nonce)
	p.lease.deadline = sent.Add(s.o.TTL - s.o.Margin)
	p.acked = sentAt
	if group == "" {
		s.setDefault(p)
	}
	if err := rt.start(p, sent, false); err != nil {
		return nil, err
	}
	return p, nil
}

// Request runs one numbered request that may wait for a grant (Acquire,
// Campaign and their forms) in group's part. It is traced (a span, child
// of ctx's), and a lock's is counted in the group's contention figures: its
// wait runs from this call to the grant, the opening of a part included.
func (s *Session) Request(ctx context.Context, group string, cmd fsm.Command, o RequestOptions) (*Grant, error) {
	ctx, span := s.h.startSpan(ctx, &cmd)
	defer span.End()
	// Waiting for the lock is not waiting for the group: with no quorum the
	// request fails with the cause as a call with a deadline does, even on
	// a context without one (an HTTP wait runs on such a context).
	ctx = replica.FailFast(ctx)
	// The wait is a figure, not a lease: Now's monotonic reading, not the
	// boot clock's system call (see Grant.since).
	c := s.h.cfg.Clock
	start := c.Now()
	var lead *atomic.Int64
	if cmd.Kind == fsm.KindCampaign {
		lead = s.h.leading.of(group, cmd.Name)
	}
	p, err := s.Part(ctx, group)
	var g *Grant
	if err == nil {
		g, err = p.request(ctx, &cmd, o)
	}
	waited := c.Now().Sub(start)
	if lead != nil {
		if g != nil {
			g.lead(lead)
		}
	} else if p != nil {
		p.rt.contention.ended(err, waited)
	} else if rt := s.h.routerOf(group); rt != nil { // the part did not open
		rt.contention.ended(err, waited)
	}
	if span.IsRecording() {
		endRequest(span, group, &cmd, g, err, waited)
	}
	return g, err
}

// Close ends the session at every group it has a part in, releasing all its
// locks; the default part last, so that an error of another leaves the
// session's ID closed too. If ctx ends first, the session is still over for
// its holder, and each group frees its locks once it can or at its TTL.
func (s *Session) Close(ctx context.Context) error {
	if s.Err() != nil {
		return nil
	}
	s.mu.Lock()
	parts := make([]*Part, 0, len(s.parts))
	for g, p := range s.parts {
		if g != "" && !p.ended() { // one that ended was closed, or left, then
			parts = append(parts, p)
		}
	}
	s.mu.Unlock()
	// The default part first: its close applies only while this copy owns
	// the session (a copy another replica adopted is refused by its
	// floor), and once it has applied nobody can adopt the session, so
	// the other parts are this copy's to close. After a refusal they are
	// not, and are left to their groups (see partsAtGroups).
	def := s.def
	applied, first := def.closeAt(ctx)
	if applied {
		// Each closed before Close returns, even if the default part's
		// end, applied here meanwhile, ended it already (closeParts
		// closes it in the background too; a second close is refused).
		for _, p := range parts {
			_, err := p.closeAt(ctx)
			p.end(ErrSessionClosed)
			if err != nil {
				p.rt.goBackground(p.closeAtGroup)
				if first == nil {
					first = err
				}
				continue
			}
			p.rt.forget(p)
		}
	}
	// Its end: with no answer, it is closed in the background, the other
	// parts after it (closeDefaultFirst).
	def.end(ErrSessionClosed)
	if first == nil {
		def.rt.forget(def)
	}
	s.end(ErrSessionClosed, leaveParts)
	return first
}

// PartRenewal is what one KeepAlive round did for one part of the session.
type PartRenewal struct {
	Group string // "" is the default group
	// Holds: the part held a grant, or a request that may yet be granted
	// (queued, or not answered yet), when the round began or when it
	// ended. The default part always counts: its end is the session's.
	Holds bool
	// Renewed: the round's keep-alive for the part was acknowledged and the
	// part is still live, so its deadline lies at least TTL − margin after
	// the round began.
	Renewed bool
	// Left is how long after the round began the holder keeps the part: its
	// deadline, the send of its last acknowledged renewal (or open) + TTL −
	// margin, by the boot clock; 0 if that has passed or the part ended.
	Left time.Duration
	// Err is why the part was not renewed; nil when Renewed.
	Err error
}

// Renewal is the outcome of one KeepAlive round: a PartRenewal for each part
// that was live when it began, the default part first, the others by group
// name.
type Renewal struct {
	Parts []PartRenewal
}

// NotRenewedError is KeepAlive's error when a part that holds a grant or a
// request was not renewed: the session lives on (its default part was
// renewed, or that part's error is the session's), but what those parts
// hold lasts only until their own deadlines. It wraps ErrUnavailable
// (replica's), and each part's cause except those that end a part
// (ErrSessionExpired and the like): they speak of the whole session when
// errors.Is finds them, and here only a part ended.
type NotRenewedError struct {
	Groups []string // the groups not renewed, "" for the default one, sorted
	Errs   []error  // why, one per group
}

func (e *NotRenewedError) Error() string {
	var b strings.Builder
	b.WriteString(replica.ErrUnavailable.Error())
	b.WriteString(": keep-alive did not renew the session in ")
	for i, g := range e.Groups {
		if i > 0 {
			b.WriteString(", ")
		}
		if g == "" {
			b.WriteString("the default group")
		} else {
			fmt.Fprintf(&b, "group %q", g)
		}
		if i < len(e.Errs) && e.Errs[i] != nil {
			fmt.Fprintf(&b, " (%v)", e.Errs[i])
		}
	}
	b.WriteString("; what it holds there lasts only until its deadline there")
	return b.String()
}

// Unwrap makes errors.Is find ErrUnavailable, and the parts' causes that do
// not speak of the whole session.
func (e *NotRenewedError) Unwrap() []error {
	out := []error{replica.ErrUnavailable}
	for _, err := range e.Errs {
		if err != nil && !endsPart(err) {
			out = append(out, err)
		}
	}
	return out
}

// endsPart reports whether err says a part is over: from a named part it
// must not read as the end of the whole session.
func endsPart(err error) bool {
	return errors.Is(err, ErrSessionExpired) || errors.Is(err, ErrSessionClosed) ||
		errors.Is(err, ErrRevoked) || errors.Is(err, replica.ErrClosed)
}

// KeepAlive renews every live part of s now, one keep-alive each. It
// returns nil only if every part that holds a grant or a request (and the
// default part, whose end is the session's) was renewed by this call, so
// that each of their deadlines lies at least TTL − margin after the call
// began. If the session is over it returns the session's error; else, if
// such a part was not renewed, a *NotRenewedError naming its groups, which
// wraps ErrUnavailable. A part that holds nothing and could not be renewed
// fails nothing: it ends by its own deadline. The default part's keep-alive
// may take up to TTL − margin, as ever; another part's counts as not
// renewed if its group does not answer within TTL/3, a keep-alive period.
func (s *Session) KeepAlive(ctx context.Context) error {
	_, err := s.Renew(ctx)
	return err
}

// Renew is KeepAlive, with what it did for each part: the HTTP API reports
// a lease per group from it.
func (s *Session) Renew(ctx context.Context) (Renewal, error) {
	if err := s.Err(); err != nil {
		return Renewal{}, err
	}
	start := clock.Boot(s.h.cfg.Clock)
	// An adoptable session's part that its group refused (another replica
	// adopted the session, and this copy lost that part to it) may still
	// hold grants there, under the other copy: the round counts it as
	// holding and not renewed, so that no lease this round answers leaves
	// out a group where the session holds something, and the caller
	// adopts the session again (httpapi's retryLost). An embedded
	// session's (no derived nonces) is left out, as before: its next call
	// naming the group opens another.
	parts := s.partsWhere(func(p *Part) bool {
		return !p.ended() || (s.o.Nonce != nil && p.endedAs.Load() == endedRefused)
	})
	out := Renewal{Parts: make([]PartRenewal, len(parts))}
	var wg sync.WaitGroup
	for i, p := range parts {
		// What a part holds is read before its renewal as well as after:
		// a part that held a grant when the round began and lost it
		// meanwhile (its group expired it) was not kept by this round.
		out.Parts[i] = PartRenewal{Group: p.rt.group, Holds: p == s.def || p.holds()}
		if p == s.def {
			continue // renewed on this goroutine, below
		}
		if p.ended() { // refused by its group: see above
			out.Parts[i].Holds, out.Parts[i].Err = true, p.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A group that does not answer within a keep-alive period
			// counts as not renewed: waiting longer (up to TTL − margin)
			// would hold the round, and the holder's next one, past the
			// deadline of the parts that were renewed at its start; a
			// session renewed only by KeepAlive would lose its default
			// part to a group where it may hold nothing.
			pctx, cancel := context.WithTimeout(ctx, p.ttl/3)
			defer cancel()
			out.Parts[i].Err = p.renew(pctx)
		}()
	}
	out.Parts[0].Err = s.def.renew(ctx)
	wg.Wait()
	var failed NotRenewedError
	for i, p := range parts {
		r := &out.Parts[i]
		r.Holds = r.Holds || p.holds() || (s.o.Nonce != nil && p != s.def && p.endedAs.Load() == endedRefused)
		if r.Err == nil && p.ended() { // acknowledged after the holder gave it up
			r.Err = p.Err()
		}
		r.Renewed = r.Err == nil
		r.Left = max(0, p.deadline().Sub(start))
		if p.ended() {
			r.Left = 0
		}
		if r.Holds && !r.Renewed && !(seeded.On(seeded.KeepAliveDefaultOnly) && p != s.def) {
			failed.Groups = append(failed.Groups, r.Group)
			failed.Errs = append(failed.Errs, r.Err)
		}
	}
	if err := s.Err(); err != nil {
		return out, err
	}
	if len(failed.Groups) > 0 {
		return out, &failed
	}
	return out, nil
}

// liveParts returns s's parts that have not ended, default first.
func (s *Session) liveParts() []*Part {
	return s.partsWhere(func(p *Part) bool { return !p.ended() })
}

// partsWhere returns s's default part, then its other parts that keep
// holds, in group order.
func (s *Session) partsWhere(keep func(*Part) bool) []*Part {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*Part{s.def}
	for g, p := range s.parts {
		if g != "" && keep(p) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out[1:], func(a, b *Part) int { return cmp.Compare(a.rt.group, b.rt.group) })
	return out
}

// resumableParts returns the parts a resume token names: the default part,
// and every other part that is live or ended only with its Host's close.
func (s *Session) resumableParts() []*Part {
	s.h.mu.RLock()
	closeErr := s.h.closeErr
	s.h.mu.RUnlock()
	return s.partsWhere(func(p *Part) bool {
		err := p.endedWith()
		return err == nil || closeErr != nil && err == closeErr
	})
}

// Held returns the locks (or, with election, leaderships) s holds, by
// group and, in each, in token order: the order the group granted them.
func (s *Session) Held(election bool) []*Grant {
	var out []*Grant
	for _, p := range s.liveParts() {
		out = append(out, p.held(election)...)
	}
	return out
}

// PartID returns the ID of s's live part in group, if it has one.
func (s *Session) PartID(group string) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.parts[group]
	if p == nil || p.ended() {
		return 0, false
	}
	return p.id, true
}
