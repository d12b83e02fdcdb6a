package fencelock

import (
	"context"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/session"
)

// LockInfo describes a lock as its group sees it: the group its Name's
// "@group" names (the default group for a name without '@'). Token and
// SessionID describe the oldest current grant: for a lock held
// exclusively, its only one. Holders lists every current grant. Tokens are
// that group's. A holder or waiter is shown by its session's ID
// (SessionID, Session.ID) and its part's ID in the lock's group (PartID,
// Session.IDIn): the same in the default group; in a named group,
// SessionID is 0 for a part opened before the group wrote log version 10,
// which only PartID names (see Session.IDIn and docs/operations.md).
type LockInfo struct {
	Name      string
	Held      bool
	Token     uint64 // fencing token of the oldest current grant; 0 when free
	SessionID uint64 // its holder's session (Session.ID); 0 when free or unknown
	PartID    uint64 // its holder's part in the lock's group (Session.IDIn); 0 when free
	Waiters   int    // requests queued behind the holders
	Shared    bool   // held in shared mode: AcquireShared's holders, or a semaphore's
	Permits   int    // a semaphore's permit count; 0 for a lock
	// SessionName is the oldest current grant's session's name (see
	// WithSessionName); "" when free, or for a session opened before
	// sessions had names.
	SessionName string
	// GrantedAt is when the oldest current grant was made (see
	// Holder.GrantedAt); zero when free or unknown.
	GrantedAt time.Time
	// Holders is every current grant, oldest (lowest token) first; nil when
	// free.
	Holders []Holder
	// Queue is the sessions of the waiting requests (their SessionIDs, 0
	// for unknown: see Waiting for their PartIDs), head first: a
	// request's position is its index plus one. Inspect lists them all,
	// Locks the first QueueListed; Watch lists none (Waiters counts them).
	Queue []uint64
	// Waiting is the same waiting requests as Queue, with their sessions'
	// names, their places and when they queued. Watch lists none.
	Waiting []Waiter
	// Delayed: the lock is under a lock-delay (a session opened
	// WithLockDelay that held it expired, or an operator ended it), and
	// nobody is granted it until the delay ends. When that is, is the
	// group leader's timer's to know: the state holds no clock.
	Delayed bool
	// Err is set only in the one value Watch sends before it closes its
	// channel for a mistake rather than ctx: ErrInvalidName or
	// ErrUnknownGroup.
	Err error
}

// Holder is one current grant of a lock.
type Holder struct {
	SessionID uint64 // the holder's session (Session.ID); 0: unknown (see LockInfo)
	PartID    uint64 // its part in the lock's group (Session.IDIn): SessionID in the default group
	Token     uint64
	Owner     uint64        // the replica the holder's session lives on
	MaxHold   time.Duration // the grant's maximum hold (WithMaxHold); 0: none
	// Name is the holder's session's name (WithSessionName): who holds it.
	// "" for a session opened before sessions had names.
	Name string
	// GrantedAt is when the grant was made, by the clock of the replica
	// that proposed the entry granting it (the acquire, or the release or
	// expiry that passed the lock on); time.Since(GrantedAt) is how long
	// it has been held, as far as the clocks agree. The zero Time: unknown
	// (a grant made before the group recorded times).
	GrantedAt time.Time
}

// HeldFor returns how long the grant has been held by now's clock, or 0
// if its grant time is unknown.
func (h Holder) HeldFor(now time.Time) time.Duration {
	if h.GrantedAt.IsZero() {
		return 0
	}
	return max(now.Sub(h.GrantedAt), 0)
}

// Waiter is one request waiting for a lock.
type Waiter struct {
	SessionID uint64 // its session (Session.ID); 0: unknown (see LockInfo)
	PartID    uint64 // its part in the lock's group (Session.IDIn): SessionID in the default group
	Name      string // its session's name
	Owner     uint64 // the replica its session lives on
	Shared    bool   // it asks for the lock in shared mode
	Place     int    // its place in the queue: 1 at the head
	// QueuedAt is when it joined the queue, by its proposer's clock; the
	// zero Time: unknown.
	QueuedAt time.Time
}

// unixTime converts a time the group stored (nanoseconds since the Unix
// epoch; 0 for unknown) to a Time, the zero Time for unknown.
func unixTime(ns uint64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(ns))
}

// waiters converts the waiting requests of lock name.
func waiters(name string, ws []session.Waiter) []Waiter {
	if ws == nil {
		return nil
	}
	out := make([]Waiter, len(ws))
	for i, w := range ws {
		id, part := shownIDs(name, w.Session, w.Parent)
		out[i] = Waiter{SessionID: id, PartID: part, Name: w.Name, Owner: w.Owner, Shared: w.Shared, Place: w.Place,
			QueuedAt: unixTime(w.QueuedAt)}
	}
	return out
}

// equal reports whether a and b describe the same state.
func (a LockInfo) equal(b LockInfo) bool {
	return a.Name == b.Name && a.Held == b.Held && a.Token == b.Token && a.SessionID == b.SessionID && a.PartID == b.PartID &&
		a.Waiters == b.Waiters && a.Shared == b.Shared && a.Permits == b.Permits && a.Err == b.Err &&
		a.Delayed == b.Delayed && a.SessionName == b.SessionName && a.GrantedAt.Equal(b.GrantedAt) &&
		slices.Equal(a.Holders, b.Holders) && slices.Equal(a.Queue, b.Queue) && slices.Equal(a.Waiting, b.Waiting)
}

// Inspect returns the lock's state in the group its name lives in. It is a
// linearizable read of that group: it reflects every change completed
// before it began, wherever it was made, and it needs that group's quorum
// only. A name whose "@group" the deployment does not run fails with
// ErrUnknownGroup.
func (n *Node) Inspect(ctx context.Context, name string) (LockInfo, error) {
	v, err := n.h.Inspect(ctx, name)
	if err != nil {
		return LockInfo{}, err
	}
	return lockView(v), nil
}

// lockView is a lock with its waiting requests.
func lockView(v session.LockView) LockInfo {
	info := lockInfo(v.Info)
	info.Waiting = waiters(v.Info.Name, v.Waiting)
	info.Queue = queueOf(v.Info.Name, v.Queue, info.Waiting)
	return info
}

// queueOf is the Queue of lock name: the SessionIDs of waiting, which
// names the same requests as parts, the part IDs the group listed them by
// (nil stays nil). A part waiting does not name is shown as one whose
// session is unknown.
func queueOf(name string, parts []uint64, waiting []Waiter) []uint64 {
	if parts == nil {
		return nil
	}
	out := make([]uint64, len(parts))
	for i := range out {
		out[i], _ = shownIDs(name, parts[i], 0)
		if i < len(waiting) && waiting[i].PartID == parts[i] {
			out[i] = waiting[i].SessionID
		}
	}
	return out
}

func lockInfo(l session.LockInfo) LockInfo {
	id, part := shownIDs(l.Name, l.Session, l.Parent)
	if !l.Held {
		id, part = 0, 0
	}
	info := LockInfo{Name: l.Name, Held: l.Held, Token: l.Token, SessionID: id, PartID: part, Waiters: l.Waiters,
		Shared: l.Shared, Permits: int(l.Permits), Delayed: l.Delayed, SessionName: l.SessionName,
		GrantedAt: unixTime(l.GrantedAt)}
	if l.Holders != nil {
		info.Holders = make([]Holder, len(l.Holders))
		for i, h := range l.Holders {
			id, part := shownIDs(l.Name, h.Session, h.Parent)
			info.Holders[i] = Holder{SessionID: id, PartID: part, Token: h.Token, Owner: h.Owner,
				MaxHold: time.Duration(h.MaxHold), Name: h.Name, GrantedAt: unixTime(h.GrantedAt)}
		}
	}
	return info
}
