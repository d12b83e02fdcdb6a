// Package seeded plants known defects in fencelock, one at a time, so that
// the fault checker can show it catches them (checker/seeded_test.go,
// docs/testing.md). Each defect is a hook of one statement in production
// code, guarded by On: built without the fencelock_seeded tag, Enabled is
// the constant false, On and Margin are constant, and the compiler drops
// every hook. Built with the tag, the defect named by the environment
// variable FENCELOCK_SEEDED_BUG (or by Plant, in a test) is live in every
// replica of the process.
package seeded

// Bug names a defect that can be planted.
type Bug string

// The defects, as docs/testing.md's table names them.
const (
	// MarginDropped: the holder's lease is its last keep-alive's send +
	// TTL (internal/session, router.go).
	MarginDropped Bug = "margin-dropped"
	// LeasePlusMargin: the holder's lease is send + TTL + margin.
	LeasePlusMargin Bug = "lease-plus-margin"
	// LeaderTimersAtOnce: a new leader's timers (session TTLs, lock-delays,
	// maximum holds) fire at once instead of restarting in full
	// (internal/expiry).
	LeaderTimersAtOnce Bug = "leader-timers-at-once"
	// SharedBesideExclusive: a shared grant is made beside an exclusive
	// holder (internal/fsm, state.go).
	SharedBesideExclusive Bug = "shared-beside-exclusive"
	// PromotionReusesToken: a grant by queue promotion reuses the token
	// just freed (internal/fsm, apply.go).
	PromotionReusesToken Bug = "promotion-reuses-token"
	// LeaderStaleRead: Node.Leader reads the local state without a read
	// index (internal/session, views.go).
	LeaderStaleRead Bug = "leader-stale-read"
	// KeepAliveDefaultOnly: KeepAlive succeeds when the default group's
	// part was renewed, whatever became of the others (internal/session,
	// session.go).
	KeepAliveDefaultOnly Bug = "keepalive-default-only"
	// RevokeTwice: an operator command's retry applies again, the
	// operation-ID dedup removed (internal/fsm, ops.go).
	RevokeTwice Bug = "revoke-twice"
	// ExpiryIgnoresDelay: a session's expiry frees its locks without their
	// lock-delay (internal/fsm, apply.go).
	ExpiryIgnoresDelay Bug = "expiry-ignores-delay"
	// MirrorNeverFailsOver: a mirror stays on a voter that cannot reach
	// its group (it answers no quorum or unavailable, or reports no
	// leader past the patience) instead of moving to another voter
	// (internal/replica, mirror.go).
	MirrorNeverFailsOver Bug = "mirror-never-fails-over"
	// GrantFromLocalState: the HTTP API answers "granted" from its copy of
	// a session's wait table, without the linearizable read that shows
	// the group holding that grant (httpapi, grants.go).
	GrantFromLocalState Bug = "grant-from-local-state"
	// RestoreKeepsTokenBase: a restore imports each group's copy as it
	// was, without raising its restore epoch, so the restored deployment
	// grants tokens the old one granted after the backup
	// (internal/replica, backup.go).
	RestoreKeepsTokenBase Bug = "restore-keeps-token-base"
)

// All are the defects, in docs/testing.md's order.
var All = []Bug{MarginDropped, LeasePlusMargin, LeaderTimersAtOnce, SharedBesideExclusive, PromotionReusesToken,
	LeaderStaleRead, KeepAliveDefaultOnly, RevokeTwice, ExpiryIgnoresDelay, MirrorNeverFailsOver, GrantFromLocalState,
	RestoreKeepsTokenBase}
