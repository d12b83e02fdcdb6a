// Package servicehook gives the HTTP service (package httpapi) the
// things it needs of package fencelock to serve any session from any
// replica, without widening the public API: sessions whose parts open
// with nonces derived from the client's secret, the adoption of such a
// session by another replica, and the withdrawal of a request the adoption
// kept queued that no call re-issued, and the time left of the part that
// holds a grant, which bounds the lease a grant's answer gives. Package
// fencelock registers the implementations at init.
package servicehook

import (
	"context"
	"time"

	"github.com/fencelock/fencelock/internal/clock"
)

// These are set by package fencelock.
var (
	nonces  func(f func(group string) uint64) any
	adopt   func(ctx context.Context, node any, id uint64, nonce func(group string) uint64, opts []any) (any, error)
	abandon func(session any)
	kept    func(session any, name string, election bool) int
	now     func(node any) clock.Instant
	left    func(grant any, at clock.Instant) time.Duration
)

// Register installs DerivedNonces, Adopt, Abandon and WithdrawKept; only
// package fencelock calls it.
func Register(n func(f func(group string) uint64) any,
	a func(ctx context.Context, node any, id uint64, nonce func(group string) uint64, opts []any) (any, error),
	ab func(session any), k func(session any, name string, election bool) int) {
	nonces, adopt, abandon, kept = n, a, ab, k
}

// RegisterLease installs Now and PartLeft; only package fencelock calls it.
func RegisterLease(n func(node any) clock.Instant, l func(grant any, at clock.Instant) time.Duration) {
	now, left = n, l
}

// Now reads the clock node (a *fencelock.Node) measures its holders'
// deadlines on (the boot clock), for PartLeft.
func Now(node any) clock.Instant { return now(node) }

// PartLeft returns how long after at (a Now reading of the grant's node)
// the holder keeps the session's part that holds grant (a *fencelock.Lock
// or *fencelock.Leadership): until that part's deadline, its last
// acknowledged renewal + TTL − margin. It is 0 if that is not after at, if
// the part has ended, or for anything else than a grant.
func PartLeft(grant any, at clock.Instant) time.Duration { return left(grant, at) }

// WithdrawKept withdraws the requests for lock name (with election, for
// election name) that the adoption of session (a *fencelock.Session) kept
// in their queue and that no call re-issued since: the withdraw of a
// client that does not re-issue its waiting call first. Each is cancelled
// by its own number; a kept request granted already is left alone (its
// grant is the session's, released by its token). It reports how many it
// withdrew: 0 for a session not adopted, or with none for name.
func WithdrawKept(session any, name string, election bool) int { return kept(session, name, election) }

// Abandon ends a *fencelock.Session in this process only: nothing is closed
// at any group, so that the replica that took the session over, or this
// one adopting it again, keeps everything it holds.
func Abandon(session any) { abandon(session) }

// DerivedNonces returns a fencelock.SessionOption that makes the session
// open each part with nonce f(group) (its resume secret, the only thing the
// group keeps of it) instead of a random one. f must never return 0, and
// must give each session its own nonces.
func DerivedNonces(f func(group string) uint64) any { return nonces(f) }

// Adopt takes session id over on node (a *fencelock.Node) from the replica
// that held it, as fencelock.Node.ResumeSession does, in every group the
// node runs: the session must have been opened with DerivedNonces(nonce).
// opts are fencelock.SessionOptions (WithExternalKeepAlive, say). It
// returns a *fencelock.Session holding every grant with its token, or
// fencelock.ErrSessionExpired if the session is over or nonce is not its
// own (the two are not told apart, so a wrong secret learns nothing).
func Adopt(ctx context.Context, node any, id uint64, nonce func(group string) uint64, opts ...any) (any, error) {
	return adopt(ctx, node, id, nonce, opts)
}
