package httpapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/fencelock/fencelock"
)

// MembersJSON answers GET /v1/members: a group's membership as of a
// linearizable read (fencelock.Membership).
type MembersJSON struct {
	Group     string            `json:"group"`      // "" for the default group
	Voters    map[uint64]string `json:"voters"`     // replica ID -> raft address
	NonVoting map[uint64]string `json:"non_voting"` // replica ID -> raft address
	// Removed are the IDs removed from the group, in increasing order:
	// they can never be used again.
	Removed []uint64 `json:"removed"`
	// ConfigChangeIndex is the raft log index of the last applied
	// membership change: it rises with every change.
	ConfigChangeIndex uint64 `json:"config_change_index"`
}

// AddMemberRequest is the body of POST /v1/members: replica ID at raft
// address Addr (host:port) joins the default group, non-voting unless
// Voting. Voting promotes a non-voting replica (or adds a new ID through
// non-voting first); see fencelock.Node.AddReplica for why a replacement is
// added non-voting, started, and promoted once it has caught up.
type AddMemberRequest struct {
	// ID is a JSON number, as replica IDs are everywhere in the API
	// (small numbers an operator chose).
	ID     uint64 `json:"id"`
	Addr   string `json:"addr"`
	Voting bool   `json:"voting,omitempty"`
}

// DecodeAddMember decodes the body of POST /v1/members. A missing or zero
// id, or an addr that is not host:port with a port in 1-65535, is a bad
// request; whether the group accepts the address is the group's to say.
func DecodeAddMember(b []byte) (AddMemberRequest, error) {
	var r AddMemberRequest
	if err := decodeJSON(b, &r, false); err != nil {
		return r, err
	}
	if r.ID == 0 {
		return r, fmt.Errorf("%w: id is required (a positive replica ID)", errBadRequest)
	}
	if r.Addr == "" {
		return r, fmt.Errorf("%w: addr is required (the replica's raft address, host:port)", errBadRequest)
	}
	host, port, err := net.SplitHostPort(r.Addr)
	p, perr := strconv.Atoi(port)
	if err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
		return r, fmt.Errorf("%w: addr %.64q is not host:port with a port in 1-65535", errBadRequest, r.Addr)
	}
	return r, nil
}

// needAdminAll is the right to change the membership: admin on every name,
// for a membership change concerns every name the deployment serves.
func needAdminAll(p *principal, r *http.Request) error {
	if !p.may(RightAdmin, AllNames) {
		return errNoRight(p, RightAdmin, ` on "*" (changing the membership)`)
	}
	return nil
}

// listMembers answers GET /v1/members[?group=NAME]: any replica answers,
// once it has caught up with the group's leader (a linearizable read).
func (s *Server) listMembers(w http.ResponseWriter, r *http.Request) {
	ask := func(ctx context.Context) (fencelock.Membership, error) {
		return s.node.MembersOf(ctx, r.URL.Query().Get("group"))
	}
	reply(s, w, r, ask, func(m fencelock.Membership) any { return membersJSON(m) })
}

func membersJSON(m fencelock.Membership) MembersJSON {
	out := MembersJSON{Group: m.Group, Voters: map[uint64]string{}, NonVoting: map[uint64]string{},
		Removed: append([]uint64{}, m.Removed...), ConfigChangeIndex: m.ConfigChangeIndex}
	for id, a := range m.Voters {
		out.Voters[id] = a
	}
	for id, a := range m.NonVoting {
		out.NonVoting[id] = a
	}
	return out
}

// addMember adds a replica to the default group (Node.AddNonVoting, or
// Node.AddReplica with "voting": true) and answers the membership after
// the change. The library forwards the change to the leader, so any replica
// takes it; it is idempotent, so a client may retry it on another replica.
func (s *Server) addMember(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeBody(w, r, nil, DecodeAddMember)
	if !ok {
		return
	}
	if !s.change(w, r, func(ctx context.Context) error {
		if req.Voting {
			return s.node.AddReplica(ctx, req.ID, req.Addr)
		}
		return s.node.AddNonVoting(ctx, req.ID, req.Addr)
	}) {
		return
	}
	s.log.Info("httpapi: replica added", "member", req.ID, "addr", req.Addr, "voting", req.Voting)
	s.answerMembers(w, r)
}

// removeMember removes a replica from the default group for good
// (Node.RemoveReplica): its ID can never be used again.
func (s *Server) removeMember(w http.ResponseWriter, r *http.Request) {
	if _, err := body(r); err != nil { // any body is ignored, but bounded
		writeError(w, err)
		return
	}
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		writeError(w, fmt.Errorf("%w: %.40q is not a replica ID (a positive decimal integer)", errBadRequest, r.PathValue("id")))
		return
	}
	if !s.change(w, r, func(ctx context.Context) error { return s.node.RemoveReplica(ctx, id) }) {
		return
	}
	s.log.Info("httpapi: replica removed", "member", id)
	s.answerMembers(w, r)
}

// MemberChangeResponse answers POST /v1/members and DELETE
// /v1/members/{id}: the change is in place (Done is always true: a change
// that cannot be made is an error), and Members is the default group's
// membership read after it, absent if that read failed, which does not undo
// the change.
type MemberChangeResponse struct {
	Done    bool         `json:"done"`
	Members *MembersJSON `json:"members,omitempty"`
}

// answerMembers answers a change that is made with the membership after it.
func (s *Server) answerMembers(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	out := MemberChangeResponse{Done: true}
	if m, err := s.node.Members(ctx); err == nil {
		mj := membersJSON(m)
		out.Members = &mj
	}
	writeJSON(w, http.StatusOK, out)
}
