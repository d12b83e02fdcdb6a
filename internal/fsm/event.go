package fsm

// EventKind names an event.
type EventKind uint8

// The events Apply reports. They are not state: each replica uses them to
// wake the local callers a change concerns (the replica where a session lives
// delivers its grants) and to feed the leader's expiry timers, so nobody polls.
const (
	// EventTouched: Session was opened or renewed at keep-alive index Index;
	// TTL is its time to live in nanoseconds.
	EventTouched EventKind = iota + 1
	// EventGranted: request Seq of Session now holds lock Name with Token
	// (one of its holders, if Shared).
	EventGranted
	// EventFreed: the grant Token of lock Name to request Seq of Session ended
	// for Reason.
	EventFreed
	// EventSessionEnded: Session ended for Reason; its EventFreed and
	// EventDeposed events were reported before this one.
	EventSessionEnded
	// EventElected: request Seq of Session now leads election Name with
	// Token (the term's epoch) and Value.
	EventElected
	// EventDeposed: the leadership Token of request Seq of Session in
	// election Name ended for Reason (ReasonReleased: it resigned). An
	// EventElected of the next candidate follows in the same entry, if any.
	EventDeposed
	// EventProclaimed: the leader (Session, Seq, Token) of election Name
	// set its Value.
	EventProclaimed
	// EventLeaderStarted: the raft leader Owner of term Term took office at
	// Index, the group's new leader mark; Group is the group's ID.
	EventLeaderStarted
	// EventQueued: request Seq of Session joined the queue of lock Name
	// (with Election, the candidates of election Name).
	EventQueued
	// EventUnqueued: request Seq of Session left the queue of lock Name
	// (with Election, the candidates of election Name):
	// granted (an EventGranted follows), cancelled, or its session ended.
	EventUnqueued
	// EventResumed: Session was resumed by the attempt Target; its
	// EventTouched and EventKept events follow.
	EventResumed
	// EventKept: Session was resumed and keeps request Seq's grant Token of
	// lock Name (with Election, its leadership of election Name, with
	// Value). Reported after the resume's EventTouched, one per grant.
	EventKept
	// EventDelayed: lock Name is under a lock-delay of TTL nanoseconds,
	// begun when grant Token of Session ended (Reason: the session expired,
	// or an operator ended it): nobody is granted it until an Undelay
	// naming Token applies. Reported after the grant's EventFreed. The
	// leader's timer proposes the Undelay. (Version 3.)
	EventDelayed
	// EventUndelayed: the lock-delay of lock Name begun by grant Token
	// ended; the grants it let through follow. (Version 3.)
	EventUndelayed
	// EventRenewed: the Sessions of replica Owner were renewed at
	// keep-alive index Index by a keep-alive batch, as an EventTouched
	// each would have (their TTLs are those they were opened with). The
	// slice is the event's own. (Version 4.)
	EventRenewed
	// EventKeptQueued: Session was resumed with Keep and keeps request
	// Seq in the queue of lock Name (with Election, as a candidate in
	// election Name), in its place, in shared mode if Shared (Permits:
	// the semaphore's count), with maximum hold MaxHold. Reported after
	// the resume's EventKept events, in request order. (Version 8.)
	EventKeptQueued
	// EventGateRaised: the group writes the versions of Gate from the entry
	// at Index on (KindGate). (Version 9.)
	EventGateRaised
	// EventDropped: request Seq of Session, in the queue of lock Name
	// (with Election, a candidate in election Name), was withdrawn by the
	// group's seal (KindSeal), after its EventUnqueued: the group is being
	// dropped and will never grant it; its reply is Dropped. (Version 11.)
	EventDropped
)

// Reason says why a grant or a session ended.
type Reason uint8

// The reasons.
const (
	ReasonReleased  Reason = iota + 1 // the holder released the lock, or the leader resigned
	ReasonCancelled                   // the holder's request was cancelled after it was granted
	ReasonExpired                     // the session expired at the group
	ReasonClosed                      // the session was closed by its holder
	ReasonRevoked                     // an operator revoked the grant, or ended the session
	ReasonMaxHold                     // the grant's maximum hold ran out (version 3)
)

func (r Reason) String() string {
	switch r {
	case ReasonReleased:
		return "released"
	case ReasonCancelled:
		return "cancelled"
	case ReasonExpired:
		return "expired"
	case ReasonClosed:
		return "closed"
	case ReasonRevoked:
		return "revoked"
	case ReasonMaxHold:
		return "max-hold"
	}
	return "unknown"
}

// Event is one change reported by Apply.
type Event struct {
	Kind     EventKind
	Reason   Reason
	Session  uint64
	Seq      uint64
	Token    uint64
	Index    uint64
	Target   uint64 // EventResumed: the resume's attempt ID
	TTL      uint64
	Owner    uint64 // EventLeaderStarted: the leader's replica ID
	Term     uint64 // EventLeaderStarted: its raft term
	Group    uint64 // EventLeaderStarted: the group's ID
	Election bool   // EventKept, EventKeptQueued, EventQueued, EventUnqueued, EventDropped: Name is an election
	Name     string
	Value    string // EventElected, EventProclaimed: the leader's value
	// SessionName, At and Parent are an EventElected's or
	// EventProclaimed's leader: its session's name, when it was elected
	// (the At of the command whose apply made the grant; 0: unknown) and
	// the session its part belongs to (Command.Parent; 0: none or
	// unknown), so that an observer following the events names the leader
	// as a read would.
	SessionName string
	At          uint64
	Parent      uint64
	// Shared marks an EventGranted or EventFreed of a grant in shared mode
	// (of a shared lock, or of a semaphore); Permits is then the
	// semaphore's permit count, 0 for a lock. (Version 3.)
	Shared  bool
	Permits uint64
	// MaxHold is an EventGranted's or EventElected's maximum hold in
	// nanoseconds (0: none), for the leader's timer. (Version 3.)
	MaxHold uint64
	// Sessions are an EventRenewed's sessions, in the batch's order.
	Sessions []uint64
	// Gate is an EventGateRaised's: the versions the group now writes.
	Gate Gate
}
