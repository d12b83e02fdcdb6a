package httpapi_test

import (
	"context"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
)

// Over HTTP with two groups (the default one and b): one session_id takes
// locks in both, each fenced by its own group; a heartbeat renews every
// part; the views list one group each; status lists the groups; an
// administrator ends one part with ?group=.
func TestGroupsOverHTTP(t *testing.T) {
	g := newGroupWith(t, withGroupB(1, 2, 3), true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, other := g.urls[1], g.urls[2]

	// Status lists the groups, each with its ID and leader, and the
	// formats it writes: this build's, once its leader raised the gate
	// (from then on a part records its session's ID, which the views
	// show; the root's TestGroupsViewsAcrossTheGate checks what they show before).
	v := fencelock.BuildVersion()
	newest := map[string]any{"codec": float64(v.Codec), "snapshot": float64(v.Snapshot)}
	ids := map[string]string{}
	for len(ids) < 2 {
		r := call(t, "GET", a+"/v1/status", nil)
		require.Equal(t, 200, r.Status, r.Raw)
		clear(ids)
		groups, _ := r.Body["groups"].([]any)
		require.Len(t, groups, 2, r.Raw)
		for _, x := range groups {
			gj := x.(map[string]any)
			if gj["leader_id"].(float64) != 0 && gj["group_id"] != "0" && reflect.DeepEqual(newest, gj["writes"]) {
				ids[gj["name"].(string)] = gj["group_id"].(string)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("status never showed both groups led: %s", r.Raw)
		case <-time.After(20 * time.Millisecond): // status has no change notification
		}
	}
	require.NotEqual(t, ids[""], ids["b"])
	// Each replica says it runs the group table's groups once it has read
	// the table that Config.Groups seeded (false before: its own list).
	for id, u := range g.urls {
		for {
			r := call(t, "GET", u+"/v1/status", nil)
			require.Equal(t, 200, r.Status, r.Raw)
			follows, ok := r.Body["follows_group_table"].(bool)
			require.True(t, ok, "status has no follows_group_table: %s", r.Raw)
			if follows {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("replica %d never said it follows the group table: %s", id, r.Raw)
			case <-time.After(20 * time.Millisecond): // status has no change notification
			}
		}
	}
	fenceGroup := func(r reply) string {
		f, err := fencelock.ParseFence(r.Str("fence"))
		require.NoError(t, err, r.Raw)
		return strconv.FormatUint(f.Group, 16)
	}

	// One session_id takes a lock in each group, by the name's "@group"
	// percent-encoded in the path.
	const ttl = 1500 * time.Millisecond
	sid := newSession(t, a, int(ttl.Milliseconds()))
	rb := call(t, "POST", a+"/v1/locks/x%40b/acquire", map[string]any{"session_id": sid, "wait": false})
	require.Equal(t, 200, rb.Status, rb.Raw)
	require.Equal(t, true, rb.Body["granted"], rb.Raw)
	require.Equal(t, ids["b"], fenceGroup(rb), "x@b is fenced by b")
	partB := rb.Str("holder_session")
	require.NotEmpty(t, partB, rb.Raw)
	rd := call(t, "POST", lockURL(a, "y", "acquire"), map[string]any{"session_id": sid, "wait": false})
	require.Equal(t, true, rd.Body["granted"], rd.Raw)
	require.Equal(t, ids[""], fenceGroup(rd), "y is fenced by the default group")
	require.Equal(t, sid, rd.Str("holder_session"), "in the default group the session goes by session_id")
	// The same call through another replica is forwarded to the owner
	// and answers the same grant.
	r := call(t, "POST", other+"/v1/locks/x%40b/acquire", map[string]any{"session_id": sid, "wait": false})
	require.Equal(t, rb.Str("fence"), r.Str("fence"), r.Raw)
	r = call(t, "POST", lockURL(a, "q@nope", "acquire"), map[string]any{"session_id": sid, "wait": false})
	require.Equal(t, 400, r.Status, r.Raw)
	require.Equal(t, httpapi.CodeUnknownGroup, r.Str("code"))

	// Views: one group each.
	names := func(r reply) []string {
		var out []string
		locks, _ := r.Body["locks"].([]any)
		for _, l := range locks {
			out = append(out, l.(map[string]any)["name"].(string))
		}
		return out
	}
	r = call(t, "GET", other+"/v1/locks?group=b", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "b", r.Body["group"])
	require.Equal(t, []string{"x@b"}, names(r))
	r = call(t, "GET", other+"/v1/locks?prefix=x%40b", nil)
	require.Equal(t, []string{"x@b"}, names(r), r.Raw)
	r = call(t, "GET", other+"/v1/locks?prefix=x%40b&group=c", nil)
	require.Equal(t, 400, r.Status, r.Raw)
	// Without a group: every group's locks, each with its group.
	r = call(t, "GET", other+"/v1/locks", nil)
	require.Equal(t, "", r.Body["group"])
	require.Equal(t, true, r.Body["all_groups"], r.Raw)
	require.Equal(t, []string{"x@b", "y"}, names(r))
	locks := r.Body["locks"].([]any)
	require.Equal(t, "b", locks[0].(map[string]any)["group"], r.Raw)
	require.Equal(t, "", locks[1].(map[string]any)["group"], r.Raw)
	r = call(t, "GET", other+"/v1/locks?prefix=y", nil)
	require.Equal(t, []string{"y"}, names(r))
	r = call(t, "GET", other+"/v1/locks?group=nope", nil)
	require.Equal(t, 400, r.Status, r.Raw)
	require.Equal(t, httpapi.CodeUnknownGroup, r.Str("code"))
	// A named group's views show the session by its session_id, and its
	// part there by part_id (the acquire's holder_session).
	r = call(t, "GET", other+"/v1/locks/x%40b", nil)
	require.Equal(t, sid, r.Str("holder_session"), r.Raw)
	require.Equal(t, partB, r.Str("holder_part"), r.Raw)
	holder := r.Body["holders"].([]any)[0].(map[string]any)
	require.Equal(t, []any{sid, partB}, []any{holder["session_id"], holder["part_id"]}, r.Raw)
	r = call(t, "GET", other+"/v1/locks/y", nil)
	require.Equal(t, sid, r.Str("holder_session"), r.Raw)
	require.NotContains(t, r.Raw, "part_id", "the default group's part is the session")
	require.NotContains(t, r.Raw, "holder_part")
	sessions := func(r reply, field string) []string {
		var out []string
		list, _ := r.Body["sessions"].([]any)
		for _, s := range list {
			id, _ := s.(map[string]any)[field].(string)
			out = append(out, id)
		}
		return out
	}
	r = call(t, "GET", other+"/v1/sessions?group=b", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Equal(t, "b", r.Body["group"])
	require.Equal(t, []string{sid}, sessions(r, "session_id"))
	require.Equal(t, []string{partB}, sessions(r, "part_id"))
	r = call(t, "GET", other+"/v1/sessions", nil)
	require.Equal(t, []string{sid}, sessions(r, "session_id"), r.Raw)

	// Heartbeats alone keep both parts (the session renews itself only on
	// them): after three TTLs both grants are still the same ones.
	start := time.Now()
	for time.Since(start) < 3*ttl {
		r = call(t, "POST", other+"/v1/sessions/"+sid+"/heartbeat", nil)
		require.Equal(t, 200, r.Status, r.Raw)
		time.Sleep(ttl / 6) // the client's heartbeat period, not synchronisation
	}
	r = call(t, "GET", lockURL(other, "x@b", ""), nil)
	require.Equal(t, rb.Str("fencing_token"), r.Str("fencing_token"), "x@b kept by heartbeats: %s", r.Raw)
	require.Equal(t, partB, r.Str("holder_part"))
	r = call(t, "GET", lockURL(other, "y", ""), nil)
	require.Equal(t, rd.Str("fencing_token"), r.Str("fencing_token"), r.Raw)

	// With its secret, DELETE ends the whole session: ?group= (one part,
	// an administrator's call) is refused, and nothing ends.
	r = callWith(t, "DELETE", a+"/v1/sessions/"+sid+"?group=b", nil,
		map[string]string{httpapi.SecretHeader: secrets.For(a+"/v1/sessions/"+sid, nil)})
	require.Equal(t, 400, r.Status, "?group= with the secret: %s", r.Raw)
	r = call(t, "POST", a+"/v1/sessions/"+sid+"/heartbeat", nil)
	require.Equal(t, 200, r.Status, r.Raw)

	// Without heartbeats the parts end, x@b's too: its watch says expired.
	events := sse(t, ctx, lockURL(other, "x@b", "watch"))
	nextEvent(t, events, "state", func(e event) bool { return e.Kind == "state" && e.Data["held"] == true })
	ev := nextEvent(t, events, "expired", func(e event) bool { return e.Kind == "released" || e.Kind == "expired" })
	require.Equal(t, "expired", ev.Kind, "x@b ended with its session: %v", ev.Data)
	require.Equal(t, sid, ev.Data["previous_session"])
	require.Equal(t, partB, ev.Data["previous_part"])
}

// An administrator ends one part of a session with ?group=: the locks held
// in that group free, the others stay held and the session lives on. A
// listing of a group is checked against the names it lists: their part
// before "@group".
func TestGroupsAdminOverHTTP(t *testing.T) {
	acl, err := httpapi.ParseTokens([]byte("full\nadmin admin:* read:*\njobs lock:jobs/ read:jobs/\nodd read:jobs/@b\n"))
	require.NoError(t, err)
	g := newGroupWith(t, withGroupB(1, 2, 3), true, httpapi.WithACL(acl))
	a, other := g.urls[1], g.urls[2]
	sid, h := newSessionAs(t, a, "full")
	r := callWith(t, "POST", a+"/v1/locks/x%40b/acquire", map[string]any{"session_id": sid}, h)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	partB := r.Str("holder_session")
	r = callWith(t, "POST", lockURL(a, "y", "acquire"), map[string]any{"session_id": sid}, h)
	require.Equal(t, true, r.Body["granted"], r.Raw)

	admin := bearer("admin")
	r = callWith(t, "DELETE", other+"/v1/sessions/"+partB+"?group=nope", nil, admin)
	require.Equal(t, 400, r.Status, r.Raw)
	require.Equal(t, httpapi.CodeUnknownGroup, r.Str("code"))
	r = callWith(t, "DELETE", other+"/v1/sessions/"+partB+"?group=b", nil, admin)
	require.Equal(t, 204, r.Status, r.Raw)
	r = callWith(t, "GET", lockURL(other, "x@b", ""), nil, admin)
	require.Equal(t, false, r.Body["held"], "the part in b ended at b: %s", r.Raw)
	r = callWith(t, "GET", lockURL(other, "y", ""), nil, admin)
	require.Equal(t, sid, r.Str("holder_session"), "the default part is untouched: %s", r.Raw)
	r = callWith(t, "POST", a+"/v1/sessions/"+sid+"/heartbeat", nil, h)
	require.Equal(t, 200, r.Status, "the session lives on: %s", r.Raw)
	// The session's next call naming b opens a new part there.
	r = callWith(t, "POST", a+"/v1/locks/x%40b/acquire", map[string]any{"session_id": sid}, h)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	require.NotEqual(t, partB, r.Str("holder_session"))

	// Listings: read:jobs/ may list jobs/ in b; a grant written with the
	// group in it covers no listing of b, whose names end in "@b".
	jobs, odd := bearer("jobs"), bearer("odd")
	r = callWith(t, "GET", other+"/v1/locks?prefix=jobs%2F&group=b", nil, jobs)
	require.Equal(t, 200, r.Status, r.Raw)
	r = callWith(t, "GET", other+"/v1/locks?prefix=jobs%2F%40b", nil, jobs)
	require.Equal(t, 200, r.Status, r.Raw)
	r = callWith(t, "GET", other+"/v1/locks?group=b", nil, jobs)
	require.Equal(t, 403, r.Status, r.Raw)
	r = callWith(t, "GET", other+"/v1/locks?prefix=jobs%2F%40b", nil, odd)
	require.Equal(t, 403, r.Status, "jobs/x@b is not under the grant jobs/@b: %s", r.Raw)
}
