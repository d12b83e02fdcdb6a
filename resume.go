package fencelock

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
)

// ResumeToken lets a restarted process take its session back (see
// Node.ResumeSession). It holds the session's ID, its TTL and a secret:
// whoever has it can act as the session's holder, so keep it where you
// would keep a credential. Persist it with String or MarshalText; the zero
// value resumes nothing. A token is checked by the group when used, not
// trusted: one whose secret, session or TTL was changed resumes nothing.
type ResumeToken struct {
	group, session, secret uint64
	ttl                    time.Duration
}

// WithResume makes NewSession resume the session t names, as ResumeSession
// does, and open a new session only if that one is over
// (ErrSessionExpired); the zero token resumes nothing. RunElection given it
// resumes its first session, and with it a term the session still leads.
func WithResume(t ResumeToken) SessionOption { return func(o *sessionOptions) { o.resume = t } }

// Resume returns the token that resumes this session after its process
// restarts. It does not change while the session lives.
func (s *Session) Resume() ResumeToken {
	return ResumeToken{group: s.n.r.GroupID(), session: s.id, secret: s.nonce, ttl: s.ttl}
}

// SessionID returns the ID of the session the token resumes.
func (t ResumeToken) SessionID() uint64 { return t.session }

const resumePrefix = "flr1"

// String encodes the token in printable ASCII, for ParseResumeToken.
func (t ResumeToken) String() string {
	// The TTL in milliseconds, or, if it is not a whole number of them, in
	// nanoseconds with the suffix "ns": the group refuses a resume whose TTL
	// is not exactly the session's.
	ttl := strconv.FormatInt(t.ttl.Milliseconds(), 10)
	if t.ttl%time.Millisecond != 0 {
		ttl = strconv.FormatInt(int64(t.ttl), 10) + "ns"
	}
	return fmt.Sprintf("%s.%x.%x.%x.%s", resumePrefix, t.group, t.session, t.secret, ttl)
}

// MarshalText implements encoding.TextMarshaler, as String.
func (t ResumeToken) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler, as ParseResumeToken.
func (t *ResumeToken) UnmarshalText(b []byte) error {
	p, err := ParseResumeToken(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// ParseResumeToken reads a token String wrote; anything else is an error
// wrapping ErrInvalidResumeToken.
func ParseResumeToken(s string) (ResumeToken, error) {
	bad := func(why string) (ResumeToken, error) {
		return ResumeToken{}, fmt.Errorf("%w: %s", ErrInvalidResumeToken, why)
	}
	f := strings.Split(s, ".")
	if len(f) != 5 || f[0] != resumePrefix {
		return bad("not a resume token")
	}
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i+1], 16, 64)
		if err != nil {
			return bad("malformed field")
		}
		v[i] = n
	}
	unit, digits := time.Millisecond, f[4]
	if d, ok := strings.CutSuffix(digits, "ns"); ok {
		unit, digits = time.Nanosecond, d
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n <= 0 || n > int64(maxTTL/unit) {
		return bad("malformed TTL")
	}
	t := ResumeToken{group: v[0], session: v[1], secret: v[2], ttl: time.Duration(n) * unit}
	if t.session == 0 || t.secret == 0 {
		return bad("no session")
	}
	return t, nil
}

// ResumeSession takes back the session t names, after its process restarted
// within the session's TTL: the session moves to this node with every lock
// and leadership it holds, their tokens unchanged (Session.Locks,
// Session.Leaderships), and is renewed at once; the holder's deadline counts
// from this call's send, as for a keep-alive: at most TTL − margin after it,
// where TTL is the session's as the group keeps it. The session keeps its
// TTL; of opts only WithSafetyMargin applies. Requests the old process had
// queued are withdrawn, since nobody waits for them any more.
//
// The group checks the token: if the session already ended (expired,
// closed, ended by an operator), or t names another session or holds
// another secret, it fails with ErrSessionExpired and tells nothing more;
// if t's TTL is not the session's (a token edited or mis-copied, whose
// holder would time its lease past the group's expiry), it fails with an
// error wrapping ErrInvalidResumeToken, and the session stays as it was. A
// token of another group fails with ErrOtherGroup. If it fails with
// ErrUnavailable the resume may still have applied: try again, with the
// same token, before the TTL runs out.
//
// Resume a session only once its old process is gone. One that still runs
// is told its session is over when its next keep-alive or request is
// applied, but until then both processes hold the same grants with the same
// tokens, and no fencer can tell them apart.
func (n *Node) ResumeSession(ctx context.Context, t ResumeToken, opts ...SessionOption) (*Session, error) {
	if t.session == 0 || t.secret == 0 {
		return nil, fmt.Errorf("%w: the zero token", ErrInvalidResumeToken)
	}
	if g := n.r.GroupID(); g != 0 && t.group != 0 && g != t.group {
		return nil, fmt.Errorf("%w: the token is of group %x, this node's is %x", ErrOtherGroup, t.group, g)
	}
	o := sessionOptions{ttl: t.ttl}
	for _, f := range opts {
		f(&o)
	}
	o.ttl = t.ttl
	if err := o.check(); err != nil {
		return nil, err
	}
	s := n.newSession(t.session, t.secret, o)
	c := n.cfg.clock
	sent, sentAt := clock.Boot(c), c.Now()
	s.lease.deadline, s.acked = sent.Add(s.lease.life), sentAt
	// Registered before the resume applies, so that the grants it keeps,
	// reported as it applies, reach s, and so does everything after; what
	// this replica applies before it (it may be replaying its log after the
	// restart) concerns the old incarnation, and s ignores it (resuming,
	// from before it is registered: a replayed grant it took for its own
	// would be given back, releasing a lock the resume is to keep).
	attempt := randomID()
	s.resume.Store(attempt)
	n.mu.Lock()
	switch {
	case n.closing:
		n.mu.Unlock()
		return nil, ErrClosed
	case n.sessions[s.id] != nil:
		n.mu.Unlock()
		return nil, fmt.Errorf("%w: session %d is open in this process", ErrInvalidResumeToken, s.id)
	}
	n.sessions[s.id] = s
	n.mu.Unlock()
	// The group, not the token, decides the TTL the holder times its lease
	// by: the resume names the token's, and is refused unless it is the
	// session's, so the deadline set above is never later than the group's
	// own expiry allows.
	res, err := n.r.Propose(ctx, fsm.Command{Kind: fsm.KindResume, Session: s.id, Nonce: t.secret,
		Owner: n.cfg.ReplicaID, Target: attempt, TTL: uint64(t.ttl)})
	if err == nil && res.Status != fsm.OK {
		switch res.Status {
		case fsm.UnknownSession:
			err = ErrSessionExpired
		case fsm.Conflict:
			err = fmt.Errorf("%w: the token's TTL %v is not the session's %v", ErrInvalidResumeToken,
				t.ttl, time.Duration(res.Value))
		default:
			err = fmt.Errorf("fencelock: resume: unexpected reply %v", res.Status)
		}
	}
	if err != nil {
		s.end(ErrSessionExpired)
		n.forget(s)
		return nil, err
	}
	s.mu.Lock()
	s.nextSeq = res.Value
	s.mu.Unlock()
	// The holder's deadline counts from the resume's first send, which
	// retries may have left far behind (a lagging or cut-off replica): then
	// renew at once, as NewSession does, rather than hand over a session
	// whose deadline is close or past, and that would give itself up with
	// every grant the resume kept.
	if clock.Boot(c).Sub(sent) > o.ttl/3 {
		renewed, renewedAt := clock.Boot(c), c.Now()
		ka, err := n.r.Propose(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: s.id, Floor: res.Value})
		if err == nil && ka.Status != fsm.OK {
			err = fmt.Errorf("%w: before its first renewal", ErrSessionExpired)
		}
		if err != nil {
			s.end(ErrSessionExpired)
			n.forget(s)
			return nil, err
		}
		sent = renewed
		s.mu.Lock()
		s.lease.deadline, s.acked = renewed.Add(s.lease.life), renewedAt
		s.mu.Unlock()
	}
	if err := n.startSession(s, sent, true); err != nil {
		return nil, err
	}
	return s, nil
}

// Locks returns the locks the session holds, in the order they were
// granted: after ResumeSession, the ones it kept.
func (s *Session) Locks() []*Lock {
	var out []*Lock
	for _, g := range s.heldGrants(false) {
		out = append(out, &Lock{g})
	}
	return out
}

// Leaderships returns the terms the session leads, in the order they
// began: after ResumeSession, the ones it kept.
func (s *Session) Leaderships() []*Leadership {
	var out []*Leadership
	for _, g := range s.heldGrants(true) {
		out = append(out, &Leadership{g})
	}
	return out
}

func (s *Session) heldGrants(election bool) []*grant {
	s.mu.Lock()
	var out []*grant
	for _, g := range s.grants {
		if g.election == election {
			out = append(out, g)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *grant) int { return cmp.Compare(a.token, b.token) })
	return out
}

// kept records a grant the session keeps through its resume (EventKept);
// no call waits for it.
func (s *Session) kept(e *fsm.Event) {
	mode := lockMode(e)
	mode.election = e.Election
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil && s.grants[e.Token] == nil {
		s.grants[e.Token] = s.newGrant(e.Seq, e.Name, mode, e.Token, e.Value)
	}
}

// resuming reports whether e is to be ignored because s waits for its
// resume to apply: until then every event of s is its old incarnation's.
// The resume's own EventResumed ends the wait.
func (s *Session) resuming(e *fsm.Event) bool {
	attempt := s.resume.Load()
	if attempt == 0 {
		return false
	}
	if e.Kind == fsm.EventResumed && e.Target == attempt {
		s.resume.Store(0)
	}
	return true
}

// reconcileResume is reconcile for a session waiting for its resume: if
// the restored state holds the resume, s takes the grants it kept.
func (s *Session) reconcileResume(st *fsm.State) {
	attempt, kept := st.Kept(s.id)
	if attempt != s.resume.Load() {
		return // not applied yet: its events are still to come
	}
	s.later(func() {
		if s.resume.CompareAndSwap(attempt, 0) {
			for i := range kept {
				s.kept(&kept[i])
			}
		}
	})
}

// randomID returns a random number from crypto/rand, never 0: a session's
// secret (the open's nonce, which its ResumeToken carries) or a resume
// attempt's ID. A secret must not be predictable from others the process
// made, as math/rand's are.
func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: it crashes the program rather than return an error
	return binary.LittleEndian.Uint64(b[:]) | 1
}
