package fencelock

import (
	"context"

	"github.com/fencelock/fencelock/internal/fsm"
)

// LockInfo describes a lock as the group sees it.
type LockInfo struct {
	Name      string
	Held      bool
	Token     uint64 // fencing token of the current grant; 0 when free
	SessionID uint64 // holder's session; 0 when free
	Waiters   int    // requests queued behind the holder
	// Err is set only in the one value Watch sends before it closes its
	// channel for a mistake rather than ctx: ErrInvalidName.
	Err error
}

// Inspect returns the lock's state. It is a linearizable read: it reflects
// every change completed before it began, wherever it was made.
func (n *Node) Inspect(ctx context.Context, name string) (LockInfo, error) {
	if !fsm.ValidName(name) {
		return LockInfo{}, invalidName(name)
	}
	v, err := n.r.Read(ctx, func(st *fsm.State) any { return st.Lock(name) })
	if err != nil {
		return LockInfo{}, err
	}
	return lockInfo(v.(fsm.LockInfo)), nil
}

func lockInfo(l fsm.LockInfo) LockInfo {
	return LockInfo{Name: l.Name, Held: l.Held, Token: l.Token, SessionID: l.Session, Waiters: l.Waiters}
}
