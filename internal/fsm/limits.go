package fsm

// The state limits. Apply refuses a command that would exceed one with
// Status LimitExceeded and Result.Value naming the limit (a Limit), and
// changes nothing else.
//
// They are constants of the state machine, so every replica of a version
// applies the same entry to the same result. Changing one changes what Apply
// does with an entry already in a log: it needs a new state-machine version,
// rolled out like any other change to Apply. Snapshots are not checked
// against them, so raising a limit later stays compatible with old
// snapshots.
//
// They are sized for the benchmark's largest workload (W6: 10,000 sessions
// holding 1,000,000 locks, 100 per session) with ample headroom.
const (
	// MaxSessions is the most sessions a group keeps at once.
	MaxSessions = 100_000
	// MaxLocksPerSession is the most locks and elections one session may
	// hold and wait for, together.
	MaxLocksPerSession = 10_000
	// MaxWaitersPerLock is the longest a lock's (or an election's) queue
	// may grow.
	MaxWaitersPerLock = 10_000
	// MaxPendingPerSession is the most replies a session keeps for requests
	// at or above its floor: requests its client has not acknowledged. A
	// client moves its floor past every request it has an answer for, so
	// this bounds the requests one session has in flight at once. Replies
	// are never evicted to make room (a retry of an evicted request would
	// apply twice): a request beyond the bound is refused instead.
	MaxPendingPerSession = 4096
	// MaxHoldersPerLock is the most grants a lock holds at once in shared
	// mode, and the largest permit count of a semaphore. A shared request
	// beyond it waits (or, without Wait, fails as Locked) like any request
	// the holders do not admit. (Version 3.)
	MaxHoldersPerLock = 10_000
	// MaxLockDelay is the longest lock-delay a session may have, in
	// nanoseconds (60s, Consul's bound): a delay makes a lock unavailable
	// to everyone, and a new leader restarts it in full. (Version 3.)
	MaxLockDelay = 60_000_000_000
	// MaxHoldLimit is the longest maximum hold a grant may have, in
	// nanoseconds (24h, the longest session TTL). (Version 3.)
	MaxHoldLimit = 24 * 3600 * 1_000_000_000
)

// Limit names the limit a LimitExceeded result hit; it is the result's
// Value.
type Limit uint64

// The limits, as reported in Result.Value. Their values are part of the
// wire format.
const (
	LimitSessions        Limit = 1 // MaxSessions
	LimitLocksPerSession Limit = 2 // MaxLocksPerSession
	LimitWaitersPerLock  Limit = 3 // MaxWaitersPerLock
	LimitPendingRequests Limit = 4 // MaxPendingPerSession (version 2)
)

func limitExceeded(l Limit) Result { return Result{Status: LimitExceeded, Value: uint64(l)} }
