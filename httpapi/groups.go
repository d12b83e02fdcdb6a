package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/fencelock/fencelock"
)

// GroupChangeTimeout bounds a change of the group table over HTTP (create,
// drop, set voters, replace): a move of voters waits for each new voter to
// catch up, which takes longer than a lock call's bound. A change still
// under way when it passes goes on; the answer is 503 unavailable.
const GroupChangeTimeout = 2 * time.Minute

// TableGroupJSON is one named group of the deployment's group table
// (fencelock.GroupInfo).
type TableGroupJSON struct {
	Name    string   `json:"name"`
	Voters  []uint64 `json:"voters"`
	Removed []uint64 `json:"removed"` // replica IDs taken off the group for good
	ShardID string   `json:"shard_id"`
}

// GroupsJSON answers GET /v1/groups.
type GroupsJSON struct {
	Groups []TableGroupJSON `json:"groups"`
}

// VotersRequest is the body of POST /v1/groups/{name} and PUT
// /v1/groups/{name}/voters.
type VotersRequest struct {
	Voters []uint64 `json:"voters"`
}

// DecodeVoters decodes the body of a group's create or set-voters; whether
// the voters are valid is the library's to say (invalid_voters).
func DecodeVoters(b []byte) (VotersRequest, error) {
	var r VotersRequest
	if err := decodeJSON(b, &r, false); err != nil {
		return r, err
	}
	if len(r.Voters) == 0 {
		return r, fmt.Errorf("%w: voters is required (the replica IDs that vote in the group)", errBadRequest)
	}
	return r, nil
}

// ReplaceRequest is the body of POST /v1/members/{id}/replace: every
// group moves off replica {id} onto replica New
// (fencelock.Node.ReplaceReplica).
type ReplaceRequest struct {
	New uint64 `json:"new"`
}

// DecodeReplace decodes the body of POST /v1/members/{id}/replace.
func DecodeReplace(b []byte) (ReplaceRequest, error) {
	var r ReplaceRequest
	if err := decodeJSON(b, &r, false); err != nil {
		return r, err
	}
	if r.New == 0 {
		return r, fmt.Errorf("%w: new is required (the positive replica ID that takes the place of the one in the path)", errBadRequest)
	}
	return r, nil
}

func groupJSON(g fencelock.GroupInfo) TableGroupJSON {
	out := TableGroupJSON{Name: g.Name, Voters: append([]uint64{}, g.Voters...), Removed: append([]uint64{}, g.Removed...),
		ShardID: strconv.FormatUint(g.ShardID, 10)}
	return out
}

// needAdminGroups is the right to change the group table: admin on every
// name, for a group's names are every name that ends in its "@group".
func needAdminGroups(p *principal, r *http.Request) error {
	if !p.may(RightAdmin, AllNames) {
		return errNoRight(p, RightAdmin, ` on "*" (changing the group table)`)
	}
	return nil
}

// groupChangeCtx bounds a change of the group table.
func (s *Server) groupChangeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), max(s.timeout, GroupChangeTimeout))
}

// listGroups answers GET /v1/groups: the group table, as a linearizable
// read of the default group.
func (s *Server) listGroups(w http.ResponseWriter, r *http.Request) {
	reply(s, w, r, s.node.Groups, func(groups []fencelock.GroupInfo) any {
		out := GroupsJSON{Groups: []TableGroupJSON{}}
		for _, g := range groups {
			out.Groups = append(out.Groups, groupJSON(g))
		}
		return out
	})
}

// answerGroup answers a change with the group as the table has it after.
func (s *Server) answerGroup(w http.ResponseWriter, r *http.Request, name string) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	groups, err := s.node.Groups(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	for _, g := range groups {
		if g.Name == name {
			writeJSON(w, http.StatusOK, groupJSON(g))
			return
		}
	}
	writeError(w, fmt.Errorf("%w: %q was dropped meanwhile", fencelock.ErrUnknownGroup, name))
}

// groupChange reads the body of a change of the group table with decode
// (unless the path was bad: pathErr), makes the change within
// groupChangeCtx, and reports whether it was made; if not, it has answered
// why.
func groupChange[T any](s *Server, w http.ResponseWriter, r *http.Request, pathErr error,
	decode func([]byte) (T, error), change func(context.Context, T) error) (T, bool) {
	b, err := body(r)
	if pathErr != nil {
		err = pathErr
	}
	var req T
	if err == nil {
		req, err = decode(b)
	}
	if err != nil {
		writeError(w, err)
		return req, false
	}
	ctx, cancel := s.groupChangeCtx(r)
	defer cancel()
	if err := change(ctx, req); err != nil {
		writeError(w, err)
		return req, false
	}
	return req, true
}

// createGroup adds a group to the running deployment (Node.CreateGroup):
// the admin right's call, on every name.
func (s *Server) createGroup(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	req, ok := groupChange(s, w, r, nil, DecodeVoters, func(ctx context.Context, req VotersRequest) error {
		return s.node.CreateGroup(ctx, fencelock.GroupConfig{Name: name, Voters: req.Voters})
	})
	if !ok {
		return
	}
	s.log.Info("httpapi: group created", "group", name, "voters", req.Voters)
	s.answerGroup(w, r, name)
}

// DropResponse answers DELETE /v1/groups/{name}.
type DropResponse struct {
	Dropped bool `json:"dropped"`
}

// dropGroup removes a group from the running deployment (Node.DropGroup);
// ?force=true revokes its locks first (ForceDrop).
func (s *Server) dropGroup(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if _, err := body(r); err != nil { // any body is ignored, but bounded
		writeError(w, err)
		return
	}
	var opts []fencelock.DropOption
	switch f := r.URL.Query().Get("force"); f {
	case "", "false":
	case "true":
		opts = append(opts, fencelock.ForceDrop())
	default:
		writeError(w, fmt.Errorf("%w: force=%.20q: want true or false", errBadRequest, f))
		return
	}
	ctx, cancel := s.groupChangeCtx(r)
	defer cancel()
	if err := s.node.DropGroup(ctx, name, opts...); err != nil {
		writeError(w, err)
		return
	}
	s.log.Info("httpapi: group dropped", "group", name, "force", len(opts) > 0)
	writeJSON(w, http.StatusOK, DropResponse{Dropped: true})
}

// setVoters gives a group other voters (Node.SetVoters), and answers once
// its membership moved to them.
func (s *Server) setVoters(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	req, ok := groupChange(s, w, r, nil, DecodeVoters, func(ctx context.Context, req VotersRequest) error {
		return s.node.SetVoters(ctx, name, req.Voters)
	})
	if !ok {
		return
	}
	s.log.Info("httpapi: group's voters set", "group", name, "voters", req.Voters)
	s.answerGroup(w, r, name)
}

// replaceMember moves every group off one replica onto another
// (Node.ReplaceReplica), and answers the default group's membership after.
func (s *Server) replaceMember(w http.ResponseWriter, r *http.Request) {
	var pathErr error
	old, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || old == 0 {
		pathErr = fmt.Errorf("%w: %.40q is not a replica ID (a positive decimal integer)", errBadRequest, r.PathValue("id"))
	}
	req, ok := groupChange(s, w, r, pathErr, DecodeReplace, func(ctx context.Context, req ReplaceRequest) error {
		return s.node.ReplaceReplica(ctx, old, req.New)
	})
	if !ok {
		return
	}
	s.log.Info("httpapi: replica replaced in every group", "old", old, "new", req.New)
	s.answerMembers(w, r)
}
