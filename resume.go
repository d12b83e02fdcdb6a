package fencelock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/lockapi"
)

// ResumeToken lets a restarted process take its session back (see
// Node.ResumeSession). It holds, for each group the session has a part in,
// the session's ID there and a secret, and the session's TTL: whoever has it
// can act as the session's holder, so keep it where you would keep a
// credential. Persist it with String or MarshalText; the zero value resumes
// nothing. A token is checked by the groups when used, not trusted: one
// whose secret, session or TTL was changed resumes nothing.
type ResumeToken struct {
	group, session, secret uint64 // the default group's part
	ttl                    time.Duration
	// others encodes the parts in other groups, canonically (see String),
	// so that a token stays comparable with ==.
	others string
}

// WithResume makes NewSession resume the session t names, as ResumeSession
// does, and open a new session only if that one is over
// (ErrSessionExpired); the zero token resumes nothing. RunElection given it
// resumes its first session, and with it a term the session still leads.
func WithResume(t ResumeToken) SessionOption {
	return func(s *lockapi.SessionSettings) { embedded(s).resume, s.Resume = t, t.session != 0 }
}

// Resume returns the token that resumes this session after its process
// restarts: every part the session has at the call. It changes only when the
// session opens a part in another group; take it again after that. Taken
// after the Node closed (or crashed), it still names every part the groups
// keep: Close ends the session here only.
func (s *Session) Resume() ResumeToken {
	parts := s.s.Tokens()
	d := parts[0]
	return ResumeToken{group: d.GroupID, session: d.Session, secret: d.Secret, ttl: s.TTL(), others: encodeParts(parts[1:])}
}

// SessionID returns the ID of the session the token resumes (its ID in the
// default group).
func (t ResumeToken) SessionID() uint64 { return t.session }

// A token of a session with parts in the default group only is written as
// resumePrefix.group.session.secret.ttl (hex, ttl in decimal ms), as it
// always was; one with parts in other groups as resumePrefixGroups and the
// same five fields, then one field name:group:session:secret per other part.
const (
	resumePrefix       = "flr1"
	resumePrefixGroups = "flr2"
	maxResumeParts     = 64 // other groups a token may name
)

// String encodes the token in printable ASCII, for ParseResumeToken.
func (t ResumeToken) String() string {
	// The TTL in milliseconds, or, if it is not a whole number of them, in
	// nanoseconds with the suffix "ns": the group refuses a resume whose TTL
	// is not exactly the session's.
	ttl := strconv.FormatInt(t.ttl.Milliseconds(), 10)
	if t.ttl%time.Millisecond != 0 {
		ttl = strconv.FormatInt(int64(t.ttl), 10) + "ns"
	}
	if t.others == "" {
		return fmt.Sprintf("%s.%x.%x.%x.%s", resumePrefix, t.group, t.session, t.secret, ttl)
	}
	return fmt.Sprintf("%s.%x.%x.%x.%s.%s", resumePrefixGroups, t.group, t.session, t.secret, ttl, t.others)
}

func encodeParts(parts []session.PartToken) string {
	f := make([]string, len(parts))
	for i, p := range parts {
		f[i] = fmt.Sprintf("%s:%x:%x:%x", p.Group, p.GroupID, p.Session, p.Secret)
	}
	return strings.Join(f, ".")
}

// parts returns the parts t names, the default one first.
func (t ResumeToken) parts() []session.PartToken {
	out := []session.PartToken{{GroupID: t.group, Session: t.session, Secret: t.secret}}
	if t.others == "" {
		return out
	}
	for _, f := range strings.Split(t.others, ".") {
		p, _ := parsePart(f) // checked by ParseResumeToken or made by Resume
		out = append(out, p)
	}
	return out
}

func parsePart(f string) (session.PartToken, bool) {
	g := strings.Split(f, ":")
	if len(g) != 4 || !validGroupName(g[0]) {
		return session.PartToken{}, false
	}
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(g[i+1], 16, 64)
		if err != nil {
			return session.PartToken{}, false
		}
		v[i] = n
	}
	p := session.PartToken{Group: g[0], GroupID: v[0], Session: v[1], Secret: v[2]}
	return p, p.Session != 0 && p.Secret != 0
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
	f := strings.SplitN(s, ".", 6+maxResumeParts)
	switch {
	case len(f) == 5 && f[0] == resumePrefix:
	case len(f) > 5 && len(f) <= 5+maxResumeParts && f[0] == resumePrefixGroups:
	default:
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
	var others []session.PartToken
	seen := make(map[string]bool)
	for _, field := range f[5:] {
		p, ok := parsePart(field)
		if !ok || seen[p.Group] {
			return bad("malformed part")
		}
		seen[p.Group] = true
		others = append(others, p)
	}
	t.others = encodeParts(others)
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
// Every part the token names is resumed, in each group the session had
// used: the default group's first. A part in another group that is over is
// left out (its grants are gone; the next call naming that group opens a
// new part). Each group checks the token: if the session already ended in
// the default group (expired, closed, ended by an operator), or t names
// another session or holds another secret, it fails with ErrSessionExpired
// and tells nothing more; if t's TTL is not the session's (a token edited
// or mis-copied, whose holder would time its lease past the group's
// expiry), it fails with an error wrapping ErrInvalidResumeToken, and the
// session stays as it was. A token of another deployment's group fails
// with ErrOtherGroup, and one naming a group this node does not run with
// ErrUnknownGroup. If it fails with ErrUnavailable (or ctx's error) the
// resume may still have applied: try again, with the same token, before
// the TTL runs out.
//
// Resume a session only once its old process is gone. One that still runs
// is told its session is over when its next keep-alive or request is
// applied, but until then both processes hold the same grants with the same
// tokens, and no fencer can tell them apart.
func (n *Node) ResumeSession(ctx context.Context, t ResumeToken, opts ...SessionOption) (*Session, error) {
	if t.session == 0 || t.secret == 0 {
		return nil, fmt.Errorf("%w: the zero token", ErrInvalidResumeToken)
	}
	parts := t.parts()
	for _, p := range parts {
		r := n.groups().Group(p.Group)
		if r == nil {
			return nil, fmt.Errorf("%w: %q, of the token", ErrUnknownGroup, p.Group)
		}
		if g := r.GroupID(); g != 0 && p.GroupID != 0 && g != p.GroupID {
			return nil, fmt.Errorf("%w: the token is of group %x, this node's is %x", ErrOtherGroup, p.GroupID, g)
		}
	}
	o := sessionOptions{ttl: t.ttl}
	o.apply(opts)
	o.ttl = t.ttl
	if err := o.check(); err != nil {
		return nil, err
	}
	if !o.named {
		// The parts this session opens later carry the name the group
		// stored at the open, not this new process's "host:pid": the
		// session is the same one. The name never changes, so this
		// replica's copy serves, without a round trip that would spend the
		// resume's time on a slow group; a copy that has not caught up
		// with the open leaves the default.
		if name := n.h.SessionName(t.session); name != "" {
			o.name = name
		}
	}
	s := &Session{n: n}
	in, err := n.h.Resume(ctx, parts, o.internal(), s)
	if err != nil {
		return nil, err
	}
	s.s = in
	return s, nil
}

// Locks returns the locks the session holds: the default group's first,
// then each other group's (by name), each group's in the order they were
// granted. After ResumeSession, the ones it kept.
func (s *Session) Locks() []*Lock {
	var out []*Lock
	for _, g := range s.s.Held(false) {
		out = append(out, &Lock{grant: g})
	}
	return out
}

// Leaderships returns the terms the session leads, ordered as Locks: by
// group, and in each in the order they began. After ResumeSession, the ones
// it kept.
func (s *Session) Leaderships() []*Leadership {
	var out []*Leadership
	for _, g := range s.s.Held(true) {
		out = append(out, &Leadership{grant: g})
	}
	return out
}
