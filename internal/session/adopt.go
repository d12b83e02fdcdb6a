package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// Adopt takes over session id, whose parts were opened with the nonces
// o.Nonce derives (o.Nonce must be set), from whichever replica held it: a
// resume of its default part first, which is what checks the nonce, and so
// the caller's secret, at the group; then, in each of groups (the named
// groups this process runs), a resume of the session's part there, if it
// has one. The session keeps every grant with its token, and every request
// its earlier holder had queued stays queued in its place (fsm.Command.Keep):
// a call that asks for the same lock or election again (Request, with
// Wait) waits for that request's grant, and is answered by it, instead of
// queuing a second time; a grant to a kept request made before such a
// call is held by the session meanwhile, as one its resume kept is. WithdrawKept
// withdraws a kept request that no such call claimed.
//
// The adoption is fenced (fsm.Command.Fence): the default part moves only
// from the epoch read here, by compare-and-set, and each other part only
// under the epoch that move won, so of two adoptions at once one ends with
// every part and the other changes nothing (errAdoptedElsewhere).
//
// A wrong nonce, or a session that is over, fails with ErrSessionExpired
// and changes nothing: no group but the default one is asked anything.
// Any other failure ends the parts resumed so far here, without closing
// them at their groups, so that another attempt can take them; so does
// losing a race with another adopter (see stillOwn).
func (h *Host) Adopt(ctx context.Context, id uint64, groups []string, o Options, owner any) (*Session, error) {
	if o.Nonce == nil {
		return nil, fmt.Errorf("%w: no nonces to adopt with", ErrInvalidResumeToken)
	}
	// By compare-and-set on the epoch read here, never last writer wins:
	// of two replicas adopting at once, one wins by log order, and the
	// other changes nothing anywhere (errAdoptedElsewhere).
	epoch, err := h.readEpoch(ctx, id)
	if err != nil {
		return nil, err
	}
	s, err := h.resume(ctx, []PartToken{{Session: id, Secret: o.Nonce("")}}, o, owner, true,
		fence{on: true, epoch: epoch})
	if err != nil {
		return nil, err
	}
	s.def.mu.Lock()
	won := s.def.base
	s.def.mu.Unlock()
	for _, g := range groups {
		if g == "" {
			continue
		}
		pid, err := s.findPart(ctx, g)
		if err == nil {
			var p *Part
			// Under the epoch this adoption won: a part moves only to a
			// later adopter, whatever order its group applies them in.
			p, err = s.resumePart(ctx, PartToken{Group: g, Session: pid, Secret: o.Nonce(g)}, true,
				fence{on: true, epoch: won, parent: id})
			if err == nil {
				s.mu.Lock()
				s.parts[g] = p
				s.mu.Unlock()
				continue
			}
			if errors.Is(err, ErrSessionExpired) {
				continue // the part ended meanwhile: the next call naming g opens a new one
			}
		}
		s.Abandon(err)
		return nil, err
	}
	if len(groups) > 0 {
		if err := s.stillOwn(ctx); err != nil {
			s.Abandon(err)
			return nil, err
		}
	}
	return s, nil
}

// readEpoch returns session id's ownership epoch, by a linearizable read
// of the default group: the base its last resume set (fsm.SessionInfo).
// A session that is over is ErrSessionExpired.
func (h *Host) readEpoch(ctx context.Context, id uint64) (uint64, error) {
	r, err := h.Group(ctx, "")
	if err != nil {
		return 0, err
	}
	v, err := r.Read(ctx, func(st *fsm.State) any {
		info, ok := st.Session(id)
		if !ok {
			return nil
		}
		return info.Base
	})
	if err != nil {
		return 0, err
	}
	base, ok := v.(uint64)
	if !ok {
		return 0, ErrSessionExpired
	}
	return base, nil
}

// Abandon ends s in this process only, with err: nothing is closed at any
// group, and its parts are forgotten here, so that this process can adopt
// the session again. For a copy another replica may have taken over (a
// part of it resumed elsewhere): its parts may be another holder's now.
func (s *Session) Abandon(err error) {
	s.mu.Lock()
	parts := make([]*Part, 0, len(s.parts)+1)
	for _, p := range s.parts {
		parts = append(parts, p)
	}
	if s.def != nil {
		parts = append(parts, s.def)
	}
	s.mu.Unlock()
	// Marked before the end, which wakes the waits: a wait that also sees
	// its context end (the service cancels its waits right after) must not
	// withdraw the request the adopter is to keep (see withdraw).
	for _, p := range parts {
		p.abandoned.Store(true)
	}
	s.end(err, leaveParts)
	for _, p := range parts {
		p.rt.forget(p)
	}
}

// stillOwn checks, after the other parts were resumed, that no other
// adopter resumed the default part meanwhile: a keep-alive above this
// resume's floor is refused once another resume moved it. Then the loser
// of two adoptions at once ends its copy here without closing any part at
// its group (they may be the winner's). The fenced resumes settle which
// adopter each part ends with (the latest, by the default group's log
// order); only below log version 11, where they resume unfenced, may a
// loser's resume of a named part land after the winner's: the winner then
// finds that part refused at its next call or heartbeat and adopts the
// session again (httpapi's retryLost), taking the part back with its
// grants.
func (s *Session) stillOwn(ctx context.Context) error {
	r, err := s.h.Group(ctx, "")
	if err != nil {
		return err
	}
	res, err := r.Propose(ctx, fsm.Command{Kind: fsm.KindKeepAlive, Session: s.def.id, Floor: s.def.floor()})
	if err != nil {
		return err
	}
	if res.Status != fsm.OK {
		// Not ErrSessionExpired, which the caller reads as a wrong
		// secret: the session lives on, and a retry finds where.
		return fmt.Errorf("%w: the session was adopted by another replica meanwhile; try again", replica.ErrUnavailable)
	}
	return nil
}

// findPart returns the ID of s's part in group g: an open with the nonce
// that part was opened with answers the live session holding it, changing
// nothing (a retried open, fsm.KindOpenSession), and opens one, as the
// session's next call naming g would, if it has none. The part it names
// must be resumed before anything else is sent to it: a part found this
// way may hold an earlier holder's requests, whose numbers only a resume
// moves past.
func (s *Session) findPart(ctx context.Context, g string) (uint64, error) {
	r, err := s.h.Group(ctx, g)
	if err != nil {
		return 0, err
	}
	res, err := r.Propose(ctx, fsm.Command{Kind: fsm.KindOpenSession, Nonce: s.o.Nonce(g), TTL: uint64(s.o.TTL),
		Owner: s.h.cfg.ReplicaID, Delay: uint64(s.o.Delay), Name: s.o.Name, Parent: s.parentIn(g)})
	if err != nil {
		return 0, err
	}
	switch {
	case res.Status == fsm.LimitExceeded:
		return 0, fmt.Errorf("open session: %w", LimitError(res.Value))
	case res.Status != fsm.OK:
		return 0, fmt.Errorf("fencelock: open session: %v", res.Status)
	}
	return res.Value, nil
}
