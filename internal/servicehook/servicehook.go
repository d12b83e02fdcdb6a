// Package servicehook gives the HTTP service (package httpapi) the
// things it needs of package fencelock to serve any session from any
// replica, without widening the public API: sessions whose parts open
// with nonces derived from the client's secret, the adoption of such a
// session by another replica, and the withdrawal of a request the adoption
// kept queued that no call re-issued. Package fencelock registers the
// implementations at init.
package servicehook

import "context"

// These are set by package fencelock.
var (
	nonces  func(f func(group string) uint64) any
	adopt   func(ctx context.Context, node any, id uint64, nonce func(group string) uint64, opts []any) (any, error)
	abandon func(session any)
	kept    func(session any, name string, election bool) int
)

// Register installs DerivedNonces, Adopt, Abandon and WithdrawKept; only
// package fencelock calls it.
func Register(n func(f func(group string) uint64) any,
	a func(ctx context.Context, node any, id uint64, nonce func(group string) uint64, opts []any) (any, error),
	ab func(session any), k func(session any, name string, election bool) int) {
	nonces, adopt, abandon, kept = n, a, ab, k
}

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
