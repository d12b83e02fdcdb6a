package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// Status, Replicas, Locks, Contended and Sessions on three replicas: what
// the CLI's status, locks and sessions print.
func TestListCalls(t *testing.T) {
	g, ctx := newGroup(t)
	c := newClient(t, g.urls[1], g.urls[2], g.urls[3])

	a := newSession(t, ctx, c, 3*time.Second, fencelock.WithSessionName("a@test"))
	b := newSession(t, ctx, c, 3*time.Second, fencelock.WithSessionName("b@test"))
	la, err := a.Acquire(ctx, "jobs/a")
	require.NoError(t, err)
	_, err = a.Acquire(ctx, "other/x")
	require.NoError(t, err)
	// b waits behind a for jobs/a: a queue to list and rank.
	waited := make(chan error, 1)
	go func() {
		_, err := b.Acquire(ctx, "jobs/a")
		waited <- err
	}()
	require.Eventually(t, func() bool {
		info, err := c.Inspect(ctx, "jobs/a")
		return err == nil && info.Waiters == 1
	}, 20*time.Second, 20*time.Millisecond)

	st, err := c.Status(ctx)
	require.NoError(t, err)
	require.NotZero(t, st.ReplicaID)
	require.Len(t, st.Voters, 3)
	require.NotZero(t, st.LeaderID)
	require.NotEmpty(t, st.Groups)
	require.True(t, json.Valid(st.Raw))
	require.Contains(t, string(st.Raw), `"replica_id"`)

	ls, err := c.Locks(ctx, "jobs/", "")
	require.NoError(t, err)
	require.Equal(t, "", ls.Group)
	require.Len(t, ls.Locks, 1, "only the prefix's locks")
	l := ls.Locks[0]
	require.Equal(t, "jobs/a", l.Name)
	require.True(t, l.Held)
	require.Equal(t, ID(a.ID()), l.HolderSession)
	require.Equal(t, "a@test", l.HolderName)
	require.Equal(t, ID(la.Token()), l.FencingToken)
	require.Equal(t, 1, l.Waiters)
	require.Equal(t, []ID{ID(b.ID())}, l.Queue)
	require.Len(t, l.Waiting, 1)
	require.Equal(t, "b@test", l.Waiting[0].Name)
	require.Equal(t, 1, l.Waiting[0].Place)
	require.Len(t, l.Holders, 1)
	require.Equal(t, ID(la.Token()), l.Holders[0].FencingToken)

	all, err := c.Locks(ctx, "", "")
	require.NoError(t, err)
	require.Len(t, all.Locks, 2)
	require.True(t, all.AllGroups, "no group: every group's locks")
	require.Equal(t, "", all.Locks[0].Group)

	top, err := c.Contended(ctx, "", 5)
	require.NoError(t, err)
	require.Len(t, top.Locks, 1, "only a lock someone waits for is ranked")
	require.Equal(t, "jobs/a", top.Locks[0].Name)
	_, err = c.Contended(ctx, "", 0)
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)
	_, err = c.Contended(ctx, "", fencelock.MaxContended+1)
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)

	ss, err := c.Sessions(ctx, "")
	require.NoError(t, err)
	byID := map[ID]SessionEntry{}
	for _, s := range ss.Sessions {
		byID[s.SessionID] = s
	}
	require.Equal(t, "a@test", byID[ID(a.ID())].Name)
	require.Equal(t, 2, byID[ID(a.ID())].Held)
	require.Equal(t, 1, byID[ID(b.ID())].Waiting)
	require.Equal(t, 3*time.Second, byID[ID(a.ID())].TTL())

	_, err = c.Locks(ctx, "", "nope")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
	_, err = c.Sessions(ctx, "nope")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)

	// The listing's JSON is the API's, field for field.
	out, err := json.Marshal(l)
	require.NoError(t, err)
	var back LockEntry
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, l, back)
	require.Contains(t, string(out), fmt.Sprintf(`"holder_session":"%d"`, a.ID()))

	// Replicas asks each endpoint, in order, and says which do not answer.
	g.Stop(3)
	rs := c.Replicas(ctx, time.Second)
	require.Len(t, rs, 3)
	for i, id := range []uint64{1, 2} {
		require.NoError(t, rs[i].Err)
		require.Equal(t, g.urls[id], rs[i].Endpoint)
		require.Equal(t, id, rs[i].Status.ReplicaID)
	}
	require.Error(t, rs[2].Err)
	require.Equal(t, g.urls[3], rs[2].Endpoint)

	require.NoError(t, a.Close(ctx))
	require.NoError(t, <-waited)
	require.NoError(t, b.Close(ctx))
}

// Locks and Sessions follow the pages; a page that does not move forward
// is a bad answer, never an endless loop; garbage is ErrBadAnswer, never a
// panic.
func TestListPagesAndBadAnswers(t *testing.T) {
	var modeV atomic.Value
	modeV.Store("pages")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		after := r.URL.Query().Get("after")
		mode := modeV.Load().(string)
		switch {
		case r.URL.Path == "/livez":
			fmt.Fprint(w, `{}`)
		case mode == "garbage":
			fmt.Fprint(w, `{"replica_id":"x","locks":[{"holder_session":"-1"}],"sessions":[{"session_id":1.5}]}`)
		case mode == "stuck" && r.URL.Path == "/v1/locks":
			fmt.Fprint(w, `{"group":"","locks":[{"name":"a","held":true}],"more":true,"next":"a"}`)
		case mode == "stuck" && r.URL.Path == "/v1/sessions":
			fmt.Fprint(w, `{"group":"","sessions":[{"session_id":"7"}],"more":true,"next":"7"}`)
		case r.URL.Path == "/v1/locks" && after == "":
			if r.URL.Query().Get("prefix") != "j/" || r.URL.Query().Get("group") != "billing" {
				w.WriteHeader(400)
				fmt.Fprint(w, `{"error":"wrong query","code":"bad_request"}`)
				return
			}
			fmt.Fprint(w, `{"group":"billing","locks":[{"name":"j/a","held":true,"fencing_token":"5"}],"more":true,"next":"j/a"}`)
		case r.URL.Path == "/v1/locks" && after == "j/a":
			fmt.Fprint(w, `{"group":"billing","locks":[{"name":"j/b","held":true,"fencing_token":6}],"more":false}`)
		case r.URL.Path == "/v1/sessions" && after == "":
			fmt.Fprint(w, `{"group":"","sessions":[{"session_id":"1","name":"x"}],"more":true,"next":"1"}`)
		case r.URL.Path == "/v1/sessions" && after == "1":
			fmt.Fprint(w, `{"group":"","sessions":[{"session_id":"2","name":"y"}],"more":false}`)
		default:
			w.WriteHeader(500)
		}
	}))
	defer srv.Close()
	ctx := testCtx(t)
	c := newClient(t, srv.URL)

	ls, err := c.Locks(ctx, "j/", "billing")
	require.NoError(t, err)
	require.Equal(t, "billing", ls.Group)
	require.Len(t, ls.Locks, 2)
	require.Equal(t, ID(6), ls.Locks[1].FencingToken, "a JSON number is read too")
	require.False(t, ls.AllGroups)
	ss, err := c.Sessions(ctx, "")
	require.NoError(t, err)
	require.Len(t, ss.Sessions, 2)
	require.Equal(t, ID(2), ss.Sessions[1].SessionID)

	modeV.Store("stuck")
	_, err = c.Locks(ctx, "", "")
	require.ErrorIs(t, err, ErrBadAnswer)
	_, err = c.Sessions(ctx, "")
	require.ErrorIs(t, err, ErrBadAnswer)

	modeV.Store("garbage")
	_, err = c.Status(ctx)
	require.ErrorIs(t, err, ErrBadAnswer)
	_, err = c.Locks(ctx, "", "")
	require.ErrorIs(t, err, ErrBadAnswer)
	_, err = c.Sessions(ctx, "")
	require.ErrorIs(t, err, ErrBadAnswer)
	rs := c.Replicas(ctx, 0)
	require.Len(t, rs, 1)
	require.ErrorIs(t, rs[0].Err, ErrBadAnswer)
	require.True(t, strings.HasPrefix(rs[0].Endpoint, "http://"))
}
