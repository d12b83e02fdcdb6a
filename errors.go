package fencelock

import (
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/session"
	"github.com/fencelock/fencelock/lockapi"
)

// The sentinel errors. Errors returned by fencelock wrap one of them (or a
// context error); test with errors.Is. Each is package lockapi's value of
// the same name, which the HTTP client returns too.
var (
	// ErrLocked: TryAcquire found the lock held.
	ErrLocked = session.ErrLocked
	// ErrNotHeld: Release named a grant that is no longer current (the lock
	// was released, or the session expired and the lock passed on).
	ErrNotHeld = session.ErrNotHeld
	// ErrStaleToken: a Fencer refused a token lower than one it admitted.
	ErrStaleToken = lockapi.ErrStaleToken
	// ErrSessionExpired: the session could not be renewed in time, or the
	// group expired it. Its locks are lost; open a new session.
	ErrSessionExpired = session.ErrSessionExpired
	// ErrSessionClosed: the session was closed by its holder.
	ErrSessionClosed = session.ErrSessionClosed
	// ErrUnavailable: the group could not be reached (no leader, no quorum)
	// before the context ended. Nothing was granted to the caller.
	ErrUnavailable = replica.ErrUnavailable
	// ErrNoQuorum: the call's group has had no raft leader for a while
	// (about 20 election timeouts, at least 2 s) and this replica reaches
	// fewer than a quorum of its voters; the error says which voters it
	// reaches and how many the group needs. It always comes with
	// ErrUnavailable: nothing was granted, and the call can be retried once
	// the voters are back (or on a replica that reaches them). A call whose
	// context has a deadline gets it as soon as that is known, and so does
	// every Acquire, TryAcquire and Campaign (and their shared and semaphore
	// forms) with or without one: waiting for a lock is not waiting for the
	// voters to come back (a request the group had queued before keeps its
	// place, and ends with its session's part if the quorum stays away past
	// the part's TTL). Any other call whose context ends while the quorum is
	// missing gets it with ctx.Err().
	ErrNoQuorum = replica.ErrNoQuorum
	// ErrInvalidName: a lock name is empty, longer than 512 bytes, not UTF-8,
	// or contains NUL.
	ErrInvalidName = session.ErrInvalidName
	// ErrInvalidSessionName: a session name (WithSessionName) longer than
	// MaxSessionNameLen bytes, not UTF-8, or containing NUL. Nothing was
	// proposed.
	ErrInvalidSessionName = session.ErrInvalidSessionName
	// ErrClosed: the node was closed.
	ErrClosed = replica.ErrClosed
	// ErrInvalidConfig: Start was given an unusable Config.
	ErrInvalidConfig = replica.ErrInvalidConfig
	// ErrInvalidTTL: a session TTL or safety margin outside the allowed range.
	ErrInvalidTTL = lockapi.ErrInvalidTTL
	// ErrNoLeader: Node.Leader found the election without a leader.
	ErrNoLeader = lockapi.ErrNoLeader
	// ErrRevoked: an operator revoked the grant (Node.Revoke,
	// Node.RevokeLeadership) or ended the session (Node.EndSession).
	ErrRevoked = session.ErrRevoked
	// ErrInvalidResumeToken: ResumeSession was given a token that is not
	// one Session.Resume made (or ParseResumeToken could not read it), or
	// whose session is still open in this process.
	ErrInvalidResumeToken = session.ErrInvalidResumeToken
	// ErrElectionTaken: TryCampaign found the election led by another
	// candidate; nothing was queued.
	ErrElectionTaken = session.ErrElectionTaken
	// ErrNotLeader: Proclaim or Resign named a term of leadership that is
	// over (resigned, or the session ended and the next candidate leads).
	ErrNotLeader = session.ErrNotLeader
	// ErrValueTooLarge: a leader's value is longer than 4096 bytes.
	ErrValueTooLarge = session.ErrValueTooLarge
	// ErrPermitConflict: AcquireSemaphore named another permit count than
	// the semaphore has (its count is fixed by the request that created it,
	// for as long as anyone holds or waits for it), or named a lock, or
	// Acquire or AcquireShared named a semaphore. Nothing changed.
	ErrPermitConflict = session.ErrPermitConflict
	// ErrInvalidPermits: a semaphore's permit count is below 1 or above
	// MaxHoldersPerLock.
	ErrInvalidPermits = lockapi.ErrInvalidPermits
	// ErrInvalidLockDelay: a lock-delay (WithLockDelay) below 0 or above
	// MaxLockDelay.
	ErrInvalidLockDelay = lockapi.ErrInvalidLockDelay
	// ErrInvalidMaxHold: a maximum hold (WithMaxHold) below twice the
	// session's safety margin or above MaxHoldLimit.
	ErrInvalidMaxHold = session.ErrInvalidMaxHold
	// ErrMaxHoldExceeded: the grant's maximum hold (WithMaxHold) ran out:
	// by the holder's clock, or at the group. The lock passes on.
	ErrMaxHoldExceeded = session.ErrMaxHoldExceeded

	// ErrLimitExceeded: the group refused a request that would exceed one of
	// its limits (see README); nothing changed. Each limit has its own error,
	// which wraps this one.
	ErrLimitExceeded = session.ErrLimitExceeded
	// ErrTooManySessions: the group keeps MaxSessions sessions already.
	ErrTooManySessions = session.ErrTooManySessions
	// ErrTooManyLocks: the session holds and waits for MaxLocksPerSession
	// locks already.
	ErrTooManyLocks = session.ErrTooManyLocks
	// ErrTooManyWaiters: the lock's queue holds MaxWaitersPerLock
	// requests already.
	ErrTooManyWaiters = session.ErrTooManyWaiters
	// ErrTooManyPending: the session has MaxPendingPerSession requests in
	// flight whose replies the group keeps for retries; wait for some to
	// finish.
	ErrTooManyPending = session.ErrTooManyPending

	// ErrVersionGated: the call needs a newer log format than its group
	// writes yet (GroupStatus.Writes), because some voter or non-voting
	// member of the group runs an older build; nothing was proposed. The
	// error names the format needed, the group and the replicas it waits
	// for. It succeeds once they are upgraded and the group's leader has
	// raised the group's formats, within seconds of the last upgrade.
	ErrVersionGated = session.ErrVersionGated
	// ErrVersionTooNew: Start refused a Dir whose groups write a newer log
	// or snapshot format than this build reads (a downgrade past the
	// formats the groups write); run a build that reads them. A running
	// replica that meets such an entry stops on it, saying so in its log.
	ErrVersionTooNew = session.ErrVersionTooNew
)

// StaleTokenError is the error of a Fencer that refused a token;
// errors.Is(err, ErrStaleToken) holds for it.
type StaleTokenError = lockapi.StaleTokenError

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// The errors of membership changes and of a removed replica.
var (
	// ErrMembership: a membership change that cannot be made: the ID or
	// address is used by another member, a voter cannot become non-voting,
	// the last voter cannot be removed, or the ID is not a member.
	ErrMembership = replica.ErrMembership
	// ErrIDRemoved: the replica ID was removed from the group; removed IDs
	// are never used again, so give the new replica a fresh ID.
	ErrIDRemoved = replica.ErrIDRemoved
	// ErrRemoved: this replica was removed from the group. Close it and
	// delete its Dir.
	ErrRemoved = replica.ErrRemoved
	// ErrUnknownGroup: a call named a group (Node.TransferLeadership, a
	// name's "@group") that this replica does not run: not in the group
	// table (or, before it is set, not in Config.Groups), or not started
	// here yet. A typo fails loudly rather than fall back to a group where
	// the lock would exclude nothing.
	ErrUnknownGroup = replica.ErrUnknownGroup
)

// The errors of the group table (Node.CreateGroup, DropGroup, SetVoters,
// ReplaceReplica).
var (
	// ErrGroupExists: CreateGroup named a group the table has.
	ErrGroupExists = replica.ErrGroupExists
	// ErrInvalidGroupName: a group name that is not 1 to 32 of [a-z0-9-].
	ErrInvalidGroupName = replica.ErrInvalidGroupName
	// ErrInvalidVoters: voters that are not 1, 3 or 5 distinct replica
	// IDs, or name a replica that is not a member of the deployment, or one
	// SetVoters took off the group before (removed IDs never come back).
	ErrInvalidVoters = replica.ErrInvalidVoters
	// ErrGroupHoldsLocks: DropGroup without ForceDrop found the group
	// holding a lock or a leadership. Nothing changed.
	ErrGroupHoldsLocks = replica.ErrGroupHoldsLocks
	// ErrGroupDropped: the group was dropped (DropGroup): its grants and
	// calls in flight end with it.
	ErrGroupDropped = replica.ErrGroupDropped
	// ErrGroupMoved: SetVoters took this replica off the group, which it
	// no longer runs: its grants there end with it, and its calls fail.
	// Use a replica that runs the group.
	ErrGroupMoved = replica.ErrGroupMoved
)
