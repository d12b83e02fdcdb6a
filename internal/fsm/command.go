// Package fsm is fencelock's replicated lock state machine: sessions, named
// exclusive locks with FIFO wait queues, elections with FIFO candidate
// queues, and fencing tokens.
//
// The package is pure and deterministic. State.Apply is a function of the
// current state, the raft log index of the entry and the commands it carries:
// it never reads a clock, a random source or a map's iteration order into
// state, tokens or results. Time enters only as values inside commands (a
// session's TTL, an entry's proposal time At, which grants record for the
// views) and as Expire commands proposed by the raft leader's timers.
// Exactly one file, dragonboat.go, binds the state machine to Dragonboat.
//
// The package is internal on purpose: its codec, queries and observer
// interfaces are the replica's machinery, not a promise to users, and a
// change to any of them ships as a new state-machine version. The few values
// users need (the limits) are re-exported by the root package.
package fsm

// Kind names a command.
type Kind uint8

// The command kinds. Their numeric values are part of the wire format.
const (
	// KindOpenSession creates a session. Nonce makes a retried open return the
	// session the first attempt created; TTL and Owner are recorded for the
	// leader's expiry timers and for inspection, and Delay (version 3) is
	// the session's lock-delay. Name (version 6) is the session's name, for
	// people to read in every view of a holder or a waiter: at most
	// MaxSessionNameLen bytes of UTF-8 without NUL, else the open is
	// refused (Invalid, Value InvalidSessionName). A retried open returns
	// the first attempt's session whatever name it carries. Parent
	// (version 10) is the session the new one is a part of: see
	// Command.Parent.
	KindOpenSession Kind = 1
	// KindKeepAlive renews Session; the entry's index becomes the session's
	// keep-alive index, which a later Expire must name.
	KindKeepAlive Kind = 2
	// KindCloseSession ends Session at its holder's request, freeing its locks.
	KindCloseSession Kind = 3
	// KindAcquire asks for lock Name on behalf of request Seq of Session. If the
	// lock is held, Wait queues the request; without Wait it fails with Locked.
	// A MaxHold (version 3; also AcquireShared's and Campaign's) bounds how
	// long the grant lasts: see KindExpireGrant.
	KindAcquire Kind = 4
	// KindRelease frees lock Name if Session holds it with grant Token.
	KindRelease Kind = 5
	// KindCancel withdraws request Target of Session, an Acquire of lock Name
	// (or, with Election, a Campaign in election Name): it leaves the queue,
	// or, if the grant raced ahead of the cancel, the lock is released.
	KindCancel Kind = 6
	// KindExpire ends Session if its keep-alive index is still Target and
	// Mark is still the group's leader mark: the leader proposes it when its
	// timer for that keep-alive runs out, naming the LeaderStart entry of its
	// own term, so an expiry decided by a deposed leader never applies once
	// its successor took office.
	KindExpire Kind = 7
	// KindCampaign enters request Seq of Session as a candidate in election
	// Name with Value. With no leader it leads at once; else, with Wait, it
	// queues behind the other candidates, and without it fails with Locked
	// (version 2; version 1 always waited). Elections and locks are separate
	// namespaces.
	KindCampaign Kind = 8
	// KindResign ends the leadership Token of Session in election Name; the
	// head of the candidate queue leads in the same entry.
	KindResign Kind = 9
	// KindProclaim replaces the value of election Name if Session leads it
	// with Token: the term and its token stay.
	KindProclaim Kind = 10
	// KindLeaderStart is the first command a raft leader proposes in its term
	// Term, as replica Owner: the entry's index becomes the group's leader
	// mark. The leader's expiry timers start when it applies, so every
	// session gets a full TTL from the new leader before it can expire.
	// Nonce is a random number: the first LeaderStart the group applies
	// makes its Nonce the group's ID for good. (Version 2.)
	KindLeaderStart Kind = 11
	// KindRevoke is an operator's: it ends the grant of lock Name (with
	// Election, the leadership of election Name) whoever holds it, if its
	// token is Token (0: whatever grant is current), and the head of the
	// queue is granted in the same entry. (Version 2.) With token 0, a lock
	// held in shared mode (or a semaphore) loses every current grant, in
	// token order, before its queue is granted. From version 5, a lock
	// whose holder's session has a lock-delay is delayed rather than
	// granted, as when an operator ends the session (KindEndSession): the
	// holder did not choose to stop. Older revokes free it at once. From
	// version 7 it carries Op: see Command.Op.
	KindRevoke Kind = 12
	// KindEndSession is an operator's: it ends Session as an expiry would,
	// freeing its locks and withdrawing its requests, whoever owns it.
	// (Version 2.) From version 7 it carries Op: see Command.Op.
	KindEndSession Kind = 13
	// KindResume is a restarted holder taking Session back: if Nonce is the
	// nonce the session was opened with (its secret), the session moves to
	// replica Owner, is renewed as by a keep-alive, withdraws every queued
	// request and candidacy (nobody waits for them any more), and keeps its
	// locks and leaderships with their tokens. Its floor jumps past every
	// request number its earlier incarnation could have used, and from then
	// on a command whose Floor lies below that jump is answered
	// UnknownSession, so a process that still runs the old incarnation
	// finds its session over instead of acting for the new one. A wrong
	// nonce is answered UnknownSession too, telling nothing. Target is the
	// attempt's random ID: a retry of the same attempt (one the session
	// applied last) changes nothing and gets the same reply. (Version 3.)
	// From version 5 it carries TTL, the holder's idea of the session's
	// TTL (from its resume token): unless it is the session's, nothing
	// changes and the reply is Conflict with the session's TTL as Value, so
	// a holder never times a lease by a TTL the group does not keep.
	// From version 8 it carries Keep: see Command.Keep. From version 11
	// an adoption (Keep) may be fenced: see Command.Fence.
	KindResume Kind = 14

	// KindAcquireShared asks, like Acquire, for lock Name on behalf of
	// request Seq of Session, in shared mode: with Permits 0, as one of the
	// shared holders of a shared/exclusive lock; with Permits n, as one of
	// at most n holders of the semaphore Name. Requests wait in one FIFO
	// queue with the lock's exclusive ones, and the head of the queue is
	// granted as soon as the holders admit it, so consecutive shared
	// requests at the head are granted together and none overtakes an
	// exclusive request queued before it. A lock that exists with another
	// permit count (a semaphore of another count, or a lock, for a
	// semaphore's request; a semaphore, for a lock's) fails the request
	// with Conflict. (Version 3.)
	KindAcquireShared Kind = 15

	// KindUndelay ends the lock-delay of lock Name if it is still the delay
	// that began when grant Token ended, and Mark is still the group's
	// leader mark; the head of the queue is then granted in the same entry.
	// The leader proposes it when its timer for the delay runs out. A lock
	// is delayed when a session opened with a lock-delay expires, or an
	// operator ends it, while it holds the lock: see KindOpenSession's
	// Delay. Like Expire, it names the LeaderStart of the leader that
	// decided it, so a delay that a deposed leader timed never ends once
	// its successor took office: the successor restarts the delay in full.
	// (Version 3.)
	KindUndelay Kind = 16
	// KindExpireGrant ends grant Token of lock Name (with Election, the
	// leadership Token of election Name) if it is still current, was made
	// with a maximum hold (Acquire's MaxHold), and Mark is still the
	// group's leader mark: the leader proposes it when the grant's maximum
	// hold has run out by its timer, which a new leader restarts in full.
	// The head of the queue is granted in the same entry. (Version 3.)
	KindExpireGrant Kind = 17
	// KindKeepAliveBatch renews, in one command, sessions that replica
	// Owner holds: each of Renew names a session and its floor, as a
	// KeepAlive would. A session renews, and the entry's index becomes its
	// keep-alive index, if it exists, Owner owns it, and its floor is not
	// below the session's last resume; the others are refused and listed in
	// the reply (Refused), and nothing else changes for them. A replica
	// sends one such command per keep-alive period for every session it
	// holds, so the group's keep-alive traffic grows with its replicas, not
	// its sessions. (Version 4.)
	KindKeepAliveBatch Kind = 18
	// KindGate raises the group's version gate (State.Gate) to Gate: from
	// this entry on, the group writes Gate's log and snapshot versions. The
	// leader proposes it once every member of the group has announced that
	// it reads them, in the first entry of the new log version; a gate
	// never falls, so an older or equal Gate changes nothing (OK), and one
	// a group may not write (Gate.Valid) is refused (Invalid). (Version 9.)
	KindGate Kind = 19
	// KindSeal marks the group as dying, for a drop (DropGroup, forced or
	// not, once it has decided to drop the group): it withdraws every
	// queued request and candidacy, each reported by an EventUnqueued and
	// an EventDropped (in name order of the locks, then of the elections,
	// each queue head first), and their replies become Dropped; from its
	// entry on, every Acquire, AcquireShared and Campaign, new or retried,
	// is answered Dropped, and nothing is granted: a release, a cancel, an
	// expiry, a revoke, an Undelay or an ExpireGrant only frees. The grants
	// made before it stay until they end so (a forced drop revokes them).
	// A seal never lifts; sealing a sealed group changes nothing (OK,
	// Value 0); else the reply is OK with the number withdrawn as Value.
	// It needs log version 11, and is refused (Invalid) in a group whose
	// gate is below it. (Version 11.)
	KindSeal Kind = 20

	maxKind = KindSeal
)

// MaxRenewals is the most sessions one KeepAliveBatch may renew; a replica
// that holds more sends several.
const MaxRenewals = 1 << 13

// Renewal is one session of a KeepAliveBatch, with its floor (see
// Command.Floor).
type Renewal struct{ Session, Floor uint64 }

var kindNames = [...]string{
	KindOpenSession:    "open-session",
	KindKeepAlive:      "keep-alive",
	KindCloseSession:   "close-session",
	KindAcquire:        "acquire",
	KindRelease:        "release",
	KindCancel:         "cancel",
	KindExpire:         "expire",
	KindCampaign:       "campaign",
	KindResign:         "resign",
	KindProclaim:       "proclaim",
	KindLeaderStart:    "leader-start",
	KindRevoke:         "revoke",
	KindEndSession:     "end-session",
	KindResume:         "resume",
	KindAcquireShared:  "acquire-shared",
	KindUndelay:        "undelay",
	KindExpireGrant:    "expire-grant",
	KindKeepAliveBatch: "keep-alive-batch",
	KindGate:           "gate",
	KindSeal:           "seal",
}

func (k Kind) String() string {
	if n := groupTableKindName(k); n != "" {
		return n
	}
	if k == 0 || k > maxKind || kindNames[k] == "" {
		return "unknown"
	}
	return kindNames[k]
}

// Command is one state change. Which fields a kind uses is listed with the
// kinds; the codec writes only those.
type Command struct {
	Kind Kind
	Wait bool // Acquire, Campaign: queue when held
	// Election marks a Cancel whose target is a Campaign (a Revoke, an
	// ExpireGrant of a leadership), so Name is an election rather than a
	// lock.
	Election bool
	Session  uint64 // every kind but OpenSession
	// Seq numbers the session's requests (Acquire, Release, Campaign,
	// Resign, Proclaim). A request is applied at most once: a retry of Seq
	// returns the first reply.
	Seq uint64
	// Floor is the session's lowest request number whose reply its client may
	// still need; replies below it are forgotten and requests below it ignored.
	// KeepAlive and (from version 3) CloseSession carry it too, so that a
	// resumed session can tell its old incarnation's commands apart.
	Floor uint64
	Nonce uint64 // OpenSession: the client's identity for retries; LeaderStart: a random group ID; Resume: the session's nonce
	// TTL is an OpenSession's time to live in nanoseconds; a Resume's
	// (version 5) is the TTL its holder will time the session by, which
	// must be the session's.
	TTL uint64
	// Delay is an OpenSession's lock-delay in nanoseconds, at most
	// MaxLockDelay: when the session expires, or an operator ends it, each
	// lock it held is granted to nobody until the leader's timer proposes
	// Undelay, Delay after it applied the end. 0: none. (Version 3.)
	Delay uint64
	// MaxHold is an Acquire's, AcquireShared's or Campaign's maximum hold
	// in nanoseconds, at most MaxHoldLimit: the leader's timer proposes
	// ExpireGrant MaxHold after it applied the grant, however long the
	// session lives. 0: none. (Version 3.)
	MaxHold uint64
	Owner   uint64 // OpenSession, Resume: replica ID the session lives on; LeaderStart: the leader's replica ID
	Token   uint64 // Release, Resign, Proclaim, Revoke, ExpireGrant: the grant it concerns; Undelay: the grant whose end began the delay
	Target  uint64 // Cancel: the request withdrawn; Expire: keep-alive index; Resume: the attempt's ID
	Term    uint64 // LeaderStart: the leader's raft term
	Mark    uint64 // Expire, Undelay, ExpireGrant: the index of the LeaderStart entry of the leader that decided it
	// Permits is an AcquireShared's semaphore permit count; 0 for a
	// shared/exclusive lock. At most MaxHoldersPerLock.
	Permits uint64
	// Name is an Acquire's, Release's or Cancel's lock name, a Campaign's,
	// Resign's or Proclaim's election name, and (version 6) an
	// OpenSession's session name.
	Name  string
	Value string // Campaign, Proclaim: the leader's value, at most MaxValueLen bytes
	// At is when the command was proposed, in nanoseconds since the Unix
	// epoch by the proposer's clock (version 6): the state machine reads no
	// clock, so this value is the only time it knows. A grant records the
	// At of the command whose apply made it (the acquire itself, or the
	// release, cancel, expiry or revoke that passed the lock on), and a
	// queued request the At of its own command, for the views to show how
	// long a lock has been held and a request has waited. 0 is unknown:
	// every command of an entry older than version 6. The codec writes one
	// At per entry (see AppendBatchAt), so every command decoded from an
	// entry carries the same.
	At uint64
	// Op is an operator command's operation ID (Revoke, EndSession;
	// version 7): a random number its caller draws once per call and keeps
	// across its retries. The state remembers the outcome of the last
	// OpMemory operations, and a command whose Op it remembers changes
	// nothing and gets the first attempt's result. So a revoke by name
	// that is proposed again after a leader change, while its first
	// proposal committed, ends the grant that was current when it first
	// applied and not the one that replaced it, and a retried revoke or
	// end that took effect reports its success rather than NotHeld or
	// UnknownSession. 0 is none: the command applies each time, as every
	// command of an older entry does.
	Op uint64
	// Keep is a Resume's (version 8): the session keeps its queued
	// requests and candidacies in their places instead of withdrawing
	// them, for a replica that adopts a session whose clients still wait
	// (each re-issues its call there and is answered by the request it
	// made). Each kept request is reported by an EventKeptQueued, after
	// the kept grants' EventKept events, and is granted later, in its
	// turn, under its own request number (EventGranted or EventElected
	// with its Seq), although that number lies below the floor the
	// resume set: the floor refuses the old incarnation's new requests,
	// not its queued ones. A Cancel naming a kept request's number
	// withdraws it (or gives its grant back) as it would any other.
	// Without Keep (a restarted holder's resume, and every resume of an
	// older entry) they are withdrawn: nobody waits for them any more.
	Keep bool
	// Fence is a Resume's (version 11, with Keep: an adoption): the
	// session moves only under the ownership epoch the adopter names in
	// Epoch, so that of two replicas adopting a session at once exactly
	// one owns it, by log order, and a slow adopter's late resume never
	// takes it back (ZooKeeper's ZOOKEEPER-2886). A session's epoch is its
	// base, the floor its last resume set (State.Session: Base), which
	// every resume raises. Resuming a session's default part (Parent 0),
	// Epoch is the base its adopter read: a compare-and-set, refused
	// NotApplied, with the session's base as Value, unless it is still the
	// session's. Resuming its part in a named group (Parent: the session's
	// ID), Epoch is the base the adopter's resume of the default part set,
	// which the part records (SessionInfo.Epoch): refused NotApplied, with
	// the part's epoch as Value, unless above the part's, so a part always
	// ends with the adopter that won the default part last, whatever
	// order the groups apply the resumes in. Either way a refused resume
	// changes nothing, and the commands of the copy it superseded are
	// refused by its floor (UnknownSession). Without Fence (a restarted
	// holder's resume, and every resume of an older entry) the resume is
	// not checked against any epoch.
	Fence bool
	// Epoch is a fenced Resume's ownership epoch (version 11): see Fence.
	Epoch uint64
	// Renew is a KeepAliveBatch's sessions, at most MaxRenewals, in
	// ascending order of session ID (the codec relies on it). (Version 4.)
	Renew []Renewal
	// Gate is a KindGate's: the versions the group writes from its entry
	// on. (Version 9.)
	Gate Gate
	// Groups are a group table command's groups (version 9; grouptable.go).
	Groups []GroupSpec
	// Parent is an OpenSession's (version 10): the ID of the session the
	// new one is a part of, its part in the default group (Session.ID),
	// when a session opens its part in a named group. The state keeps it
	// with the part, so every replica's views name the part's holder by
	// the session's ID rather than the part's own, which means nothing
	// outside its group. 0: none (a default-group session) or unknown (an
	// open written below version 10, where the codec drops it: a group
	// whose gate is below 10 writes the open without it, byte for byte as
	// before). A fenced Resume (version 11) carries it too: see Fence.
	Parent uint64

	// pre5 marks a command decoded from an entry of a version before 5.
	// Apply keeps the older rules for it: a Resume is not checked against
	// the session's TTL (it carried none), and a Revoke frees a delayed
	// session's lock at once.
	pre5 bool

	// v1 marks a command decoded from a version-1 entry. Apply keeps the
	// rules of version 1 for it, so that a log written before version 2
	// replays to the state it produced then: its Expire names no leader
	// mark, and a session's replies beyond maxRepliesV1 are evicted oldest
	// first rather than refused.
	v1 bool
}

// Status is the outcome of one command.
type Status uint8

// The statuses. Their numeric values are part of the wire format.
const (
	OK             Status = 1  // done (open, keep-alive, close, release, expire, resign, proclaim)
	Granted        Status = 2  // acquire, campaign: the lock or leadership is the caller's; Result.Value is its token
	Queued         Status = 3  // acquire, campaign: waiting in the queue
	Locked         Status = 4  // try-acquire, try-campaign: held by another request
	NotHeld        Status = 5  // release, resign, proclaim: the token is not the current grant
	UnknownSession Status = 6  // the session does not exist (expired or closed)
	Cancelled      Status = 7  // cancel: the request left the queue or its grant was released
	Stale          Status = 8  // a duplicate below the session's floor: ignored
	Invalid        Status = 9  // malformed command (bad name, value too long, unknown kind)
	NotApplied     Status = 10 // expire: a newer keep-alive arrived; cancel: nothing to cancel; fenced resume: another adoption moved the session first (Command.Fence)
	LimitExceeded  Status = 11 // a state limit would be exceeded
	// Conflict: acquire: the lock exists with another permit count (a
	// semaphore's request for a lock, or the other way round, or another
	// count); Result.Value is the lock's count. Nothing changed. (Version 3.)
	// Resume (version 5): the TTL it names is not the session's;
	// Result.Value is the session's. Nothing changed.
	Conflict Status = 12
	// Refused: keep-alive batch: Value of its sessions were not renewed,
	// listed in Result.Refused; the others were. (Version 4.)
	Refused Status = 13
	// Dropped: acquire, campaign: the group is being dropped (KindSeal):
	// the request was withdrawn by the seal, or came after it, and will
	// never be granted. (Version 11.)
	Dropped Status = 14
)

var statusNames = [...]string{
	OK: "ok", Granted: "granted", Queued: "queued", Locked: "locked",
	NotHeld: "not-held", UnknownSession: "unknown-session", Cancelled: "cancelled",
	Stale: "stale", Invalid: "invalid", NotApplied: "not-applied",
	LimitExceeded: "limit-exceeded", Conflict: "conflict", Refused: "refused",
	Dropped: "dropped",
}

func (s Status) valid() bool { return s != 0 && int(s) < len(statusNames) }

func (s Status) String() string {
	if !s.valid() {
		return "unknown"
	}
	return statusNames[s]
}

// Result is the reply to one command.
type Result struct {
	Status Status
	// Value is the grant's fencing token (Granted), or the session ID
	// (OpenSession), or the number of sessions refused (Refused).
	Value uint64
	// Refused lists, with status Refused, the sessions of a keep-alive
	// batch that were not renewed, in the batch's order.
	Refused []uint64
}
