package fencelock

import (
	"context"
	"slices"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// LockInfo describes a lock as its group sees it: the group its Name's
// "@group" names (the default group for a name without '@'). Token and
// SessionID describe the oldest current grant: for a lock held
// exclusively, its only one. Holders lists every current grant. Tokens are
// that group's, and session IDs are IDs in that group: in a named group,
// the ID of the holder's part there (Session.IDIn), not Session.ID.
type LockInfo struct {
	Name      string
	Held      bool
	Token     uint64 // fencing token of the oldest current grant; 0 when free
	SessionID uint64 // its holder's session; 0 when free
	Waiters   int    // requests queued behind the holders
	Shared    bool   // held in shared mode: AcquireShared's holders, or a semaphore's
	Permits   int    // a semaphore's permit count; 0 for a lock
	// Holders is every current grant, oldest (lowest token) first; nil when
	// free.
	Holders []Holder
	// Queue is the sessions of the waiting requests, head first: a
	// request's position is its index plus one. Inspect lists them all,
	// Locks the first QueueListed; Watch lists none (Waiters counts them).
	Queue []uint64
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
	SessionID uint64
	Token     uint64
	Owner     uint64        // the replica the holder's session lives on
	MaxHold   time.Duration // the grant's maximum hold (WithMaxHold); 0: none
}

// equal reports whether a and b describe the same state.
func (a LockInfo) equal(b LockInfo) bool {
	return a.Name == b.Name && a.Held == b.Held && a.Token == b.Token && a.SessionID == b.SessionID &&
		a.Waiters == b.Waiters && a.Shared == b.Shared && a.Permits == b.Permits && a.Err == b.Err &&
		a.Delayed == b.Delayed &&
		slices.Equal(a.Holders, b.Holders) && slices.Equal(a.Queue, b.Queue)
}

// Inspect returns the lock's state in the group its name lives in. It is a
// linearizable read of that group: it reflects every change completed
// before it began, wherever it was made, and it needs that group's quorum
// only. A name whose "@group" the deployment does not run fails with
// ErrUnknownGroup.
func (n *Node) Inspect(ctx context.Context, name string) (LockInfo, error) {
	if !fsm.ValidName(name) {
		return LockInfo{}, invalidName(name)
	}
	_, r, err := n.route(name)
	if err != nil {
		return LockInfo{}, err
	}
	type both struct {
		info  fsm.LockInfo
		queue []uint64
	}
	v, err := r.Read(ctx, func(st *fsm.State) any {
		return both{st.Lock(name), st.Queue(name, fsm.MaxWaitersPerLock)}
	})
	if err != nil {
		return LockInfo{}, err
	}
	info := lockInfo(v.(both).info)
	info.Queue = v.(both).queue
	return info, nil
}

func lockInfo(l fsm.LockInfo) LockInfo {
	info := LockInfo{Name: l.Name, Held: l.Held, Token: l.Token, SessionID: l.Session, Waiters: l.Waiters,
		Shared: l.Shared, Permits: int(l.Permits), Delayed: l.Delayed}
	if l.Holders != nil {
		info.Holders = make([]Holder, len(l.Holders))
		for i, h := range l.Holders {
			info.Holders[i] = Holder{SessionID: h.Session, Token: h.Token, Owner: h.Owner,
				MaxHold: time.Duration(h.MaxHold)}
		}
	}
	return info
}
