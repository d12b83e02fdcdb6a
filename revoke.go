package fencelock

import (
	"context"
	"fmt"
)

// Revoke frees lock name, whoever holds it: the head of its queue is
// granted in the same step, with a larger token, and the holder's Done
// closes with ErrRevoked when its replica applies the revocation. It is for
// operators freeing a lock whose holder is stuck but alive; the holder's
// later writes are refused by the resource's fencer once the new token has
// reached it. A lock nobody holds is ErrNotHeld. It is linearizable.
//
// If the holder's session has a lock-delay (WithLockDelay), the lock is
// granted to nobody for that delay instead, as when EndSession ends the
// session: the holder did not choose to stop, and may have writes in
// flight to a resource that checks no token. Inspect shows it Delayed.
// The session itself lives on.
//
// A lock held in shared mode, or a semaphore, loses every current holder
// at once (in token order), and then its queue is granted; RevokeGrant
// ends one holder's grant.
//
// It applies at most once, even across leader changes: a call whose
// proposal is retried (the leader changed, or the attempt timed out, while
// the first proposal may still commit) ends only the grant current when it
// first applied, never the grant the head of the queue got from it, and
// returns that first outcome. An error that is not ErrNotHeld leaves it
// unknown whether the revocation applied; Inspect tells.
func (n *Node) Revoke(ctx context.Context, name string) error {
	return n.revoke(ctx, name, 0, false)
}

// RevokeGrant is Revoke of one grant: it frees lock name only while token
// is its current grant's, so that an operator's late or repeated call never
// frees the successor's grant (ErrNotHeld then). Like Revoke it applies at
// most once, even across leader changes, and a call whose first attempt
// took effect returns nil even when an internal retry found the grant
// gone: ErrNotHeld means the grant had ended before this call.
func (n *Node) RevokeGrant(ctx context.Context, name string, token uint64) error {
	if token == 0 {
		return fmt.Errorf("%w: %q: token 0", ErrNotHeld, name)
	}
	return n.revoke(ctx, name, token, false)
}

// RevokeLeadership ends the current term of election, whoever leads it, as
// Revoke does for a lock: the next candidate leads, with a larger epoch,
// and the deposed leader's Done closes with ErrRevoked. With no leader it
// is ErrNotLeader. Elections have no lock-delay. Like Revoke it applies at
// most once, even across leader changes: a retried call never deposes the
// successor its first attempt made leader.
func (n *Node) RevokeLeadership(ctx context.Context, election string) error {
	return n.revoke(ctx, election, 0, true)
}

func (n *Node) revoke(ctx context.Context, name string, token uint64, election bool) error {
	return n.h.Revoke(ctx, name, token, election)
}

// EndSession ends session id at the default group, whoever owns it, as an
// expiry would: its locks and leaderships pass to their queues' heads in
// one step, its queued requests are withdrawn, and its holder's Done closes
// with ErrRevoked. A session that is already over is ErrSessionExpired. It
// is linearizable; the IDs come from Node.Sessions or Node.Locks. A session
// opened WithLockDelay delays its locks as if it had expired: its holder
// did not choose to stop, and may be acting still.
//
// It applies at most once, even across leader changes: a call whose
// proposal is retried after its first attempt ended the session returns
// nil, not ErrSessionExpired, and ErrSessionExpired means the session was
// over before this call.
//
// This ends a whole Session: its ID (Session.ID) is its default part's,
// and a session whose default part ends is over (Session.Done), so its
// node closes its parts in the other groups too. If that node is down it
// cannot: each of those parts then expires at its TTL, or an operator ends
// it with EndSessionIn, by its ID in its group (SessionsIn lists them with
// their Owner).
func (n *Node) EndSession(ctx context.Context, id uint64) error {
	return n.EndSessionIn(ctx, "", id)
}

// EndSessionIn is EndSession of the session with ID id in group ("" is the
// default group), and applies at most once like it. In a named group it ends only that part of a Session
// (Session.IDIn): the locks and leaderships held there are lost, with
// ErrRevoked, and nothing the session holds in other groups is touched; the
// session's next call naming the group opens a new part. A group this
// deployment does not run fails with ErrUnknownGroup.
func (n *Node) EndSessionIn(ctx context.Context, group string, id uint64) error {
	return n.h.EndSession(ctx, group, id)
}
