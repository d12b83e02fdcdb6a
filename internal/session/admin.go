package session

// The operator's calls of the root: Revoke and EndSession (and their
// forms), proposed directly to the group, outside any session, each under
// an operation ID of its own so that its retries apply once; and the read
// of a group's membership.

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// Revoke frees lock name (with election, ends election name's term) in the
// group it lives in: only while token is its current grant's, unless token
// is 0. It checks the name, then routes it. A lock nobody holds is
// ErrNotHeld, an election nobody leads ErrNotLeader.
func (h *Host) Revoke(ctx context.Context, name string, token uint64, election bool) error {
	_, r, err := h.route(ctx, name)
	if err != nil {
		return err
	}
	res, err := proposeOp(ctx, r, fsm.Command{Kind: fsm.KindRevoke, Name: name, Token: token, Election: election})
	if err != nil {
		return err
	}
	switch res.Status {
	case fsm.OK:
		return nil
	case fsm.NotHeld:
		if election {
			return fmt.Errorf("%w: %q", ErrNotLeader, name)
		}
		return fmt.Errorf("%w: %q", ErrNotHeld, name)
	}
	return fmt.Errorf("fencelock: revoke %q: unexpected reply %v", name, res.Status)
}

// EndSession ends session id of group ("" is the default group), whoever
// owns it, as an expiry would. A session that is already over is
// ErrSessionExpired.
func (h *Host) EndSession(ctx context.Context, group string, id uint64) error {
	r, err := h.Group(ctx, group)
	if err != nil {
		return err
	}
	res, err := proposeOp(ctx, r, fsm.Command{Kind: fsm.KindEndSession, Session: id})
	if err != nil {
		return err
	}
	switch res.Status {
	case fsm.OK:
		return nil
	case fsm.UnknownSession:
		return fmt.Errorf("%w: session %d", ErrSessionExpired, id)
	}
	return fmt.Errorf("fencelock: end session %d: unexpected reply %v", id, res.Status)
}

// Members reads group's membership ("" is the default group).
func (h *Host) Members(ctx context.Context, group string) (replica.Membership, error) {
	r, err := h.Group(ctx, group)
	if err != nil {
		return replica.Membership{}, err
	}
	return r.Members(ctx)
}

// proposeOp proposes cmd, an operator's, to group r under an operation ID
// of its own (newOp). Propose retries this very command, op and all, so
// that the state machine answers a retry with the first attempt's outcome.
func proposeOp(ctx context.Context, r Group, cmd fsm.Command) (fsm.Result, error) {
	op, err := newOp()
	if err != nil {
		return fsm.Result{}, err
	}
	cmd.Op = op
	return r.Propose(ctx, cmd)
}

// newOp draws the operation ID of one operator call (fsm.Command.Op): the
// group remembers the outcomes of the last operations it applied by their
// IDs, so the retries of one call, which share its ID, apply once. Random,
// so that no two calls share one, from any node; never 0, which is none.
func newOp() (uint64, error) {
	var b [8]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("fencelock: draw an operation ID: %w", err)
		}
		if op := binary.LittleEndian.Uint64(b[:]); op != 0 {
			return op, nil
		}
	}
}
