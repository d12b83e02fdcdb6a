package fencehttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// server runs Middleware on fence for the path's resource, its handler
// recording the fences it served.
type server struct {
	*httptest.Server
	served atomic.Int32
	last   atomic.Value // fencelock.Fence
}

func newServer(t *testing.T, fence fencelock.Claimer) *server {
	s := &server{}
	s.Server = httptest.NewServer(Middleware(fence, func(r *http.Request) string { return r.URL.Path },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f, ok := Fence(r)
			tok, tokOK := Token(r)
			if !ok || !tokOK || tok != f.Token {
				http.Error(w, "no admitted fence", http.StatusInternalServerError)
				return
			}
			s.served.Add(1)
			s.last.Store(f)
		})))
	t.Cleanup(func() {
		s.Client().CloseIdleConnections()
		s.Close()
	})
	return s
}

// send makes a request with the given Fencing-Token values, and decodes a
// JSON body.
func (s *server) send(t *testing.T, path string, header ...string) (int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest("POST", s.URL+path, nil)
	require.NoError(t, err)
	for _, h := range header {
		req.Header.Add(Header, h)
	}
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var m map[string]string
	if resp.Header.Get("Content-Type") == "application/json" {
		require.NoError(t, json.Unmarshal(b, &m))
	}
	return resp.StatusCode, m
}

func TestMiddlewareAndTransport(t *testing.T) {
	fencer := fencelock.NewFencer()
	srv := newServer(t, fencer)

	var token atomic.Uint64
	client := &http.Client{Transport: &Transport{Base: srv.Client().Transport,
		Fence: func(*http.Request) (fencelock.Fence, bool) {
			return fencelock.Fence{Token: token.Load()}, token.Load() != 0
		}}}
	defer client.CloseIdleConnections()
	get := func() (*http.Response, map[string]string) {
		resp, err := client.Get(srv.URL + "/res")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var m map[string]string
		if len(b) > 0 {
			require.NoError(t, json.Unmarshal(b, &m))
		}
		return resp, m
	}

	resp, body := get() // no token
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "bad_fence", body["code"])
	token.Store(9)
	resp, _ = get()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get()
	require.Equal(t, http.StatusOK, resp.StatusCode, "equal token admitted")
	token.Store(7)
	resp, body = get()
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Equal(t, map[string]string{"error": "stale fencing token", "code": "stale_token", "resource": "/res", "token": "7", "highest": "9"}, body)
	require.Equal(t, int32(2), srv.served.Load())
	require.Equal(t, uint64(9), fencer.Highest("/res"))

	for _, bad := range []string{"x", "0", "-1", "+1", "1.0", "18446744073709551616", "feed:1",
		"000000000000feed:", "000000000000feed:0", "000000000000feed:+1", "0x00000000000feed:1",
		"000000000000feed:1:2", "00000000000000zz:1"} {
		code, body := srv.send(t, "/res", bad)
		require.Equal(t, http.StatusBadRequest, code, "%q", bad)
		require.Equal(t, "bad_fence", body["code"], "%q", bad)
		require.True(t, strings.HasPrefix(body["error"], ErrBadToken.Error()), "%q: %q", bad, body["error"])
	}
	code, _ := srv.send(t, "/res", "10", "11")
	require.Equal(t, http.StatusBadRequest, code, "two values")
	require.Equal(t, int32(2), srv.served.Load())
	require.Equal(t, uint64(9), fencer.Highest("/res"), "no bad request claimed anything")
}

// The header carries the group: Middleware keys the resource to the first
// group admitted, answers another group's fence with 409 and
// "code":"other_group", and refuses a bare token (group 0) once keyed, while
// an unkeyed resource checks it alone.
func TestMiddlewareChecksTheGroup(t *testing.T) {
	fencer := fencelock.NewFencer()
	srv := newServer(t, fencer)

	code, _ := srv.send(t, "/res", "000000000000feed:262144")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, fencelock.Fence{Group: 0xfeed, Token: 262144}, srv.last.Load())
	require.Equal(t, uint64(0xfeed), fencer.Group("/res"))

	code, body := srv.send(t, "/res", "000000000000BEEF:262145")
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, map[string]string{"error": "fencing token of another group", "code": "other_group", "resource": "/res",
		"token": "262145", "group": "000000000000beef", "resource_group": "000000000000feed"}, body)
	code, body = srv.send(t, "/res", "000000000000beef:1")
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, "other_group", body["code"], "another group is reported as such, not as stale")

	for _, bare := range []string{"262146", "0000000000000000:262146"} {
		code, body = srv.send(t, "/res", bare)
		require.Equal(t, http.StatusConflict, code, "group 0 on a keyed resource: %q", bare)
		require.Equal(t, map[string]string{"error": "fencing token of another group", "code": "other_group", "resource": "/res",
			"token": "262146", "group": "0000000000000000", "resource_group": "000000000000feed"}, body)
	}
	require.Equal(t, uint64(262144), fencer.Highest("/res"), "group 0 raised nothing")
	code, _ = srv.send(t, "/res", "000000000000feed:262146")
	require.Equal(t, http.StatusOK, code)
	code, body = srv.send(t, "/res", "000000000000feed:262145")
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, map[string]string{"error": "stale fencing token", "code": "stale_token", "resource": "/res", "token": "262145", "highest": "262146"}, body)
	require.Equal(t, int32(2), srv.served.Load())
	require.Equal(t, uint64(262146), fencer.Highest("/res"))
	require.Equal(t, uint64(0xfeed), fencer.Group("/res"))

	code, _ = srv.send(t, "/unkeyed", "7")
	require.Equal(t, http.StatusOK, code, "a bare token on an unkeyed resource: the token alone")
	require.Zero(t, fencer.Group("/unkeyed"))
}

// tokenOnly is a fence that knows no groups: only a Claimer.
type tokenOnly struct{ f *fencelock.Fencer }

func (t tokenOnly) Claim(ctx context.Context, resource string, token uint64) error {
	return t.f.Claim(ctx, resource, token)
}

// failing is a fence that cannot be reached.
type failing struct{}

func (failing) Claim(context.Context, string, uint64) error { return errors.New("connection refused") }

// A fence that is only a Claimer gets the bare token, whatever the group;
// a fence's own failure is a 500.
func TestMiddlewareWithTokenOnlyFence(t *testing.T) {
	fencer := fencelock.NewFencer()
	srv := newServer(t, tokenOnly{fencer})
	code, _ := srv.send(t, "/res", "000000000000feed:5")
	require.Equal(t, http.StatusOK, code)
	code, _ = srv.send(t, "/res", "000000000000beef:6")
	require.Equal(t, http.StatusOK, code, "a token-only fence cannot tell groups")
	require.Zero(t, fencer.Group("/res"))
	code, body := srv.send(t, "/res", "000000000000beef:4")
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, "6", body["highest"])

	down := newServer(t, failing{})
	code, body = down.send(t, "/res", "5")
	require.Equal(t, http.StatusInternalServerError, code)
	require.Equal(t, map[string]string{"error": "fencing check failed", "code": "fence_failed"}, body)
	require.Zero(t, down.served.Load())
}

// A request's Fencing-Token values, whatever they are, give a fence with a
// token above 0 that formats to a value giving the same fence, or an error
// satisfying ErrBadToken (and ErrInvalidFence when a single value is
// malformed). The server decodes this from the network.
func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{"0", "1", "42", "18446744073709551615", "18446744073709551616", "", "-1", "+1", " 1", "1 ",
		"0x10", "007", "1e3", "000000000000feed:262144", "ffffffffffffffff:18446744073709551615", "000000000000FEED:1",
		"feed:1", ":1", "000000000000feed:", "000000000000feed:1:2", "+00000000000feed:1", "0000000000000000:0"} {
		f.Add(s, false)
	}
	f.Add("1", true)
	f.Fuzz(func(t *testing.T, s string, twice bool) {
		h := http.Header{}
		h.Add(Header, s)
		if twice {
			h.Add(Header, s)
		}
		fence, err := parseHeader(h)
		if err != nil {
			require.ErrorIs(t, err, ErrBadToken)
			if !twice {
				require.ErrorIs(t, err, fencelock.ErrInvalidFence)
			}
			return
		}
		require.False(t, twice, "two values accepted")
		require.NotZero(t, fence.Token)
		// Accepted values are hex digits, one colon, decimal digits: no
		// sign, space or prefix.
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':') {
				t.Fatalf("accepted %q in %q", c, s)
			}
		}
		back := http.Header{}
		back.Set(Header, fence.String())
		again, err := parseHeader(back)
		require.NoError(t, err)
		require.Equal(t, fence, again)
	})
}

// With a nil Fence, a request whose context carries no grant goes out
// without the header.
func TestTransportWithoutGrantSendsNoToken(t *testing.T) {
	seen := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get(Header)
	}))
	defer srv.Close()
	client := &http.Client{Transport: &Transport{}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	if h := <-seen; h != "" {
		t.Fatalf("header %q sent without a grant", h)
	}
}
