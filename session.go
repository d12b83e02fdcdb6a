package fencelock

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/lockapi"
)

// SessionOption configures NewSession.
type SessionOption = lockapi.SessionOption

type sessionOptions struct {
	ttl, margin time.Duration
	delay       time.Duration // lock-delay
	resume      ResumeToken
	external    bool                              // WithExternalKeepAlive
	name        string                            // WithSessionName
	named       bool                              // WithSessionName was given
	route       func(session.Route) session.Route // tests: how background commands reach the group
	nonce       func(group string) uint64         // servicehook.DerivedNonces: each part's resume secret
}

// WithTTL sets the session's time to live: how long the group keeps it, and
// its locks, after the last keep-alive it applied. Between 100ms and 24h;
// the default is Config.SessionTTL.
func WithTTL(ttl time.Duration) SessionOption { return lockapi.WithTTL(ttl) }

// WithSafetyMargin sets how long before TTL runs out, by the holder's own
// clock, the holder gives the session up when it could not renew it. The
// default is TTL/5; it must lie in (0, TTL/2], or NewSession fails with an
// error wrapping ErrInvalidTTL.
//
// The margin must cover the difference in clock rates between holder and
// leader over one TTL, plus the holder's scheduling delay in noticing: with
// TTL 10s and margin 2s, the clocks may drift apart by 20% before a holder
// could act after the group expired it. Clocks need not be synchronised:
// only rates matter. A larger margin leaves each keep-alive less time to
// commit (see the package doc's keep-alive schedule), hence the bound.
func WithSafetyMargin(m time.Duration) SessionOption { return lockapi.WithSafetyMargin(m) }

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
func WithLockDelay(d time.Duration) SessionOption { return lockapi.WithLockDelay(d) }

// WithExternalKeepAlive makes a session that renews itself only when its
// holder calls KeepAlive: no goroutine of its own sends keep-alives. It is for
// a session that stands for a client in another process (an HTTP client),
// which must look dead to the group when that client is: if KeepAlive is not
// called for TTL − margin, the session ends by this replica's clock (Done
// closes, ErrSessionExpired) and is closed at the group, so its locks pass on
// within one TTL of the last renewal, as a crashed holder's would.
//
// The remote client must stop acting before this replica can give the
// session up: a renewal made for a heartbeat is sent after the client sent
// that heartbeat, so stopping at the heartbeat's send + TTL − 2·margin by the
// client's clock leaves it margin for its clock's rate against this replica's.
// That holds for every group the session uses: KeepAlive returns nil only if
// it renewed each part that holds something, so answer a heartbeat as
// renewed only on nil.
func WithExternalKeepAlive() SessionOption {
	return func(s *lockapi.SessionSettings) { s.ExternalKeepAlive = true }
}

// WithSessionName names the session, so that every view of a holder,
// waiter, candidate or leader (Inspect, Locks, Contended, Candidates,
// Sessions, the HTTP views, the CLI, the dashboard) shows who it is rather
// than a number: "reindex@worker-3", say. The name is stored in the group
// with the session (in each group it opens a part in); it identifies
// nothing and need not be unique. The default is this process's
// "host:pid". It must be valid UTF-8 of at most MaxSessionNameLen bytes
// without NUL, else NewSession fails with ErrInvalidSessionName before
// anything is proposed. A resumed session keeps the name the group
// stored; the option names only the parts it opens later.
func WithSessionName(name string) SessionOption { return lockapi.WithSessionName(name) }

// MaxSessionNameLen is the longest session name, in bytes.
const MaxSessionNameLen = session.MaxSessionNameLen

// defaultSessionName is "host:pid" of this process: enough for an
// operator to find the process that holds a lock.
var defaultSessionName = sync.OnceValue(func() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	name := fmt.Sprintf("%s:%d", host, os.Getpid())
	if len(name) > MaxSessionNameLen { // cut on a rune, so that it stays UTF-8
		name = strings.ToValidUTF8(name[:MaxSessionNameLen], "")
	}
	return name
})

// embeddedOptions are the options only an embedded session reads; they
// ride in lockapi.SessionSettings.Embedded, so that SessionOption can be
// the leaf's type that the HTTP client takes too.
type embeddedOptions struct {
	resume ResumeToken
	route  func(session.Route) session.Route
	nonce  func(group string) uint64
}

// embedded returns s's embedded options, making them if it has none.
func embedded(s *lockapi.SessionSettings) *embeddedOptions {
	e, ok := s.Embedded.(*embeddedOptions)
	if !ok {
		e = &embeddedOptions{}
		s.Embedded = e
	}
	return e
}

// apply applies opts (nil ones skipped) over o, whose fields are the
// defaults an option leaves alone.
func (o *sessionOptions) apply(opts []SessionOption) {
	s := lockapi.SessionSettings{TTL: o.ttl, Name: o.name, Named: o.named, Margin: o.margin, LockDelay: o.delay,
		Resume: o.resume.session != 0, ExternalKeepAlive: o.external,
		Embedded: &embeddedOptions{resume: o.resume, route: o.route, nonce: o.nonce}}
	lockapi.ApplySessionOptions(&s, opts...)
	e := embedded(&s)
	o.ttl, o.name, o.named, o.margin, o.delay, o.external = s.TTL, s.Name, s.Named, s.Margin, s.LockDelay, s.ExternalKeepAlive
	o.resume, o.route, o.nonce = e.resume, e.route, e.nonce
}

// check validates the options and fills in the default margin and name.
func (o *sessionOptions) check() error {
	if !o.named {
		o.name = defaultSessionName()
	}
	if err := session.CheckSessionName(o.name); err != nil {
		return err
	}
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

func (o *sessionOptions) internal() session.Options {
	return session.Options{TTL: o.ttl, Margin: o.margin, Delay: o.delay, External: o.external, Route: o.route,
		Name: o.name, Nonce: o.nonce}
}

// Session is a holder of locks, normally one per process. Its node renews
// it in the background, apart from the caller's work, so a busy caller
// does not look dead (the keep-alive schedule is in the package doc). If
// the group hears nothing for TTL it expires the session and frees all its
// locks in one step, passing each to the head of its queue.
//
// The holder stops first: with t the send time of the latest keep-alive (or
// the open) the group acknowledged, Done closes and Err returns
// ErrSessionExpired at t + TTL − margin by the holder's clock unless a later
// one is acknowledged first, even while the group is unreachable, and before
// the group could expire it. That clock counts the time the machine was
// suspended on Linux (CLOCK_BOOTTIME); elsewhere it is Go's monotonic clock,
// which may not. A session that is done stays done; open a new one. The
// library closes a dead session at the group as soon as it can, so its
// locks free promptly.
//
// Its methods are safe for concurrent use.
type Session struct {
	s *session.Session
	n *Node
}

// NewSession opens a session on the group, owned by this node.
func (n *Node) NewSession(ctx context.Context, opts ...SessionOption) (*Session, error) {
	o := sessionOptions{ttl: n.cfg.SessionTTL}
	o.apply(opts)
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
	s := &Session{n: n}
	in, err := n.h.Open(ctx, o.internal(), s)
	if err != nil {
		return nil, err
	}
	s.s = in
	return s, nil
}

// ID returns the session's ID: its default part's ID in the default group,
// unique there for good. It names the session as a whole: Node.EndSession
// of it ends the whole session, a resume token carries it, and the HTTP
// API's session_id is it. The session's parts in other groups have IDs of
// their own there (IDIn). Every view of a holder, waiter or candidate
// shows this ID as its SessionID, in every group (0 in a named group for a
// part opened before the group wrote log version 10), and the part's
// there as its PartID.
func (s *Session) ID() uint64 { return s.s.ID() }

// IDIn returns the ID of the session's live part in group ("" is the
// default group, whose part is ID's): ok is false while the session has no
// part there (no call named the group yet, or its part there ended). The
// ID is the PartID that group's views show for this session's grants and
// requests there, and the one Node.EndSessionIn takes.
func (s *Session) IDIn(group string) (id uint64, ok bool) { return s.s.PartID(group) }

// TTL returns the session's time to live.
func (s *Session) TTL() time.Duration { return s.s.TTL() }

// SafetyMargin returns the session's safety margin (see WithSafetyMargin).
func (s *Session) SafetyMargin() time.Duration { return s.s.SafetyMargin() }

// Done is closed when the session as a whole is over for its holder:
// closed, its default-group part expired or not renewed in time, or its
// node closed. Every lock and every leadership it held, in every group, is
// lost then. A part in another group that ends ends only the grants held
// there (see Groups in the package doc).
//
// Done (like Err, Lock.Done and Lock.Err) also checks the deadline by the
// holder's clock when called, so a process that wakes from a pause longer
// than the TTL (or a machine that wakes from a suspend, on Linux) finds it
// closed on its first look; a goroutine that only waits on Done sees it
// close within a keep-alive period of waking.
func (s *Session) Done() <-chan struct{} { return s.s.Done() }

// Err returns nil before Done is closed and why the session ended after:
// ErrSessionExpired, ErrSessionClosed, ErrRevoked, ErrRemoved or ErrClosed.
func (s *Session) Err() error { return s.s.Err() }

// Close ends the session at the group, releasing all its locks (each passes
// to the head of its queue) in one step. If ctx ends first, the session is
// still over for its holder, and the group frees its locks once it can or
// when its TTL runs out. Closing a session that is over returns nil.
func (s *Session) Close(ctx context.Context) error { return s.s.Close(ctx) }

// KeepAlive renews the session now, with one keep-alive to each group it has
// a part in, and returns once each group has answered. It returns nil only
// if every part that holds a lock, a leadership or a request (queued, or
// not answered yet), and the default group's part, was renewed by this
// call: the holder's deadline for each of them then lies at least TTL −
// margin after this call began, so a lease timed from the call's start (or
// from before it) by TTL − margin covers every group. Otherwise the deadline
// of a part not renewed is unchanged, and KeepAlive fails: with
// ErrSessionExpired (or the session's error) if the session is over, else
// with an error that wraps ErrUnavailable (and ctx's error or ErrNoQuorum
// when that was the cause) and names each group not renewed; what the
// session holds there lasts only until that part's own deadline. A part
// that holds nothing and could not be renewed fails nothing: it ends by its
// own deadline, and the next call naming its group opens a new one.
//
// The default group's keep-alive may take up to TTL − margin, within ctx;
// another group's counts as not renewed if it is not answered within TTL/3
// (a keep-alive period), so that a group that cannot commit does not hold
// the call, and the caller's next one, past the deadline of the parts it
// renewed. Any session may call it; a session made with
// WithExternalKeepAlive is renewed only by it.
func (s *Session) KeepAlive(ctx context.Context) error { return s.s.KeepAlive(ctx) }

// GroupLease is what one KeepAliveGroups round did for the session's part in
// one group.
type GroupLease struct {
	Group string // "" is the default group
	// Holds: the part held a lock, a leadership or a request when the round
	// began or when it ended. The default group's part always counts: the
	// session ends with it.
	Holds bool
	// Renewed: the round renewed the part, so its deadline lies at least
	// TTL − margin after the round began.
	Renewed bool
	// Lease is how long after the round began the holder keeps the part:
	// until the send of its last acknowledged renewal + TTL − margin, by the
	// holder's clock; 0 if that has passed or the part ended.
	Lease time.Duration
	// Err is why the part was not renewed; nil when Renewed.
	Err error
}

// KeepAliveGroups is KeepAlive, with what the round did for each part that
// was live when it began: the default group's first, then by group name.
// The error is KeepAlive's; on an error other than the session's the list
// says which parts were renewed. The lease the round allows is the shortest
// Lease of the parts that hold something (see MinLease).
func (s *Session) KeepAliveGroups(ctx context.Context) ([]GroupLease, error) {
	r, err := s.s.Renew(ctx)
	out := make([]GroupLease, len(r.Parts))
	for i, p := range r.Parts {
		out[i] = GroupLease{Group: p.Group, Holds: p.Holds, Renewed: p.Renewed, Lease: p.Left, Err: p.Err}
	}
	return out, err
}

// MinLease returns the shortest Lease of the parts in leases that hold
// something: the time after the round began for which all that the session
// holds is kept. It returns 0 if none holds anything.
func MinLease(leases []GroupLease) time.Duration {
	var lease time.Duration
	found := false
	for _, l := range leases {
		if l.Holds && (!found || l.Lease < lease) {
			lease, found = l.Lease, true
		}
	}
	return lease
}
