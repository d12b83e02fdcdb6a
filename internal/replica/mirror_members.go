package replica

// The membership of a group this host does not run (PlaceOwnGroups): read
// at one of the group's voters, which reads it linearizably as Members on
// its shard does (package serve, members.go), over a call connection of
// its own (package wire: members, then membership or a refusal). Members
// on a mirror and SetVoters called on a replica outside the group use it.

import (
	"context"
	"fmt"
	"time"

	"github.com/fencelock/fencelock/internal/replica/wire"
)

// membersRemote reads group name's (on shard) membership at one of ask,
// in turn (the voter feeding this host's mirror of it first), until one
// answers.
func (h *Host) membersRemote(ctx context.Context, name string, shard uint64, ask []uint64) (Membership, error) {
	var m Membership
	err := h.askVoters(ctx, name, ask, func(_ uint64, addr string) (err error) {
		m, err = h.membersFrom(ctx, addr, name, shard)
		return err
	})
	if err != nil {
		return Membership{}, fmt.Errorf("group %q runs on replicas %v, not this one, and none of them gave its membership: %w", name, ask, err)
	}
	return m, nil
}

// membersFrom asks the replica at addr for group name's membership.
func (h *Host) membersFrom(ctx context.Context, addr, name string, shard uint64) (Membership, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*h.cfg.ProposalTimeout)
	defer cancel()
	c, err := h.calls.DialCall(dctx, addr)
	if err != nil {
		return Membership{}, err
	}
	defer c.Close()
	// The answer comes within the request's timeout, or dctx ends the wait.
	stop := context.AfterFunc(dctx, func() { c.Close() })
	defer stop()
	req := wire.Msg{Kind: wire.KindMembers, Shard: shard, Name: name}
	if d, ok := dctx.Deadline(); ok {
		req.Timeout = uint64(max(time.Until(d).Milliseconds(), 1))
	}
	if err := c.Send(req.Encode(nil)); err != nil {
		return Membership{}, err
	}
	m, err := recvReply(dctx, c, wire.KindMembership)
	if err != nil {
		return Membership{}, err
	}
	return m.Mem, nil
}
