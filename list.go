package fencelock

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/internal/session"
)

// ListOption configures Locks and Sessions.
type ListOption func(*listOptions)

type listOptions struct {
	limit   int
	after   string
	afterID uint64
}

// The page sizes of Locks and Sessions, and how many waiting sessions a
// LockDetail names.
const (
	DefaultListLimit = session.DefaultListLimit
	MaxListLimit     = session.MaxListLimit
	QueueListed      = session.QueueListed
)

// ListLimit sets how many entries a page holds: 1 to MaxListLimit, default
// DefaultListLimit.
func ListLimit(n int) ListOption { return func(o *listOptions) { o.limit = n } }

// ListAfter starts a page of Locks after the lock called name: pass the
// last name of the previous page.
func ListAfter(name string) ListOption { return func(o *listOptions) { o.after = name } }

// ListAfterSession starts a page of Sessions after session id: pass the
// last PartID of the previous page (in the default group, its ID).
func ListAfterSession(id uint64) ListOption { return func(o *listOptions) { o.afterID = id } }

// listOpts folds opts into a page's query; the listing checks it
// (internal/session).
func listOpts(opts []ListOption) session.ListQuery {
	o := listOptions{limit: DefaultListLimit}
	for _, f := range opts {
		f(&o)
	}
	return session.ListQuery{Limit: o.limit, After: o.after, AfterID: o.afterID}
}

// LockDetail describes a held lock in a listing: its Queue names the
// sessions of the first QueueListed waiting requests, head first, and
// Waiting the same requests with their sessions' names and places (Waiters
// counts them all).
type LockDetail struct {
	LockInfo        // name, holders, tokens, waiters
	Owner    uint64 // the replica the oldest holder's session lives on
	// Group is the group the lock lives in ("" is the default group): its
	// tokens are that group's, and its PartIDs are IDs in it (see
	// LockInfo for SessionID and PartID).
	Group string
}

// LockPage is one page of Locks.
type LockPage struct {
	// Group is the group listed: the prefix's "@group", "" for the
	// default group or, with AllGroups, for every group. Every SessionID
	// in the page is a Session.ID, every PartID an ID in its lock's Group.
	Group string
	// AllGroups: the prefix named no group, and the page lists the locks
	// of every group this deployment runs, each with its Group.
	AllGroups bool
	Locks     []LockDetail // in name order
	More      bool         // more locks match: ask again with ListAfter(last name)
}

// Locks lists the held locks whose names start with prefix, in name order,
// one page at a time. It is a linearizable read, like Inspect.
//
// A prefix with an '@' lists one group: the group after its last '@'
// ("@billing" lists all of billing's locks, "jobs/@billing" those
// starting "jobs/"); a group this deployment does not run fails with
// ErrUnknownGroup. A prefix without '@' ("" lists everything) lists every
// group the deployment runs, merged in name order (AllGroups): a named
// group's names carry their "@group", so the default group's "jobs/a"
// and billing's "jobs/a@billing" are both listed, and each lock's Group
// says where it lives. Such a page needs every group's quorum, and fails
// with the error of a group it could not read (its name in the message).
//
// A page costs each group it lists one pass over its whole lock table, on
// every replica's apply path, during which that replica applies nothing
// (see docs/performance.md for the cost). List sparingly on a large
// group, with large pages; name the group when you know it.
func (n *Node) Locks(ctx context.Context, prefix string, opts ...ListOption) (LockPage, error) {
	p, err := n.h.Locks(ctx, prefix, listOpts(opts))
	if err != nil {
		return LockPage{}, err
	}
	out := LockPage{Group: p.Group, AllGroups: p.AllGroups, Locks: make([]LockDetail, len(p.Locks)), More: p.More}
	for i, l := range p.Locks {
		out.Locks[i] = LockDetail{LockInfo: lockInfo(l.LockInfo), Owner: l.Owner, Group: l.Group}
		out.Locks[i].Waiting = waiters(l.Name, l.Waiting)
		out.Locks[i].Queue = queueOf(l.Name, l.Queue, out.Locks[i].Waiting)
	}
	return out, nil
}

// Contended returns the count locks with the longest queues (at most
// MaxContended; 1 to MaxContended, else ErrInvalidConfig), longest first
// and, among queues of one length, in name order: each with its holders,
// their session names and grant times, and its queue's length (Waiters).
// Queue and Waiting name the first QueueListed waiters, as in Locks. A lock
// nobody waits for is never listed. It is a linearizable read, like
// Inspect, of the default group; ContendedIn reads another group.
//
// It answers "what is everyone waiting for?": the group keeps its
// contended locks apart from the rest, so it costs the group in proportion
// to the locks anyone waits for, not to all the locks held.
func (n *Node) Contended(ctx context.Context, count int) ([]LockInfo, error) {
	return n.ContendedIn(ctx, "", count)
}

// MaxContended is the most locks Contended returns.
const MaxContended = session.MaxContended

// ContendedIn is Contended in the group called group ("" is the default
// group); an error wrapping ErrUnknownGroup if this deployment has none
// of that name.
func (n *Node) ContendedIn(ctx context.Context, group string, count int) ([]LockInfo, error) {
	got, err := n.h.Contended(ctx, group, count)
	if err != nil {
		return nil, err
	}
	out := make([]LockInfo, len(got))
	for i, l := range got {
		out[i] = lockView(l)
	}
	return out, nil
}

// SessionInfo describes an open session: in a named group, one part of a
// Session (see Session.IDIn). ID is the session's (Session.ID), PartID the
// part's in the group listed (Session.IDIn), which pages go by: the same
// in the default group; in a named group, ID is 0 for a part opened
// before the group wrote log version 10 (see LockInfo).
type SessionInfo struct {
	ID     uint64
	PartID uint64
	// Name is the session's name (WithSessionName; an HTTP session's
	// "name", else its client's address); "" for a session opened before
	// sessions had names.
	Name  string
	Owner uint64 // the replica the session lives on (where it was opened)
	TTL   time.Duration
	// KeepAliveIndex is the log index of the entry that last renewed it:
	// it rises with every renewal the group applied.
	KeepAliveIndex uint64
	Held, Waiting  int // locks held, requests queued
}

// SessionPage is one page of Sessions.
type SessionPage struct {
	Group    string        // the group listed; "" for the default group
	Sessions []SessionInfo // in PartID order (in the default group, ID order)
	More     bool          // more sessions: ask again with ListAfterSession(last PartID)
}

// Sessions lists the open sessions of the default group, wherever they
// live, in ID order, one page at a time: SessionsIn of "". Each is a
// Session, by its ID (Session.ID).
func (n *Node) Sessions(ctx context.Context, opts ...ListOption) (SessionPage, error) {
	return n.SessionsIn(ctx, "", opts...)
}

// SessionsIn lists the open sessions of group ("" is the default group),
// wherever they live, in PartID order, one page at a time. It is a
// linearizable read and costs like Locks. In a named group each entry is
// the part a Session opened there: its ID is the session's (Session.ID,
// 0 if unknown: see SessionInfo) and its PartID the part's own
// (Session.IDIn), as that group's LockInfo, Holders and Waiting show
// them; a session that never used the group has no entry in it. A group
// this deployment does not run fails with ErrUnknownGroup.
func (n *Node) SessionsIn(ctx context.Context, group string, opts ...ListOption) (SessionPage, error) {
	sessions, more, err := n.h.Sessions(ctx, group, listOpts(opts))
	if err != nil {
		return SessionPage{}, err
	}
	out := SessionPage{Group: group, Sessions: make([]SessionInfo, len(sessions)), More: more}
	for i, s := range sessions {
		id, part := shownIDsIn(group, s.ID, s.Parent)
		out.Sessions[i] = SessionInfo{ID: id, PartID: part, Name: s.Name, Owner: s.Owner, TTL: time.Duration(s.TTL),
			KeepAliveIndex: s.KeepAlive, Held: s.Held, Waiting: s.Waiting}
	}
	return out, nil
}
