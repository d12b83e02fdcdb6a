package httpapi

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/lockapi"
)

// StatusJSON answers GET /v1/status: this replica's view of the group.
// It is lockapi.StatusJSON, which the Go client decodes too.
type StatusJSON = lockapi.StatusJSON

// GroupJSON is one group in StatusJSON.
// It is lockapi.GroupJSON, which the Go client decodes too.
type GroupJSON = lockapi.GroupJSON

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st := s.node.Stats()
	out := StatusJSON{ReplicaID: st.ReplicaID, LeaderID: st.LeaderID, IsLeader: st.IsLeader, Term: st.Term,
		AppliedIndex: st.AppliedIndex, GroupID: strconv.FormatUint(st.GroupID, 16),
		Voters: map[string]string{}, NonVoting: map[string]string{},
		Sessions: st.Sessions, LocksHeld: st.LocksHeld, Waiters: st.Waiters,
		Unreachable: append([]uint64{}, st.Unreached...), Version: NewVersionJSON(st.Version),
		Writes: newFormatsJSON(st.Writes), FollowsGroupTable: st.FollowsGroupTable}
	for id, a := range st.Voters {
		out.Voters[strconv.FormatUint(id, 10)] = a
	}
	for _, g := range st.Groups {
		j := groupStatusJSON(g.GroupStatus)
		j.LocksHeld = g.LocksHeld
		out.Groups = append(out.Groups, j)
	}
	out.Mirrors = []GroupJSON{}
	for _, g := range st.Mirrors {
		out.Mirrors = append(out.Mirrors, groupStatusJSON(g))
	}
	// The full membership (non-voting replicas too) is a linearizable read;
	// without a quorum the local view above is still worth showing.
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if m, err := s.node.Members(ctx); err == nil {
		for id, a := range m.NonVoting {
			out.NonVoting[strconv.FormatUint(id, 10)] = a
		}
	}
	s.mu.Lock()
	out.HTTPSessions = len(s.sessions)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

func groupStatusJSON(g fencelock.GroupStatus) GroupJSON {
	return GroupJSON{Name: g.Name, GroupID: strconv.FormatUint(g.GroupID, 16),
		LeaderID: g.LeaderID, IsLeader: g.IsLeader, NonVoting: g.NonVoting,
		Voters: slices.Sorted(maps.Keys(g.Voters)), Term: g.Term,
		Unreachable: append([]uint64{}, g.Unreached...), Writes: newFormatsJSON(g.Writes), Mirror: g.Mirror}
}

// healthz answers /livez (and /healthz, its older name): the process
// serves HTTP. It asks nothing of the groups: a replica without a quorum is
// alive, and restarting it would not bring the quorum back.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyTimeout bounds /readyz's read, under the 1 s a Kubernetes probe
// waits by default.
const readyTimeout = 800 * time.Millisecond

// readyz answers /readyz: 200 when this replica has caught up with a
// leader it knows, in every group (fencelock.Node.Ready); else 503 with the
// cause (code no_quorum when that is it).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.node.Ready(ctx); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
