package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/replica/gate"
	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/lockapi"
)

// Members reads the membership linearizably, on this host's shard.
func (r *Shard) Members(ctx context.Context) (wire.Membership, error) {
	m, err := r.membership(ctx)
	if err != nil {
		return wire.Membership{}, err
	}
	return toMembership(m), nil
}

func toMembership(m *dragonboat.Membership) wire.Membership {
	out := wire.Membership{
		Voters:            make(map[uint64]string, len(m.Nodes)),
		NonVoting:         make(map[uint64]string, len(m.NonVotings)),
		Removed:           make([]uint64, 0, len(m.Removed)),
		ConfigChangeIndex: m.ConfigChangeID,
	}
	for id, addr := range m.Nodes {
		out.Voters[id] = addr
	}
	for id, addr := range m.NonVotings {
		out.NonVoting[id] = addr
	}
	for id := range m.Removed {
		out.Removed = append(out.Removed, id)
	}
	slices.Sort(out.Removed)
	return out
}

// AddReplica makes id at addr a voter, through non-voting first; see the
// root's AddReplica for the contract.
func (r *Shard) AddReplica(ctx context.Context, id uint64, addr string) error {
	if err := validMember(id, addr); err != nil {
		return err
	}
	if err := r.EnsureNonVoting(ctx, id, addr, true); err != nil {
		return err
	}
	err := r.changeMembership(ctx, func(m *dragonboat.Membership) (bool, error) {
		if a, ok := m.Nodes[id]; ok && sameAddr(a, addr) {
			return true, nil
		}
		return false, checkAdd(m, id, addr, true)
	}, func(ctx context.Context, ccid uint64) error {
		return r.nh.SyncRequestAddReplica(ctx, r.ShardID(), id, addr, ccid)
	})
	if err == nil {
		r.Logger().Info("fencelock: replica added as a voter", "member", id, "addr", addr)
	}
	return err
}

// AddNonVoting adds id at addr as a non-voting member.
func (r *Shard) AddNonVoting(ctx context.Context, id uint64, addr string) error {
	if err := validMember(id, addr); err != nil {
		return err
	}
	err := r.EnsureNonVoting(ctx, id, addr, false)
	if err == nil {
		r.Logger().Info("fencelock: non-voting replica added", "member", id, "addr", addr)
	}
	return err
}

// Promote makes non-voting member id at addr a voter, unless it is one
// already.
func (r *Shard) Promote(ctx context.Context, id uint64, addr string) error {
	return r.changeMembership(ctx, func(m *dragonboat.Membership) (bool, error) {
		_, ok := m.Nodes[id]
		return ok, nil
	}, func(ctx context.Context, ccid uint64) error {
		return r.nh.SyncRequestAddReplica(ctx, r.ShardID(), id, addr, ccid)
	})
}

// EnsureNonVoting adds id at addr as a non-voting replica unless it is one already, or,
// when toVoter is set, a voter already. A replica known to read less than
// the group writes (versions.go) is not added: it could not read the
// group's entries.
func (r *Shard) EnsureNonVoting(ctx context.Context, id uint64, addr string, toVoter bool) error {
	if reads, ok := r.host.PeerReads(id); ok && !reads.Covers(r.Gate()) {
		return fmt.Errorf("%w: replica %d reads log versions up to %d and snapshot versions up to %d, but %s writes %v: "+
			"run a build on it that reads them, then add it", lockapi.ErrMembership, id, reads.Codec, reads.Snapshot, gate.GroupName(r.Name()), r.Gate())
	}
	return r.changeMembership(ctx, func(m *dragonboat.Membership) (bool, error) {
		if a, ok := m.NonVotings[id]; ok && sameAddr(a, addr) {
			return true, nil
		}
		if a, ok := m.Nodes[id]; ok && sameAddr(a, addr) && toVoter {
			return true, nil
		}
		return false, checkAdd(m, id, addr, false)
	}, func(ctx context.Context, ccid uint64) error {
		return r.nh.SyncRequestAddNonVoting(ctx, r.ShardID(), id, addr, ccid)
	})
}

// RemoveReplica removes id from the group for good.
func (r *Shard) RemoveReplica(ctx context.Context, id uint64) error {
	if id == 0 {
		return fmt.Errorf("%w: replica ID 0", lockapi.ErrMembership)
	}
	err := r.changeMembership(ctx, func(m *dragonboat.Membership) (bool, error) {
		if _, ok := m.Removed[id]; ok {
			return true, nil
		}
		_, voter := m.Nodes[id]
		_, nonVoting := m.NonVotings[id]
		switch {
		case voter && len(m.Nodes) == 1:
			return false, fmt.Errorf("%w: replica %d is the last voter", lockapi.ErrMembership, id)
		case !voter && !nonVoting:
			return false, fmt.Errorf("%w: replica %d is not a member", lockapi.ErrMembership, id)
		}
		return false, nil
	}, func(ctx context.Context, ccid uint64) error {
		return r.nh.SyncRequestDeleteReplica(ctx, r.ShardID(), id, ccid)
	})
	if err == nil {
		r.Logger().Info("fencelock: replica removed", "member", id)
	}
	return err
}

func validMember(id uint64, addr string) error {
	if id == 0 {
		return fmt.Errorf("%w: replica ID 0", lockapi.ErrMembership)
	}
	if err := CheckHostPort(addr); err != nil {
		return fmt.Errorf("%w: %w", lockapi.ErrMembership, err)
	}
	return nil
}

// checkAdd explains why id at addr cannot be added, if it cannot. A
// non-voting replica can be promoted to voter, never the other way round.
func checkAdd(m *dragonboat.Membership, id uint64, addr string, voter bool) error {
	if _, ok := m.Removed[id]; ok {
		return fmt.Errorf("%w: replica %d", lockapi.ErrIDRemoved, id)
	}
	if a, ok := m.Nodes[id]; ok {
		if voter {
			return fmt.Errorf("%w: replica %d is a voter at %s, not %s", lockapi.ErrMembership, id, a, addr)
		}
		return fmt.Errorf("%w: replica %d is a voter; remove it instead", lockapi.ErrMembership, id)
	}
	if a, ok := m.NonVotings[id]; ok && !sameAddr(a, addr) {
		return fmt.Errorf("%w: replica %d is at %s, not %s", lockapi.ErrMembership, id, a, addr)
	}
	for other, a := range m.Nodes {
		if other != id && sameAddr(a, addr) {
			return fmt.Errorf("%w: address %s belongs to replica %d", lockapi.ErrMembership, addr, other)
		}
	}
	for other, a := range m.NonVotings {
		if other != id && sameAddr(a, addr) {
			return fmt.Errorf("%w: address %s belongs to replica %d", lockapi.ErrMembership, addr, other)
		}
	}
	if len(m.Witnesses) > 0 {
		if _, ok := m.Witnesses[id]; ok {
			return fmt.Errorf("%w: replica %d is a witness", lockapi.ErrMembership, id)
		}
	}
	return nil
}

// sameAddr compares raft addresses as Dragonboat does: case-insensitively,
// ignoring surrounding space.
func sameAddr(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}

// maxRejections bounds how often a change is retried after the group refused
// it while the membership did not move: a refusal the checks above did not
// foresee must end, not spin until ctx ends.
const maxRejections = 3

// changeMembership applies one membership change. It reads the membership;
// done reports whether the change is already in place (a retry after an
// attempt whose outcome was unknown), or why it cannot be made; otherwise
// request proposes it against that membership's ConfigChangeID, the
// optimistic lock that keeps changes one at a time. A change refused because
// another one got in first, or because the group is busy or between
// leaders, is retried with the new membership until ctx ends.
func (r *Shard) changeMembership(ctx context.Context,
	done func(*dragonboat.Membership) (bool, error),
	request func(ctx context.Context, ccid uint64) error) error {
	var last error
	rejected, lastCCID := 0, uint64(0)
	for b := newBackoff(r.cfg.RTT); ; {
		if err := r.check(ctx, last); err != nil {
			return err
		}
		m, err := r.membership(ctx)
		if err != nil {
			return err
		}
		ok, err := done(m)
		if ok || err != nil {
			return err
		}
		if m.ConfigChangeID != lastCCID {
			rejected, lastCCID = 0, m.ConfigChangeID
		}
		actx, cancel := context.WithTimeout(ctx, r.changeTimeout())
		err = request(actx, m.ConfigChangeID)
		cancel()
		if err == nil {
			return nil
		}
		last = err
		switch {
		case errors.Is(err, dragonboat.ErrRejected):
			if rejected++; rejected >= maxRejections {
				return fmt.Errorf("%w: the group refused the change: %v", lockapi.ErrMembership, err)
			}
		case errors.Is(err, dragonboat.ErrInvalidAddress):
			return fmt.Errorf("%w: %v", lockapi.ErrMembership, err)
		case !retryable(err):
			return fmt.Errorf("%w: %s", lockapi.ErrUnavailable, Describe(err))
		}
		b.wait(ctx, r.Done(), r.leaderKnown())
	}
}

// changeTimeout bounds one attempt of a membership change: a change is one
// raft entry, but the first attempt after an election waits for the new
// leader's own entry to commit.
func (r *Shard) changeTimeout() time.Duration {
	return max(r.cfg.ProposalTimeout, 4*time.Duration(r.cfg.ElectionTicks)*r.cfg.RTT)
}

// RaftMembership reads the membership linearizably, as Dragonboat has
// it, retrying like Read.
func (r *Shard) RaftMembership(ctx context.Context) (*dragonboat.Membership, error) {
	return r.membership(ctx)
}

// membership reads the membership linearizably, retrying like read.
func (r *Shard) membership(ctx context.Context) (*dragonboat.Membership, error) {
	var last error
	attempt := min(2*time.Duration(r.cfg.ElectionTicks)*r.cfg.RTT, r.cfg.ProposalTimeout)
	for b := newBackoff(r.cfg.RTT); ; attempt = min(2*attempt, r.cfg.ProposalTimeout) {
		if err := r.check(ctx, last); err != nil {
			return nil, err
		}
		actx, cancel := context.WithTimeout(ctx, attempt)
		m, err := r.nh.SyncGetShardMembership(actx, r.ShardID())
		cancel()
		if err == nil {
			return m, nil
		}
		last = err
		if !retryable(err) && !errors.Is(err, dragonboat.ErrTimeoutTooSmall) {
			return nil, fmt.Errorf("%w: %s", lockapi.ErrUnavailable, Describe(err))
		}
		b.wait(ctx, r.Done(), r.leaderKnown())
	}
}
