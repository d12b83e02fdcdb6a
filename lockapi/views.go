package lockapi

import "time"

// LockInfo describes a lock as its group sees it: the group its Name's
// "@group" names (the default group for a name without '@'). Token and
// SessionID describe the oldest current grant: for a lock held
// exclusively, its only one. Holders lists every current grant. Tokens are
// that group's. A holder or waiter is shown by its session's ID
// (SessionID) and its part's ID in the lock's group (PartID): the same in
// the default group; in a named group, SessionID is 0 for a part opened
// before the group wrote log version 10, which only PartID names.
type LockInfo struct {
	Name      string
	Held      bool
	Token     uint64 // fencing token of the oldest current grant; 0 when free
	SessionID uint64 // its holder's session; 0 when free or unknown
	PartID    uint64 // its holder's part in the lock's group; 0 when free
	Waiters   int    // requests queued behind the holders
	Shared    bool   // held in shared mode: shared holders, or a semaphore's
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
	// request's position is its index plus one. A listing may cut it
	// short; a watch lists none (Waiters counts them).
	Queue []uint64
	// Waiting is the same waiting requests as Queue, with their sessions'
	// names, their places and when they queued. A watch lists none.
	Waiting []Waiter
	// Delayed: the lock is under a lock-delay (WithLockDelay), and nobody
	// is granted it until the delay ends.
	Delayed bool
	// Err is set only in the one value a watch sends before it closes its
	// channel for a mistake rather than its context: ErrInvalidName or
	// ErrUnknownGroup.
	Err error
}

// Holder is one current grant of a lock.
type Holder struct {
	SessionID uint64 // the holder's session; 0: unknown (see LockInfo)
	PartID    uint64 // its part in the lock's group: SessionID in the default group
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
	SessionID uint64 // its session; 0: unknown (see LockInfo)
	PartID    uint64 // its part in the lock's group: SessionID in the default group
	Name      string // its session's name
	Owner     uint64 // the replica its session lives on
	Shared    bool   // it asks for the lock in shared mode
	Place     int    // its place in the queue: 1 at the head
	// QueuedAt is when it joined the queue, by its proposer's clock; the
	// zero Time: unknown.
	QueuedAt time.Time
}

// LeaderInfo describes the leader of an election as the group sees it. An
// election without a leader has Token 0 and no value or session.
type LeaderInfo struct {
	Election  string
	Value     string
	Token     uint64 // the term's epoch: the fencing token of its grant
	SessionID uint64 // the leader's session; 0 without a leader, or unknown (see LockInfo)
	PartID    uint64 // its part in the election's group: SessionID in the default group
	// SessionName is the leader's session's name (WithSessionName) and
	// ElectedAt when it was elected, by the clock of the replica that
	// proposed the entry electing it (zero: unknown, as for a term begun
	// before the group's log recorded times).
	SessionName string
	ElectedAt   time.Time
	// Err is set only in the one value an observer sends before it closes
	// its channel for a mistake rather than its context: ErrInvalidName
	// for a name that cannot be an election's, ErrUnknownGroup for one
	// whose group is not the deployment's.
	Err error
}
