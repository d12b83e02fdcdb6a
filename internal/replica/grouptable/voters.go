package grouptable

import (
	"context"
	"maps"
	"slices"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica/shard"
)

// catchUpSlack is how far behind the leader's applied index a new voter's
// acknowledged log may be when it is promoted: a voter that has not caught
// up counts toward the quorum without being able to acknowledge, but under
// load a follower is always a few entries behind.
const catchUpSlack = 64

// MoveVoters makes one change toward entry's voters in r's group, whose
// leader this host is, with membership m; hosts are the deployment's
// replicas and addresses. It reports whether it made a change or waits for
// one (a new voter catching up).
func (t *Table) MoveVoters(ctx context.Context, r *shard.Shard, m *dragonboat.Membership, e fsm.GroupEntry, hosts map[uint64]string) bool {
	self := t.h.ReplicaID()
	for _, id := range e.Voters {
		if _, ok := m.Nodes[id]; ok {
			continue
		}
		addr, ok := hosts[id]
		if !ok {
			addr, ok = m.NonVotings[id]
		}
		if !ok {
			r.Logger().Debug("fencelock: a voter the group table names is not a member of the deployment; add it first", "member", id)
			continue
		}
		if _, ok := m.NonVotings[id]; !ok {
			if err := r.EnsureNonVoting(ctx, id, addr, true); err != nil {
				r.Logger().Debug("fencelock: adding a new voter as a non-voting replica first; retried", "member", id, "err", err)
			} else {
				r.Logger().Info("fencelock: new voter added as a non-voting replica; promoted once it has caught up", "member", id)
			}
			return true
		}
		if !t.caughtUp(r, id) {
			return true
		}
		err := r.Promote(ctx, id, addr)
		if err != nil {
			r.Logger().Debug("fencelock: promoting a new voter; retried", "member", id, "err", err)
		} else {
			r.Logger().Info("fencelock: new voter promoted, as the group table says", "member", id)
		}
		return true
	}
	for _, id := range slices.Sorted(maps.Keys(m.Nodes)) {
		if slices.Contains(e.Voters, id) {
			continue
		}
		if !t.TableRemoves(ctx, r, id) {
			return true
		}
		if id == self {
			// The leader hands the group to a voter that stays, which
			// then removes this one.
			for _, to := range e.Voters {
				if _, voter := m.Nodes[to]; voter && t.h.Live(to) {
					if err := r.Transfer(ctx, to, 1); err != nil {
						r.Logger().Debug("fencelock: handing the group over before leaving its voters; retried", "to", to, "err", err)
					} else {
						r.Logger().Info("fencelock: group handed over before leaving its voters, as the group table says", "to", to)
					}
					return true
				}
			}
			return true
		}
		if err := r.RemoveReplica(ctx, id); err != nil {
			r.Logger().Debug("fencelock: removing a voter the group table no longer names; retried", "member", id, "err", err)
		} else {
			r.Logger().Info("fencelock: voter removed, as the group table says", "member", id)
		}
		return true
	}
	return false
}

// caughtUp reports whether replica id of r's group, which this host leads,
// answered this group's leader lately (an append or a heartbeat) and has
// acknowledged its log up to about what the leader applied. Lately in this group, not lately in
// any: a young group's log is shorter than catchUpSlack, and a replica
// heard from in the default group a moment ago but cut off from this
// group's leader since (it answered nothing here) was promoted at once,
// leaving the group a voter it cannot reach.
func (t *Table) caughtUp(r *shard.Shard, id uint64) bool {
	return t.h.AckedLately(r.ShardID(), id) && t.h.AckedIndex(r.ShardID(), id)+catchUpSlack >= r.AppliedIndex.Load()
}

// TableRemoves reads the table again and reports whether it still removes
// replica id from r's group: a removal cannot be undone, so it is never
// made on a view of the table that may have changed since.
func (t *Table) TableRemoves(ctx context.Context, r *shard.Shard, id uint64) bool {
	v, err := t.read(ctx)
	if err != nil {
		return false
	}
	e, ok := v.Find(r.Name())
	return ok && e.Shard == r.ShardID() && !slices.Contains(e.Voters, id) && slices.Contains(e.Removed, id)
}
