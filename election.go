package fencelock

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/lockapi"
)

// LeaderInfo describes the leader of an election as the group sees it. An
// election without a leader has Token 0 and no value or session.
type LeaderInfo = lockapi.LeaderInfo

func leaderInfo(e session.ElectionInfo) LeaderInfo {
	return fromLeader(session.LeaderOf(e))
}

func fromLeader(l session.Leader) LeaderInfo {
	id, part := shownIDs(l.Election, l.Session, l.Parent)
	return LeaderInfo{Election: l.Election, Value: l.Value, Token: l.Token, SessionID: id, PartID: part,
		SessionName: l.Name, ElectedAt: unixTime(l.At)}
}

// Leadership is one term of leadership of an election, won by Campaign.
//
// Like a Lock, it is a belief, not a guarantee: a leader that pauses longer
// than its session's TTL may still hold a Leadership whose term the group has
// ended. Stop acting when Done is closed, and carry Token with every action
// the resources it touches can check (see Fencer).
type Leadership struct{ grant *session.Grant }

// Campaign enters the session as a candidate in election, with value (at
// most 4096 bytes, for instance the address where the leader serves), and
// blocks until it is elected. Candidates are elected in the order they
// campaigned: when the leader resigns or its session ends, exactly the next
// candidate leads, with a larger token.
//
// Every Campaign is its own candidate, even in one session. If ctx ends
// while campaigning, the candidate leaves the queue (and resigns, if the
// election raced ahead of the cancel) and Campaign returns ctx.Err(). If the
// group cannot be reached before ctx ends, the error satisfies errors.Is for
// both ErrUnavailable and ctx.Err(), and the candidate is withdrawn. If the
// session ends meanwhile, its error is returned.
//
// Options: WithMaxHold bounds how long the term lasts.
func (s *Session) Campaign(ctx context.Context, election, value string, opts ...AcquireOption) (*Leadership, error) {
	return s.campaign(ctx, election, value, true, opts)
}

// TryCampaign makes the session the election's leader if it has none, and
// otherwise fails at once with ErrElectionTaken without queuing: the
// session is then no candidate. It is Campaign for a caller that must not
// wait (a job that runs only if nobody runs it yet).
func (s *Session) TryCampaign(ctx context.Context, election, value string, opts ...AcquireOption) (*Leadership, error) {
	return s.campaign(ctx, election, value, false, opts)
}

func (s *Session) campaign(ctx context.Context, election, value string, wait bool, opts []AcquireOption) (*Leadership, error) {
	g, err := s.s.Campaign(ctx, election, value, wait, acquireOpts(opts))
	if err != nil {
		return nil, err
	}
	return &Leadership{grant: g}, nil
}

// Session returns the session that leads; nil for the zero Leadership.
func (l *Leadership) Session() *Session { return owner(l.g()) }

// Election returns the election's name.
func (l *Leadership) Election() string { return l.g().Name() }

// Token returns the term's epoch: the fencing token of its grant. Every new
// term of any election or lock in the group gets a larger one, across leader
// changes and restarts.
func (l *Leadership) Token() uint64 { return l.g().Token() }

// Value returns the leader's value: the one it campaigned with, or the last
// one it proclaimed.
func (l *Leadership) Value() string { return l.g().Value() }

// Done is closed when this leader must stop acting: it resigned, its
// session ended (expired, closed, node closed), or — by the leader's own
// clock — its session could not be renewed within TTL minus the safety
// margin, so that it stops before the group could elect the next candidate.
//
// Like Session.Done, it checks the session's deadline when called.
func (l *Leadership) Done() <-chan struct{} { return l.g().Done() }

// Err returns nil while this term lasts and, once Done is closed, why:
// ErrNotLeader after Resign, context.Canceled if the Campaign was cancelled
// as it was elected, ErrMaxHoldExceeded after its maximum hold, or the
// session's error.
func (l *Leadership) Err() error { return l.g().Err() }

// Proclaim replaces the leader's value, keeping the term and its token;
// observers see the new value. It fails with ErrNotLeader if the term is
// over, at the group or for this leader, and with ErrValueTooLarge if value
// is longer than 4096 bytes. When Done is already closed Proclaim does not
// ask the group, and its error also wraps Err's reason (errors.Is(err,
// ErrSessionExpired), say): the term may still last at the group for a
// while, but this leader has stopped.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	return l.g().Proclaim(ctx, value)
}

// Resign ends this term: the next candidate in line, if any, leads at once
// with a larger token. If the term was already over at the group, nothing
// changes and the error is ErrNotLeader, so a late Resign never deposes a
// successor. Done is closed either way once the group answered.
func (l *Leadership) Resign(ctx context.Context) error { return l.g().GiveBack(ctx) }

// g is the leadership's grant; the zero Leadership (and a nil one) has one
// that is already over.
func (l *Leadership) g() *session.Grant {
	if l == nil || l.grant == nil {
		return neverLeadership
	}
	return l.grant
}

// Leader returns the election's current leader, or ErrNoLeader. It is a
// linearizable read: it reflects every change completed before it began,
// wherever it was made.
func (n *Node) Leader(ctx context.Context, election string) (LeaderInfo, error) {
	e, err := n.h.Election(ctx, election)
	if err != nil {
		return LeaderInfo{}, err
	}
	info := leaderInfo(e)
	if info.Token == 0 {
		return info, fmt.Errorf("%w: %q", ErrNoLeader, truncate(election, 64))
	}
	return info, nil
}

// Candidate is a candidate queued in an election.
type Candidate struct {
	SessionID uint64 // its session (Session.ID); 0: unknown (see LockInfo)
	PartID    uint64 // its part in the election's group (Session.IDIn): SessionID in the default group
	Value     string // the value it will lead with
	Replica   uint64 // the replica its session lives on
	Name      string // its session's name (WithSessionName)
	Place     int    // its place in the queue: 1 leads next
	// QueuedAt is when it campaigned, by its proposer's clock; the zero
	// Time: unknown.
	QueuedAt time.Time
}

// Candidates is an election's leader and its queued candidates, in the
// order they will lead. The election lives in one group, the one its
// name's "@group" names: its PartIDs are IDs in that group
// (Session.IDIn), its SessionIDs Session.IDs (see LockInfo).
type Candidates struct {
	Leader LeaderInfo
	Queue  []Candidate // the first ListLimit (default DefaultListLimit)
	Total  int         // how many are queued in all
}

// Candidates returns the election's leader and queue (Curator's
// getParticipants). It is a linearizable read: it reflects every campaign,
// resignation and expiry completed before it began.
func (n *Node) Candidates(ctx context.Context, election string, opts ...ListOption) (Candidates, error) {
	e, queue, err := n.h.Candidates(ctx, election, listOpts(opts))
	if err != nil {
		return Candidates{}, err
	}
	out := Candidates{Leader: leaderInfo(e), Total: e.Candidates, Queue: make([]Candidate, len(queue))}
	for i, c := range queue {
		id, part := shownIDs(election, c.Session, c.Parent)
		out.Queue[i] = Candidate{SessionID: id, PartID: part, Value: c.Value, Replica: c.Owner, Name: c.Name, Place: c.Place,
			QueuedAt: unixTime(c.QueuedAt)}
	}
	return out, nil
}

// ElectionDetail describes an election in a listing.
type ElectionDetail struct {
	LeaderInfo     // its leader: Token 0 without one
	Candidates int // candidates queued behind the leader
}

// ElectionPage is one page of Elections.
type ElectionPage struct {
	Elections []ElectionDetail // in name order
	More      bool             // more elections match: ask again with ListAfter(last name)
}

// Elections lists the elections whose names start with prefix (those that
// have a leader or candidates), in name order, one page at a time, with
// their leaders' session names and since when they lead. It is a
// linearizable read, like Locks, and costs the group like it, over the
// elections: prefix@group lists group's elections.
func (n *Node) Elections(ctx context.Context, prefix string, opts ...ListOption) (ElectionPage, error) {
	es, more, err := n.h.Elections(ctx, prefix, listOpts(opts))
	if err != nil {
		return ElectionPage{}, err
	}
	out := ElectionPage{Elections: make([]ElectionDetail, len(es)), More: more}
	for i, e := range es {
		out.Elections[i] = ElectionDetail{LeaderInfo: leaderInfo(e), Candidates: e.Candidates}
	}
	return out, nil
}
