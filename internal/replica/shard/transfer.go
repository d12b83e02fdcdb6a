package shard

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/lockapi"
)

// TransferLeadership moves the group's leadership to replica to and waits
// until this replica sees to lead. Dragonboat's transfer promises nothing
// (the target may not catch up in time, or a third replica may win the
// election), so the request is repeated, an election timeout apart,
// until the leader is to or ctx ends (then ErrUnavailable and ctx's error).
// A target that is not a voter of the group is ErrMembership, and so is a
// call on a host that does not vote in the group: raft drops a transfer
// request that a non-voting replica forwards. During a transfer the group
// takes no proposals; the proposer retries them.
func (r *Shard) TransferLeadership(ctx context.Context, to uint64) error {
	m, err := r.membership(ctx)
	if err != nil {
		return err
	}
	if _, ok := m.Nodes[to]; !ok {
		return fmt.Errorf("%w: replica %d is not a voter of the group%s", lockapi.ErrMembership, to, InGroup(r.Name()))
	}
	if _, ok := m.Nodes[r.cfg.ReplicaID]; !ok {
		return fmt.Errorf("%w: replica %d does not vote in the group%s: call TransferLeadership on one of its voters", lockapi.ErrMembership, r.cfg.ReplicaID, InGroup(r.Name()))
	}
	return r.Transfer(ctx, to, 0)
}

// Transfer requests the transfer to voter to until this replica sees to
// lead or ctx ends; the caller checked the membership. With attempts > 0 it
// gives up (ErrUnavailable) after that many requests went unanswered, each
// an election timeout; 0 means no limit.
func (r *Shard) Transfer(ctx context.Context, to uint64, attempts int) error {
	// Raft abandons a transfer that has not happened within an election
	// timeout: ask again just after it does.
	wait := time.Duration(r.cfg.ElectionTicks)*r.cfg.RTT + 2*r.cfg.RTT
	var last error
	for asked := 0; ; {
		if err := r.check(ctx, last); err != nil {
			return err
		}
		up := r.leaderKnown()
		cur := r.LeaderID.Load()
		if cur == to {
			return nil
		}
		if attempts > 0 && asked >= attempts {
			return fmt.Errorf("%w: %v", lockapi.ErrUnavailable, last)
		}
		if cur != 0 {
			asked++
			if err := r.nh.RequestLeaderTransfer(r.ShardID(), to); err != nil {
				if !retryable(err) {
					return fmt.Errorf("%w: %s", lockapi.ErrUnavailable, Describe(err))
				}
				last = err
			} else {
				last = fmt.Errorf("leadership not transferred from %d to %d yet", cur, to)
			}
		} else {
			last = fmt.Errorf("no leader known")
		}
		t := time.NewTimer(wait)
		select {
		case <-up:
		case <-t.C:
		case <-ctx.Done():
		case <-r.Done():
		}
		t.Stop()
	}
}

// InGroup is "" for the default group, ` of group "name"` for a named one.
func InGroup(group string) string {
	if group == "" {
		return ""
	}
	return fmt.Sprintf(" of group %q", group)
}
