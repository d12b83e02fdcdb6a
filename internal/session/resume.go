package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// PartToken is what resumes one part: its group's name and ID, its session
// ID there and the secret of its open.
type PartToken struct {
	Group   string
	GroupID uint64
	Session uint64
	Secret  uint64
}

// Tokens returns what resumes s: its parts the groups may still hold, the
// default one first. That is every live part, and every part that ended
// only here because this Host closed (Close, or a test's crash): a close
// leaves the parts open at their groups so that a restarted process can
// resume them, so a token taken after it, as a shutdown hook's last act
// may take it, names them too.
func (s *Session) Tokens() []PartToken {
	parts := s.resumableParts()
	out := make([]PartToken, 0, len(parts))
	for _, p := range parts {
		var gid uint64
		if r, err := s.h.Group(context.Background(), p.rt.group); err == nil {
			gid = r.GroupID()
		}
		out = append(out, PartToken{Group: p.rt.group, GroupID: gid, Session: p.id, Secret: p.nonce})
	}
	return out
}

// Resume takes back the session whose parts parts name (the default part
// first), moving each to this replica with the grants it holds. A part
// other than the default one that is over (ErrSessionExpired) is left out:
// its grants are gone. Any other failure fails the resume, and the parts
// resumed so far end here without being closed at their groups, so that
// the same token can be tried again.
func (h *Host) Resume(ctx context.Context, parts []PartToken, o Options, owner any) (*Session, error) {
	return h.resume(ctx, parts, o, owner, false, fence{})
}

// fence is an adoption's ownership epoch (fsm.Command.Fence): resuming
// the session's default part, the base its adopter read; resuming a part
// in a named group, the base the adopter's resume of the default part set,
// with the session's ID as parent. The zero value resumes unfenced.
type fence struct {
	on            bool
	epoch, parent uint64
}

// errAdoptedElsewhere fails an adoption that another replica's won first
// (a fenced resume refused: fsm.NotApplied). Nothing changed at the group;
// the caller tries again, and finds the session where it lives now.
var errAdoptedElsewhere = fmt.Errorf("%w: the session was adopted by another replica meanwhile; try again", replica.ErrUnavailable)

// resume is Resume; with keep (an adoption's, see Adopt) each part keeps
// its queued requests in their places (fsm.Command.Keep) instead of
// withdrawing them, and the default part's resume is fenced by f.
func (h *Host) resume(ctx context.Context, parts []PartToken, o Options, owner any, keep bool, f fence) (*Session, error) {
	if len(parts) == 0 || parts[0].Group != "" {
		return nil, fmt.Errorf("%w: no default part", ErrInvalidResumeToken)
	}
	s := h.newSession(o, owner)
	var resumed []*Part
	fail := func(err error) (*Session, error) {
		for _, p := range resumed {
			p.endAlone(ErrSessionExpired)
			p.rt.forget(p)
		}
		return nil, err
	}
	for i, t := range parts {
		pf := fence{}
		if i == 0 {
			pf = f
		}
		p, err := s.resumePart(ctx, t, keep, pf)
		if err != nil {
			if i > 0 && errors.Is(err, ErrSessionExpired) {
				h.log.Info("fencelock: a part of the resumed session is over", "group", t.Group, "session", t.Session)
				continue
			}
			return fail(err)
		}
		resumed = append(resumed, p)
	}
	for _, p := range resumed[1:] {
		s.mu.Lock()
		s.parts[p.rt.group] = p
		s.mu.Unlock()
	}
	if err := s.register(s.def); err != nil {
		return fail(err)
	}
	return s, nil
}

// resumePart resumes one part of s; with keep, its queued requests stay
// queued (fsm.Command.Keep), each a waiter with no call yet. With f on, the
// resume is fenced (fsm.Command.Fence): refused (errAdoptedElsewhere) if
// another adoption moved the part first. A group that does not write log
// version 11 yet cannot take a fenced resume (fsm.ErrVersionGated): the
// part is then resumed unfenced, as before, last writer wins; the service
// never answers a grant from such a copy alone (httpapi's backed), and a
// superseded copy closes nothing at the groups (Session.partEnded).
func (s *Session) resumePart(ctx context.Context, t PartToken, keep bool, f fence) (*Part, error) {
	r, err := s.h.Group(ctx, t.Group)
	if err != nil {
		return nil, err
	}
	rt := s.h.router(t.Group)
	p := rt.newPart(s, t.Session, t.Secret)
	if t.Group == "" {
		s.setDefault(p) // before it hears anything: its end is the session's
	}
	c := s.h.cfg.Clock
	sent, sentAt := clock.Boot(c), c.Now()
	p.lease.deadline, p.acked = sent.Add(p.lease.life), sentAt
	p.keeps, p.keptSent = keep, sent
	// Registered before the resume applies, so that the grants it keeps,
	// reported as it applies, reach p, and so does everything after; what
	// this replica applies before it (it may be replaying its log after the
	// restart) concerns the old incarnation, and p ignores it (resuming,
	// from before it is registered: a replayed grant it took for its own
	// would be given back, releasing a lock the resume is to keep).
	attempt := newNonce()
	p.resume.Store(attempt)
	s.h.mu.RLock()
	closing := s.h.closing
	s.h.mu.RUnlock()
	if closing {
		return nil, replica.ErrClosed
	}
	rt.mu.Lock()
	if rt.parts[p.id] != nil {
		rt.mu.Unlock()
		return nil, fmt.Errorf("%w: session %d is open in this process", ErrInvalidResumeToken, p.id)
	}
	rt.parts[p.id] = p
	rt.mu.Unlock()
	// The group, not the token, decides the TTL the holder times its lease
	// by: the resume names the token's, and is refused unless it is the
	// session's, so the deadline set above is never later than the group's
	// own expiry allows.
	cmd := fsm.Command{Kind: fsm.KindResume, Session: p.id, Nonce: t.Secret,
		Owner: s.h.cfg.ReplicaID, Target: attempt, TTL: uint64(p.ttl), Keep: keep,
		Fence: f.on, Epoch: f.epoch, Parent: f.parent}
	res, err := r.Propose(ctx, cmd)
	if f.on && errors.Is(err, fsm.ErrVersionGated) {
		cmd.Fence, cmd.Epoch, cmd.Parent = false, 0, 0
		res, err = r.Propose(ctx, cmd)
	}
	if err == nil && res.Status != fsm.OK {
		switch res.Status {
		case fsm.NotApplied:
			err = errAdoptedElsewhere
		case fsm.UnknownSession:
			err = ErrSessionExpired
		case fsm.Conflict:
			err = fmt.Errorf("%w: the token's TTL %v is not the session's %v", ErrInvalidResumeToken,
				p.ttl, time.Duration(res.Value))
		default:
			err = fmt.Errorf("fencelock: resume: unexpected reply %v", res.Status)
		}
	}
	if err != nil {
		p.endAlone(ErrSessionExpired)
		rt.forget(p)
		return nil, err
	}
	p.mu.Lock()
	p.nextSeq, p.base = res.Value, res.Value
	p.mu.Unlock()
	// The holder's deadline counts from the resume's first send, which
	// retries may have left far behind (a lagging or cut-off replica): then
	// renew at once, as an open does, rather than hand over a part whose
	// deadline is close or past, and that would give itself up with every
	// grant the resume kept.
	if clock.Boot(c).Sub(sent) > p.ttl/3 {
		renewed, renewedAt := clock.Boot(c), c.Now()
		ka, err := r.Propose(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: p.id, Floor: res.Value})
		if err == nil && ka.Status != fsm.OK {
			err = fmt.Errorf("%w: before its first renewal", ErrSessionExpired)
		}
		if err != nil {
			p.endAlone(ErrSessionExpired)
			rt.forget(p)
			return nil, err
		}
		sent = renewed
		p.mu.Lock()
		p.lease.deadline, p.acked = renewed.Add(p.lease.life), renewedAt
		p.mu.Unlock()
	}
	if err := rt.start(p, sent, true); err != nil {
		return nil, err
	}
	return p, nil
}

// kept records a grant the part keeps through its resume (EventKept); no
// call waits for it.
func (p *Part) kept(e *fsm.Event) {
	mode := lockMode(e)
	mode.election = e.Election
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil && p.grants[e.Token] == nil {
		p.grants[e.Token] = p.newGrant(e.Seq, e.Name, mode, e.Token, e.Value)
	}
}

// resuming reports whether e is to be ignored because p waits for its
// resume to apply: until then every event of p is its old incarnation's.
// The resume's own EventResumed ends the wait.
func (p *Part) resuming(e *fsm.Event) bool {
	attempt := p.resume.Load()
	if attempt == 0 {
		return false
	}
	if e.Kind == fsm.EventResumed && e.Target == attempt {
		p.resume.Store(0)
	}
	return true
}

// reconcileResume is reconcile for a part waiting for its resume: if the
// restored state holds the resume, p takes the grants it kept.
func (p *Part) reconcileResume(st *fsm.State) {
	attempt, kept := st.Kept(p.id)
	if attempt != p.resume.Load() {
		return // not applied yet: its events are still to come
	}
	p.later(func() {
		if p.resume.CompareAndSwap(attempt, 0) {
			for i := range kept {
				if kept[i].Kind == fsm.EventKeptQueued {
					p.keptQueued(&kept[i])
				} else {
					p.kept(&kept[i])
				}
			}
		}
	})
}
