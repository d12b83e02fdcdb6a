package httpapi_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
)

// GET /v1/members reads a group's membership; POST adds a replica
// (non-voting, or promoted with "voting": true) and DELETE removes one,
// with the admin right on every name; each works on a follower, the library
// taking the change to the leader. A removed ID is refused for good (409
// id_removed).
func TestMembersOverHTTP(t *testing.T) {
	g, f := onFollower(t, "admin admin:* read:*\nreader read:*\njobadm admin:jobs/ read:*\nlocker lock:*\n", withGroupB(1, 2, 3))
	base := g.urls[f]
	admin, reader := bearer("admin"), bearer("reader")
	forbidden := func(r reply, right string) {
		t.Helper()
		require.Equal(t, 403, r.Status, r.Raw)
		require.Equal(t, httpapi.CodeForbidden, r.Str("code"), r.Raw)
		require.Contains(t, r.Str("error"), right, r.Raw)
	}
	members := func(u string) map[string]any {
		t.Helper()
		r := callWith(t, "GET", u, nil, reader)
		require.Equal(t, 200, r.Status, r.Raw)
		return r.Body
	}

	m := members(base + "/v1/members")
	require.Equal(t, "", m["group"])
	require.Equal(t, map[string]any{"1": g.Network().Addr(1), "2": g.Network().Addr(2), "3": g.Network().Addr(3)}, m["voters"])
	require.Equal(t, map[string]any{}, m["non_voting"])
	require.Equal(t, []any{}, m["removed"])
	require.NotZero(t, m["config_change_index"])
	m = members(base + "/v1/members?group=b")
	require.Equal(t, "b", m["group"])
	require.Len(t, m["voters"], 3)
	r := callWith(t, "GET", base+"/v1/members?group=nope", nil, reader)
	require.Equal(t, 400, r.Status, r.Raw)
	require.Equal(t, httpapi.CodeUnknownGroup, r.Str("code"))
	forbidden(callWith(t, "GET", base+"/v1/members", nil, bearer("locker")), "read")
	require.Equal(t, 401, callWith(t, "GET", base+"/v1/members", nil, nil).Status)

	// Only admin on every name changes the membership.
	add4 := map[string]any{"id": 4, "addr": g.Network().Addr(4)}
	forbidden(callWith(t, "POST", base+"/v1/members", add4, reader), "admin")
	forbidden(callWith(t, "POST", base+"/v1/members", add4, bearer("jobadm")), "admin")
	forbidden(callWith(t, "DELETE", base+"/v1/members/3", nil, reader), "admin")
	forbidden(callWith(t, "DELETE", base+"/v1/members/3", nil, bearer("jobadm")), "admin")
	require.Len(t, members(base + "/v1/members")["voters"], 3, "the refusals changed nothing")

	// Bodies and paths the API refuses before asking the group.
	for _, b := range []string{``, `{}`, `{"id":4}`, `{"addr":"h:1"}`, `{"id":0,"addr":"h:1"}`, `{"id":4,"addr":""}`,
		`{"id":4,"addr":"h:1","vote":true}`, `{"id":4,"addr":"h:1"} {}`, `{"id":-4,"addr":"h:1"}`, `{"id":4.5,"addr":"h:1"}`,
		`{"id":4,"addr":"nohost"}`, `{"id":4,"addr":"h:0"}`, `{"id":4,"addr":"h:99999"}`, `{"id":4,"addr":":7001"}`} {
		r := callWith(t, "POST", base+"/v1/members", b, admin)
		require.Equal(t, 400, r.Status, "%s: %s", b, r.Raw)
		require.Equal(t, httpapi.CodeBadRequest, r.Str("code"), "%s: %s", b, r.Raw)
	}
	for _, id := range []string{"0", "abc", "-1", "18446744073709551616"} {
		r := callWith(t, "DELETE", base+"/v1/members/"+id, nil, admin)
		require.Equal(t, 400, r.Status, "%s: %s", id, r.Raw)
		require.Equal(t, httpapi.CodeBadRequest, r.Str("code"))
	}
	r = callWith(t, "PUT", base+"/v1/members", `{}`, admin)
	require.Equal(t, 405, r.Status, r.Raw)

	// Replica 4 joins: added non-voting on a follower, started, caught up,
	// promoted on another replica.
	r = callWith(t, "POST", base+"/v1/members", add4, admin)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, true, r.Body["done"], r.Raw)
	require.Equal(t, map[string]any{"4": g.Network().Addr(4)}, r.Body["members"].(map[string]any)["non_voting"], r.Raw)
	r = callWith(t, "POST", base+"/v1/members", add4, admin)
	require.Equal(t, 200, r.Status, "adding it again is a no-op: %s", r.Raw)
	n4, err := fencelock.Start(context.Background(), fencelock.Config{ReplicaID: 4, Join: true, Addr: g.Network().Addr(4),
		Dir: filepath.Join(t.TempDir(), "4"), Transport: g.Network(), Logger: quiet,
		Groups: []fencelock.GroupConfig{{Name: "b", Voters: []uint64{1, 2, 3}}}})
	require.NoError(t, err)
	t.Cleanup(func() { n4.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err = n4.Members(ctx) // a linearizable read on 4: it has caught up
	require.NoError(t, err)
	other := g.urls[f%3+1]
	r = callWith(t, "POST", other+"/v1/members", map[string]any{"id": 4, "addr": g.Network().Addr(4), "voting": true}, admin)
	require.Equal(t, 200, r.Status, r.Raw)
	m = members(base + "/v1/members")
	require.Equal(t, g.Network().Addr(4), m["voters"].(map[string]any)["4"], "4 is a voter: %v", m)
	require.Equal(t, map[string]any{}, m["non_voting"])

	// Refusals of the group: 409, with the code saying which.
	r = callWith(t, "POST", base+"/v1/members", map[string]any{"id": 5, "addr": g.Network().Addr(1)}, admin)
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, httpapi.CodeMembership, r.Str("code"), r.Raw)
	require.Contains(t, r.Str("error"), "belongs to replica 1")
	r = callWith(t, "DELETE", base+"/v1/members/9", nil, admin)
	require.Equal(t, 409, r.Status, r.Raw)
	require.Equal(t, httpapi.CodeMembership, r.Str("code"), r.Raw)

	// Removed, 4 is gone for good: removing it again is a no-op, adding
	// it again is refused, under any address.
	r = callWith(t, "DELETE", other+"/v1/members/4", nil, admin)
	require.Equal(t, 200, r.Status, r.Raw)
	mm := r.Body["members"].(map[string]any)
	require.Equal(t, []any{float64(4)}, mm["removed"], r.Raw)
	require.NotContains(t, mm["voters"], "4", r.Raw)
	r = callWith(t, "DELETE", base+"/v1/members/4", nil, admin)
	require.Equal(t, 200, r.Status, "removing it again is a no-op: %s", r.Raw)
	for _, addr := range []string{g.Network().Addr(4), g.Network().Addr(6)} {
		for _, voting := range []bool{false, true} {
			r = callWith(t, "POST", base+"/v1/members", map[string]any{"id": 4, "addr": addr, "voting": voting}, admin)
			require.Equal(t, 409, r.Status, r.Raw)
			require.Equal(t, httpapi.CodeIDRemoved, r.Str("code"), "%s voting %v: %s", addr, voting, r.Raw)
		}
	}
	m = members(base + "/v1/members")
	require.Len(t, m["voters"], 3, fmt.Sprint(m))
}
