package fencelock

import (
	"context"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/lockapi"
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
type LockInfo = lockapi.LockInfo

// Holder is one current grant of a lock.
type Holder = lockapi.Holder

// Waiter is one request waiting for a lock.
type Waiter = lockapi.Waiter

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

// lockInfoEqual reports whether a and b describe the same state.
func lockInfoEqual(a, b LockInfo) bool {
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
