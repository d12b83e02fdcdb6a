package httpapi_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// POST /v1/groups/{name} creates a group on the running deployment, PUT
// /v1/groups/{name}/voters gives it other voters, DELETE drops it (with
// ?force=true while it holds locks), GET /v1/groups lists the table; the
// changes need the admin right on every name, and each bad input has its
// code.
func TestGroupTableOverHTTP(t *testing.T) {
	g, f := onFollower(t, "admin admin:* read:* lock:*\nreader read:*\njobadm admin:jobs/ read:*\n", nil)
	base := g.urls[f]
	admin, reader := bearer("admin"), bearer("reader")
	code := func(r reply, status int, code string) {
		t.Helper()
		require.Equal(t, status, r.Status, r.Raw)
		require.Equal(t, code, r.Str("code"), r.Raw)
	}

	r := callWith(t, "GET", base+"/v1/groups", nil, reader)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, []any{}, r.Body["groups"])

	// Only admin on every name changes the table.
	voters := map[string]any{"voters": []int{1, 2, 3}}
	code(callWith(t, "POST", base+"/v1/groups/billing", voters, reader), 403, httpapi.CodeForbidden)
	code(callWith(t, "POST", base+"/v1/groups/billing", voters, bearer("jobadm")), 403, httpapi.CodeForbidden)
	code(callWith(t, "DELETE", base+"/v1/groups/billing", nil, reader), 403, httpapi.CodeForbidden)
	code(callWith(t, "PUT", base+"/v1/groups/billing/voters", voters, reader), 403, httpapi.CodeForbidden)
	code(callWith(t, "POST", base+"/v1/members/3/replace", map[string]any{"new": 4}, reader), 403, httpapi.CodeForbidden)
	code(callWith(t, "POST", base+"/v1/members/3/replace", map[string]any{"new": 9}, admin), 400, httpapi.CodeInvalidVoters)
	code(callWith(t, "POST", base+"/v1/members/x/replace", map[string]any{"new": 4}, admin), 400, httpapi.CodeBadRequest)

	r = callWith(t, "POST", base+"/v1/groups/billing", voters, admin)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "billing", r.Str("name"))
	require.Equal(t, []any{1.0, 2.0, 3.0}, r.Body["voters"])
	require.NotEmpty(t, r.Str("shard_id"))
	code(callWith(t, "POST", base+"/v1/groups/billing", voters, admin), 409, httpapi.CodeGroupExists)
	code(callWith(t, "POST", base+"/v1/groups/Billing", voters, admin), 400, httpapi.CodeInvalidGroup)
	code(callWith(t, "POST", base+"/v1/groups/other", map[string]any{"voters": []int{1, 2}}, admin), 400, httpapi.CodeInvalidVoters)
	code(callWith(t, "POST", base+"/v1/groups/other", map[string]any{"voters": []int{1, 9, 2}}, admin), 400, httpapi.CodeInvalidVoters)
	code(callWith(t, "POST", base+"/v1/groups/other", `{}`, admin), 400, httpapi.CodeBadRequest)
	code(callWith(t, "POST", base+"/v1/groups/other", `{"voters":[1],"x":1}`, admin), 400, httpapi.CodeBadRequest)
	code(callWith(t, "PUT", base+"/v1/groups/nope/voters", map[string]any{"voters": []int{1}}, admin), 400, httpapi.CodeUnknownGroup)
	code(callWith(t, "DELETE", base+"/v1/groups/nope", nil, admin), 400, httpapi.CodeUnknownGroup)
	code(callWith(t, "DELETE", base+"/v1/groups/billing?force=maybe", nil, admin), 400, httpapi.CodeBadRequest)
	code(callWith(t, "PATCH", base+"/v1/groups/billing", nil, admin), 405, httpapi.CodeMethodNotAllowed)

	// The group grants at once on every replica, through the API.
	sid, hdr := newSessionAs(t, g.urls[1], "admin")
	acq := callWith(t, "POST", g.urls[1]+"/v1/locks/job%40billing/acquire", map[string]any{"session_id": sid, "wait": true}, hdr)
	require.Equal(t, 200, acq.Status, acq.Raw)
	require.Equal(t, true, acq.Body["granted"], acq.Raw)

	// Down to one voter, f: the others are taken off the group.
	r = callWith(t, "PUT", base+"/v1/groups/billing/voters", map[string]any{"voters": []uint64{f}}, admin)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, []any{float64(f)}, r.Body["voters"])
	require.Len(t, r.Body["removed"], 2)
	m := callWith(t, "GET", base+"/v1/members?group=billing", nil, reader)
	require.Equal(t, map[string]any{fmt.Sprint(f): g.Network().Addr(f)}, m.Body["voters"], m.Raw)
	other := g.urls[f%3+1]
	// A replica taken off the group learns of it from the group, a moment
	// after the move is done; until then it answers 503, which a client
	// retries (CI saw "this replica is not ready yet" once).
	var moved reply
	require.Eventually(t, func() bool {
		moved = callWith(t, "GET", other+"/v1/members?group=billing", nil, reader)
		return moved.Status != 503
	}, time.Minute, 20*time.Millisecond)
	code(moved, 421, httpapi.CodeGroupMoved)
	code(callWith(t, "PUT", base+"/v1/groups/billing/voters", map[string]any{"voters": []uint64{f%3 + 1}}, admin), 400, httpapi.CodeInvalidVoters)

	// The lock taken before is still held: a plain drop is refused.
	code(callWith(t, "DELETE", base+"/v1/groups/billing", nil, admin), 409, httpapi.CodeGroupHoldsLocks)
	r = callWith(t, "DELETE", base+"/v1/groups/billing?force=true", nil, admin)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["dropped"])
	r = callWith(t, "GET", base+"/v1/groups", nil, reader)
	require.Equal(t, []any{}, r.Body["groups"], r.Raw)
}
