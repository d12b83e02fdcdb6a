package fencehttp

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // driver "sqlite"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/fencesql"
	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// startOne starts a one-replica group whose clock the test moves.
func startOne(t *testing.T, c clock.Clock) *fencelock.Node {
	t.Helper()
	return fencelocktest.NewCluster(t, 1, fencelocktest.WithConfig(func(cfg *fencelock.Config) { testhook.UseClock(cfg, c) })).Node(1)
}

// A request made with a grant's context carries its fence (group and
// token) while the grant holds. Once the holder's deadline has passed by its clock, the Transport
// does not send the request, even though the deadline timer has not run yet
// (the test's TTL is far from over in real time) and the group has not
// expired the session: the check is made at RoundTrip, not by a timer.
func TestTransportRechecksGrantBeforeSending(t *testing.T) {
	c := &clock.Ahead{}
	node := startOne(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 20 * time.Second
	for node.Status().GroupID == 0 { // set by the group's first leader, once
		select {
		case <-ctx.Done():
			t.Fatal("the group's ID was never applied")
		case <-time.After(10 * time.Millisecond):
		}
	}
	s, err := node.NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "jobs/reindex")
	require.NoError(t, err)

	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get(Header)) // the test's requests are sequential
	}))
	defer srv.Close()
	client := &http.Client{Transport: &Transport{Base: srv.Client().Transport}}
	defer client.CloseIdleConnections()
	lctx := l.Context(ctx)
	send := func() error {
		req, err := http.NewRequestWithContext(lctx, "POST", srv.URL, strings.NewReader("x"))
		require.NoError(t, err)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, send())
	require.Equal(t, []string{fencelock.Fence{Group: node.Status().GroupID, Token: l.Token()}.String()}, seen)
	sent, err := fencelock.ParseFence(seen[0])
	require.NoError(t, err)
	require.NotZero(t, sent.Group)

	testhook.Freeze(s) // no keep-alive moves the deadline on
	c.Set(2 * ttl)
	err = send()
	require.ErrorIs(t, err, fencelock.ErrSessionExpired)
	require.Len(t, seen, 1, "the request was not sent")
	testhook.Thaw(s)
}

// Claim at grant over HTTP, with a durable fence: the successor's request
// that carries only its fence raises the mark, and from then on the
// predecessor's request is refused with 409 Conflict, though the successor
// never wrote; a request of another group is refused with 409 Conflict and
// "code":"other_group" whatever its token. The handler writes through the
// same fence in its own transaction, with the fence Middleware admitted.
func TestMiddlewareClaimAtGrantWithSQL(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "app.db")+
		"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `CREATE TABLE rows (id INTEGER PRIMARY KEY AUTOINCREMENT, token TEXT)`)
	require.NoError(t, err)
	fences, err := fencesql.Open(ctx, db, fencesql.SQLite, "fencing_tokens")
	require.NoError(t, err)

	mux := http.NewServeMux()
	mux.HandleFunc("POST /claim", func(w http.ResponseWriter, r *http.Request) {}) // Middleware did it
	mux.HandleFunc("POST /rows", func(w http.ResponseWriter, r *http.Request) {
		fence, ok := Fence(r)
		if !ok {
			http.Error(w, "no admitted fence", http.StatusInternalServerError)
			return
		}
		err := fences.DoFence(r.Context(), "rows", fence, func(tx *sql.Tx) error {
			_, err := tx.ExecContext(r.Context(), `INSERT INTO rows (token) VALUES (?)`, strconv.FormatUint(fence.Token, 10))
			return err
		})
		if errors.Is(err, fencelock.ErrStaleToken) || errors.Is(err, fencelock.ErrOtherGroup) {
			http.Error(w, err.Error(), http.StatusConflict)
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
	srv := httptest.NewServer(Middleware(fences, func(*http.Request) string { return "rows" }, mux))
	defer srv.Close()
	const group, other = 0xfeed, 0xbeef
	post := func(path string, token uint64, group uint64) (int, map[string]string) {
		req, err := http.NewRequest("POST", srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set(Header, fencelock.Fence{Group: group, Token: token}.String())
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]string
		if resp.Header.Get("Content-Type") == "application/json" {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		}
		return resp.StatusCode, body
	}
	defer srv.Client().CloseIdleConnections()

	code, _ := post("/rows", 7, group) // the first primary writes
	require.Equal(t, http.StatusOK, code)
	code, _ = post("/claim", 9, group) // its successor is elected and claims
	require.Equal(t, http.StatusOK, code)
	code, body := post("/rows", 7, group) // the deposed primary's late write
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, map[string]string{"error": "stale fencing token", "code": "stale_token", "resource": "rows", "token": "7", "highest": "9"}, body)
	code, body = post("/rows", 1<<40, other) // a primary of another group
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, map[string]string{"error": "fencing token of another group", "code": "other_group", "resource": "rows",
		"token": "1099511627776", "group": "000000000000beef", "resource_group": "000000000000feed"}, body)

	var rows []string
	r, err := db.QueryContext(ctx, `SELECT token FROM rows ORDER BY id`)
	require.NoError(t, err)
	defer r.Close()
	for r.Next() {
		var tok string
		require.NoError(t, r.Scan(&tok))
		rows = append(rows, tok)
	}
	require.NoError(t, r.Err())
	require.Equal(t, []string{"7"}, rows, "the successor never wrote, and neither refused write landed")
	highest, err := fences.Highest(ctx, "rows")
	require.NoError(t, err)
	require.Equal(t, uint64(9), highest)
}
