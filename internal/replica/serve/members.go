package serve

// A group's membership for a replica that does not run the group
// (internal/replica's mirror_members.go is the caller's side): read at one
// of the group's voters linearizably, as Members on its shard does.

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/replica/wire"
	"github.com/fencelock/fencelock/transport"
)

// maxMemberReads bounds the membership reads a replica serves at once for
// other replicas: each holds a call connection and a linearizable read of
// the group, and replicas whose callers ask in a loop must not starve the
// group's own reads. A refused reader asks another voter.
const maxMemberReads = 16

// serveMembers answers members request m on c with the group's
// membership, or a refusal saying why not.
func (s *Server) serveMembers(c transport.CallConn, m wire.Msg) {
	g, release := s.takeGroup(c, m, &s.readingMembers, maxMemberReads, fmt.Sprintf("reading %d memberships for other replicas", maxMemberReads))
	if g == nil {
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(g.Context(), callWait(2*s.cfg.ProposalTimeout, m.Timeout))
	defer cancel()
	mem, err := g.Members(ctx)
	if err != nil {
		refuseCall(c, s.host.Code(err), fmt.Sprintf("replica %d cannot read group %q's membership: %v", s.cfg.ReplicaID, g.Name(), err))
		return
	}
	msg := wire.Msg{Kind: wire.KindMembership, Mem: mem}
	_ = c.Send(msg.Encode(nil))
}
