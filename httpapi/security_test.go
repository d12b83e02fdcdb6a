package httpapi_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// The security suite of the API (issue 26): a session answers only to its
// creator, and a bearer token only does what its rights allow. Every
// refused call is followed by a read of the state it would have changed.

// groupState is what a hijacker or a token without the right might change:
// the locks' holders, tokens and queues, the elections' leaders, terms and
// values, and the open sessions.
func groupState(t *testing.T, base string, locks, elections []string, hdr map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range locks {
		r := callWith(t, "GET", lockURL(base, n, ""), nil, hdr)
		require.Equal(t, 200, r.Status, r.Raw)
		out["lock "+n] = withoutAges(r.Raw)
	}
	for _, n := range elections {
		r := callWith(t, "GET", base+"/v1/elections/"+strings.ReplaceAll(n, "/", "%2F"), nil, hdr)
		require.Equal(t, 200, r.Status, r.Raw)
		out["election "+n] = withoutAges(r.Raw)
	}
	r := callWith(t, "GET", base+"/v1/sessions", nil, hdr)
	require.Equal(t, 200, r.Status, r.Raw)
	out["sessions"] = withoutAges(r.Raw)
	return out
}

// ages are the "how long ago" figures of a view: the reading replica's
// clock, not the group's state.
// An age is never a JSON object's first field, so its leading comma goes
// with it, whether a field follows or the object ends.
var ages = regexp.MustCompile(`,"(held_for|waited|leading_for)_ms":[0-9]+`)

func withoutAges(raw string) string { return ages.ReplaceAllString(raw, "") }

func TestSessionSecretShownOnce(t *testing.T) {
	g := newGroup(t, true)
	a := g.urls[1]
	r := call(t, "POST", a+"/v1/sessions", map[string]any{"ttl_ms": 10000})
	require.Equal(t, 201, r.Status, r.Raw)
	id, secret := r.Str("session_id"), r.Str("session_secret")
	raw, err := base64.RawURLEncoding.DecodeString(secret)
	require.NoError(t, err, secret)
	require.GreaterOrEqual(t, len(raw)*8, 128, "a secret of %d bits", len(raw)*8)
	secrets.Keep(id, secret)
	r2 := call(t, "POST", a+"/v1/sessions", nil)
	require.NotEqual(t, secret, r2.Str("session_secret"))

	r = call(t, "POST", lockURL(a, "s/x", "acquire"), map[string]any{"session_id": id})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ev := nextEvent(t, sse(t, ctx, lockURL(g.urls[2], "s/x", "watch")), "state", func(e event) bool { return e.Kind == "state" })
	require.Equal(t, id, ev.Data["holder_session"])
	hb := call(t, "POST", a+"/v1/sessions/"+id+"/heartbeat", nil)
	require.Equal(t, 200, hb.Status, hb.Raw)
	for _, u := range []string{a + "/v1/sessions", lockURL(a, "s/x", ""), a + "/v1/locks", a + "/v1/status"} {
		r := call(t, "GET", u, nil)
		require.Equal(t, 200, r.Status, r.Raw)
		require.NotContains(t, r.Raw, secret, "GET %s shows the secret", u)
	}
	require.NotContains(t, hb.Raw, secret, "a heartbeat's answer shows the secret")
	for _, v := range ev.Data {
		require.NotEqual(t, secret, v)
	}
}

// Every call acting on a session, without its secret, with a wrong one, or
// with another session's, on its owner and forwarded from another replica:
// 403 forbidden, and nothing changes.
func TestSessionHijack(t *testing.T) {
	g := newGroup(t, true)
	owner, other := g.urls[1], g.urls[3]
	victim := newSession(t, owner, 10000)
	attacker := newSession(t, g.urls[2], 10000)
	waiter := newSession(t, owner, 10000)
	bystander := newSession(t, owner, 10000)
	const lock, lock2, el, el2 = "jobs/held", "jobs/free", "orders/primary", "orders/other"
	r := call(t, "POST", lockURL(owner, lock, "acquire"), map[string]any{"session_id": victim})
	require.Equal(t, true, r.Body["granted"], r.Raw)
	token := r.Str("fencing_token")
	r = call(t, "POST", lockURL(owner, lock, "acquire"), map[string]any{"session_id": waiter, "wait": true})
	require.Equal(t, float64(1), r.Body["queue_position"], r.Raw)
	r = call(t, "POST", owner+"/v1/elections/orders%2Fprimary/campaign", map[string]any{"session_id": victim, "value": "v1"})
	require.Equal(t, true, r.Body["elected"], r.Raw)
	term := r.Str("token")
	before := groupState(t, other, []string{lock, lock2}, []string{el, el2}, nil)

	attackerSecret, bystanderSecret := secrets.Of(attacker), secrets.Of(bystander)
	require.NotEmpty(t, attackerSecret)
	require.NotEmpty(t, bystanderSecret)
	headers := map[string]map[string]string{
		"no secret":                nil,
		"empty secret":             {httpapi.SecretHeader: ""},
		"wrong secret":             {httpapi.SecretHeader: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
		"another session's":        {httpapi.SecretHeader: attackerSecret},
		"a same-replica session's": {httpapi.SecretHeader: bystanderSecret},
	}
	type attempt struct {
		method, path string
		body         any
	}
	attempts := []attempt{
		{"POST", "/v1/sessions/" + victim + "/heartbeat", nil},
		{"DELETE", "/v1/sessions/" + victim, nil},
		{"POST", "/v1/locks/jobs%2Fheld/acquire", map[string]any{"session_id": victim, "wait": true}},
		{"POST", "/v1/locks/jobs%2Ffree/acquire", map[string]any{"session_id": victim}},
		{"POST", "/v1/locks/jobs%2Ffree/acquire", map[string]any{"session_id": victim, "wait": true}},
		{"POST", "/v1/locks/jobs%2Fheld/release", map[string]any{"session_id": victim, "fencing_token": token}},
		{"POST", "/v1/locks/jobs%2Fheld/release", map[string]any{"session_id": waiter}}, // withdraw the waiter
		{"POST", "/v1/elections/orders%2Fother/campaign", map[string]any{"session_id": victim, "value": "x"}},
		{"POST", "/v1/elections/orders%2Fprimary/proclaim", map[string]any{"session_id": victim, "token": term, "value": "evil"}},
		{"POST", "/v1/elections/orders%2Fprimary/resign", map[string]any{"session_id": victim, "token": term}},
		{"POST", "/v1/elections/orders%2Fprimary/resign", map[string]any{"session_id": victim}},
	}
	n := 0
	for hname, hdr := range headers {
		for _, base := range []string{owner, other} {
			for _, a := range attempts {
				r := callWith(t, a.method, base+a.path, a.body, hdr)
				require.Equal(t, 403, r.Status, "%s %s%s with %s: %s", a.method, base, a.path, hname, r.Raw)
				require.Equal(t, "forbidden", r.Str("code"), r.Raw)
				n++
				require.Equal(t, before, groupState(t, other, []string{lock, lock2}, []string{el, el2}, nil),
					"state changed after %s %s with %s", a.method, a.path, hname)
			}
		}
	}
	t.Logf("%d hijack attempts refused, state unchanged after each", n)
	// Without a tokens file nobody is admin: no revoke either.
	for _, u := range []string{lockURL(owner, lock, "revoke"), owner + "/v1/elections/orders%2Fprimary/revoke"} {
		r := call(t, "POST", u, nil)
		require.Equal(t, 403, r.Status, r.Raw)
		require.Equal(t, "forbidden", r.Str("code"), r.Raw)
		require.Contains(t, r.Str("error"), "admin", r.Raw)
	}
	require.Equal(t, before, groupState(t, other, []string{lock, lock2}, []string{el, el2}, nil))
	// The creator still can.
	r = call(t, "POST", owner+"/v1/sessions/"+victim+"/heartbeat", nil)
	require.Equal(t, 200, r.Status, r.Raw)
	r = call(t, "POST", lockURL(other, lock, "release"), map[string]any{"session_id": victim, "fencing_token": token}) // forwarded, secret along
	require.Equal(t, 200, r.Status, r.Raw)
	r = call(t, "GET", lockURL(other, lock, ""), nil)
	require.Equal(t, waiter, r.Str("holder_session"), r.Raw)
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// merge returns the union of header sets.
func merge(hs ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, h := range hs {
		for k, v := range h {
			out[k] = v
		}
	}
	return out
}

// newSessionAs opens a session with a bearer token; it returns its ID and
// the headers that act on it.
func newSessionAs(t *testing.T, base, token string) (string, map[string]string) {
	t.Helper()
	r := callWith(t, "POST", base+"/v1/sessions", map[string]any{"ttl_ms": 10000}, bearer(token))
	require.Equal(t, 201, r.Status, r.Raw)
	return r.Str("session_id"), merge(bearer(token), map[string]string{httpapi.SecretHeader: r.Str("session_secret")})
}

const aclFile = `# tokens for the ACL matrix
full
jobs   lock:jobs/ read:jobs/
reader read:*
admin  admin:* read:*
jobadm admin:jobs/
elector elect:orders/ read:orders/
`

func TestACLMatrix(t *testing.T) {
	acl, err := httpapi.ParseTokens([]byte(aclFile))
	require.NoError(t, err)
	g := newGroup(t, true, httpapi.WithACL(acl))
	a, b := g.urls[1], g.urls[2]
	full := bearer("full")
	state := func() map[string]string {
		return groupState(t, b, []string{"jobs/a", "other/x"}, []string{"orders/p", "other/e"}, full)
	}
	forbidden := func(r reply, right string) {
		t.Helper()
		require.Equal(t, 403, r.Status, r.Raw)
		require.Equal(t, "forbidden", r.Str("code"), r.Raw)
		require.Contains(t, r.Str("error"), right, "the refusal names the missing right")
	}

	// No token, a wrong one: 401.
	for _, h := range []map[string]string{nil, bearer("nope"), {"Authorization": "full"}} {
		r := callWith(t, "GET", a+"/v1/status", nil, h)
		require.Equal(t, 401, r.Status, r.Raw)
	}

	// lock:jobs/ takes jobs/ locks and nothing else.
	js, jh := newSessionAs(t, a, "jobs")
	r := callWith(t, "POST", lockURL(a, "jobs/a", "acquire"), map[string]any{"session_id": js}, jh)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	jobToken := r.Str("fencing_token")
	before := state()
	forbidden(callWith(t, "POST", lockURL(a, "other/x", "acquire"), map[string]any{"session_id": js}, jh), "lock")
	forbidden(callWith(t, "POST", lockURL(b, "other/x", "acquire"), map[string]any{"session_id": js, "wait": true}, jh), "lock")
	forbidden(callWith(t, "GET", lockURL(a, "other/x", ""), nil, jh), "read")
	forbidden(callWith(t, "GET", lockURL(a, "other/x", "watch"), nil, jh), "read")
	forbidden(callWith(t, "GET", a+"/v1/locks", nil, jh), "read")
	forbidden(callWith(t, "GET", a+"/v1/locks?prefix=other/", nil, jh), "read")
	// The listings of issue 27 need read on every name they may show:
	// the most contended ranks the whole group.
	forbidden(callWith(t, "GET", a+"/v1/locks?sort=waiters", nil, jh), "read")
	forbidden(callWith(t, "GET", a+"/v1/elections", nil, jh), "read")
	forbidden(callWith(t, "GET", a+"/v1/elections?prefix=orders/", nil, jh), "read")
	forbidden(callWith(t, "POST", a+"/v1/elections/orders%2Fp/campaign", map[string]any{"session_id": js, "value": "v"}, jh), "elect")
	forbidden(callWith(t, "POST", lockURL(a, "jobs/a", "revoke"), nil, jh), "admin")
	r = callWith(t, "GET", a+"/v1/locks?prefix=jobs/", nil, jh)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Len(t, r.Body["locks"], 1, r.Raw)
	r = callWith(t, "GET", lockURL(a, "jobs/a", ""), nil, jh)
	require.Equal(t, js, r.Str("holder_session"), r.Raw)
	require.Equal(t, before, state())

	// read:* reads everything and changes nothing: no session of its own,
	// no acquire even with another's session and secret.
	rd := bearer("reader")
	forbidden(callWith(t, "POST", a+"/v1/sessions", nil, rd), "lock")
	forbidden(callWith(t, "POST", lockURL(a, "other/x", "acquire"), map[string]any{"session_id": js}, merge(jh, rd)), "lock")
	forbidden(callWith(t, "POST", lockURL(a, "jobs/a", "release"), map[string]any{"session_id": js, "fencing_token": jobToken}, merge(jh, rd)), "lock")
	forbidden(callWith(t, "POST", a+"/v1/sessions/"+js+"/heartbeat", nil, merge(jh, rd)), "lock")
	forbidden(callWith(t, "POST", lockURL(a, "jobs/a", "revoke"), nil, rd), "admin")
	forbidden(callWith(t, "DELETE", a+"/v1/sessions/"+js, nil, rd), "admin")
	for _, u := range []string{a + "/v1/locks", lockURL(a, "other/x", ""), a + "/v1/sessions", a + "/v1/elections/orders%2Fp",
		a + "/v1/elections", a + "/v1/locks?sort=waiters"} {
		r := callWith(t, "GET", u, nil, rd)
		require.Equal(t, 200, r.Status, "%s: %s", u, r.Raw)
	}
	require.Equal(t, before, state())

	// elect:orders/ campaigns there and nowhere else.
	es, eh := newSessionAs(t, b, "elector")
	r = callWith(t, "POST", a+"/v1/elections/orders%2Fp/campaign", map[string]any{"session_id": es, "value": "e1"}, eh) // forwarded
	require.Equal(t, true, r.Body["elected"], r.Raw)
	forbidden(callWith(t, "POST", a+"/v1/elections/other%2Fe/campaign", map[string]any{"session_id": es, "value": "e"}, eh), "elect")
	forbidden(callWith(t, "POST", lockURL(a, "jobs/b", "acquire"), map[string]any{"session_id": es}, eh), "lock")
	forbidden(callWith(t, "POST", a+"/v1/elections/orders%2Fp/revoke", nil, eh), "admin")
	forbidden(callWith(t, "GET", a+"/v1/elections", nil, eh), "read")
	r = callWith(t, "GET", a+"/v1/elections?prefix=orders/", nil, eh)
	require.Equal(t, 200, r.Status, r.Raw)
	require.Len(t, r.Body["elections"], 1, r.Raw)
	before = state()

	// Only admin revokes; admin:jobs/ only jobs/.
	forbidden(callWith(t, "POST", a+"/v1/elections/orders%2Fp/revoke", nil, bearer("jobadm")), "admin")
	forbidden(callWith(t, "DELETE", a+"/v1/sessions/"+js, nil, bearer("jobadm")), "admin")
	require.Equal(t, before, state())
	r = callWith(t, "POST", lockURL(b, "jobs/a", "revoke"), map[string]any{"fencing_token": "1"}, bearer("jobadm"))
	require.Equal(t, 409, r.Status, "a revoke of a grant that is not current: %s", r.Raw)
	require.Equal(t, before, state())
	r = callWith(t, "POST", lockURL(b, "jobs/a", "revoke"), map[string]any{"fencing_token": jobToken}, bearer("jobadm"))
	require.Equal(t, 200, r.Status, r.Raw)
	r = callWith(t, "GET", lockURL(b, "jobs/a", ""), nil, full)
	require.Equal(t, false, r.Body["held"], r.Raw)
	r = callWith(t, "POST", a+"/v1/elections/orders%2Fp/revoke", nil, bearer("admin"))
	require.Equal(t, 200, r.Status, r.Raw)
	r = callWith(t, "GET", a+"/v1/elections/orders%2Fp", nil, full)
	require.Nil(t, r.Body["leader"], r.Raw)
	// Admin ends another's session without its secret, from a replica
	// that does not own it.
	r = callWith(t, "DELETE", b+"/v1/sessions/"+js, nil, bearer("admin"))
	require.Equal(t, 204, r.Status, r.Raw)
	r = callWith(t, "POST", a+"/v1/sessions/"+js+"/heartbeat", nil, jh)
	require.Equal(t, 404, r.Status, r.Raw)
	// A secret, when sent, must be right, even for a token that may end
	// any session without one.
	forbidden(callWith(t, "DELETE", a+"/v1/sessions/"+es, nil, merge(full, map[string]string{httpapi.SecretHeader: "x"})), "secret")

	// A token alone does everything.
	fs, fh := newSessionAs(t, a, "full")
	r = callWith(t, "POST", lockURL(a, "other/x", "acquire"), map[string]any{"session_id": fs}, fh)
	require.Equal(t, true, r.Body["granted"], r.Raw)
	r = callWith(t, "POST", a+"/v1/elections/other%2Fe/campaign", map[string]any{"session_id": fs, "value": "f"}, fh)
	require.Equal(t, true, r.Body["elected"], r.Raw)
	r = callWith(t, "POST", lockURL(a, "other/x", "revoke"), nil, full)
	require.Equal(t, 200, r.Status, r.Raw)
	r = callWith(t, "DELETE", a+"/v1/sessions/"+es, nil, full)
	require.Equal(t, 204, r.Status, r.Raw)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", lockURL(b, "other/x", "watch"), nil)
	req.Header.Set("Authorization", "Bearer full")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	// SetACL: the new file's tokens only.
	next, err := httpapi.ParseTokens([]byte("fresh read:*\n"))
	require.NoError(t, err)
	g.API(1).SetACL(next)
	require.Equal(t, 401, callWith(t, "GET", a+"/v1/status", nil, full).Status)
	require.Equal(t, 200, callWith(t, "GET", a+"/v1/status", nil, bearer("fresh")).Status)
}

// Beyond WithMaxStreams, a stream is refused with 429 too_many_streams; a
// closed one frees its place.
func TestStreamLimit(t *testing.T) {
	g := newGroup(t, false, httpapi.WithMaxStreams(2))
	a := g.urls[1]
	ctx1, cancel1 := context.WithCancel(context.Background())
	defer cancel1()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	e1 := sse(t, ctx1, lockURL(a, "s1", "watch"))
	e2 := sse(t, ctx2, a+"/v1/elections/e/observe")
	nextEvent(t, e1, "state", func(e event) bool { return e.Kind == "state" })
	nextEvent(t, e2, "state", func(e event) bool { return e.Kind == "state" })
	r := call(t, "GET", lockURL(a, "s3", "watch"), nil)
	require.Equal(t, 429, r.Status, r.Raw)
	require.Equal(t, "too_many_streams", r.Str("code"), r.Raw)
	// Another replica has its own bound.
	ctx3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	nextEvent(t, sse(t, ctx3, lockURL(g.urls[2], "s3", "watch")), "state", func(e event) bool { return e.Kind == "state" })
	cancel1()
	for range e1 { // the client side is gone
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", lockURL(a, "s4", "watch"), nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		status := resp.StatusCode
		resp.Body.Close()
		cancel()
		if status == 200 {
			break
		}
		require.Equal(t, 429, status)
		require.True(t, time.Now().Before(deadline), "the closed stream's place was never freed")
		time.Sleep(20 * time.Millisecond) // polling for the server to notice the client went
	}
}

// A stream whose client stops reading is closed once an event cannot be
// written within the write timeout, rather than holding its goroutine, its
// connection and its place for ever: here the only place (WithMaxStreams
// 1) is freed while the client still has not read a byte.
func TestSlowStreamClosed(t *testing.T) {
	g := newGroup(t, false, httpapi.WithMaxStreams(1), httpapi.WithStreamWriteTimeout(200*time.Millisecond))
	a := g.urls[1]
	s := newSession(t, a, 30000)
	el := a + "/v1/elections/big"
	r := call(t, "POST", el+"/campaign", map[string]any{"session_id": s, "value": "v"})
	require.Equal(t, true, r.Body["elected"], r.Raw)
	term := r.Str("token")

	// The slow client: a small receive buffer, and it stops reading.
	d := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", strings.TrimPrefix(a, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /v1/elections/big/observe HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	// streamStatus opens a stream and closes it at once.
	streamStatus := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", el+"/observe", nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	// It reads its stream's first event, and then nothing more. Its
	// stream holds the one place.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && sc.Text() != "event: state" {
	}
	require.Equal(t, "event: state", sc.Text(), "the slow client's stream: %v", sc.Err())
	require.Equal(t, 429, streamStatus())

	// Events of 4 KiB each until the server gives up on the client.
	value := strings.Repeat("v", 4096)
	freed := false
	var n int
	for n = 1; n <= 3000 && !freed; n++ {
		r := call(t, "POST", el+"/proclaim", map[string]any{"session_id": s, "token": term, "value": value[:4096-n%2]})
		require.Equal(t, 200, r.Status, r.Raw)
		if n%20 == 0 {
			freed = streamStatus() == 200
			// A proclaim does not renew the session: on a loaded machine
			// the loop can outlast its TTL (it did, at 27s).
			r := call(t, "POST", a+"/v1/sessions/"+s+"/heartbeat", nil)
			require.Equal(t, 200, r.Status, r.Raw)
		}
	}
	require.True(t, freed, "the stream of a client that stopped reading is still open after %d events of 4 KiB", n)
	t.Logf("the unread stream was closed after about %d events of 4 KiB", n)
	// What the server had written is all the client gets: then the end.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	got, err := io.Copy(io.Discard, conn)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the connection is still open after %d bytes", got)
}
