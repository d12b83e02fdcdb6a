package httpapi

import (
	"context"
	"net/http"
)

// RevokeRequest is the body of POST /v1/locks/{name}/revoke; it may be
// empty. A FencingToken revokes only that grant (Node.RevokeGrant), so
// that an operator's late or retried call never frees the successor's.
type RevokeRequest struct {
	FencingToken ID `json:"fencing_token,omitempty"`
}

// DecodeRevoke decodes the body of a lock's revoke.
func DecodeRevoke(b []byte) (RevokeRequest, error) {
	var r RevokeRequest
	err := decodeJSON(b, &r, true)
	return r, err
}

// RevokeResponse answers a revoke.
type RevokeResponse struct {
	Revoked bool `json:"revoked"`
}

// revokeLock frees a lock whoever holds it (Node.Revoke): the admin
// right's call, for a holder that is stuck but alive.
func (s *Server) revokeLock(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	req, ok := decodeBody(w, r, validName(name), DecodeRevoke)
	if !ok {
		return
	}
	if !s.change(w, r, func(ctx context.Context) error {
		if req.FencingToken != 0 {
			return s.node.RevokeGrant(ctx, name, uint64(req.FencingToken))
		}
		return s.node.Revoke(ctx, name)
	}) {
		return
	}
	s.log.Info("httpapi: lock revoked", "name", name, "token", uint64(req.FencingToken))
	writeJSON(w, http.StatusOK, RevokeResponse{Revoked: true})
}

// revokeElection ends an election's current term whoever leads it
// (Node.RevokeLeadership). Its body, if any, is an empty object.
func (s *Server) revokeElection(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	empty := func(b []byte) (struct{}, error) { return struct{}{}, decodeJSON(b, &struct{}{}, true) }
	if _, ok := decodeBody(w, r, validName(name), empty); !ok {
		return
	}
	if !s.change(w, r, func(ctx context.Context) error { return s.node.RevokeLeadership(ctx, name) }) {
		return
	}
	s.log.Info("httpapi: leadership revoked", "election", name)
	writeJSON(w, http.StatusOK, RevokeResponse{Revoked: true})
}
