package fencehttp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

func TestMiddlewareAndTransport(t *testing.T) {
	fencer := fencelock.NewFencer()
	var served atomic.Int32
	h := Middleware(fencer, func(r *http.Request) string { return r.URL.Path },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1) }))
	srv := httptest.NewServer(h)
	defer srv.Close()

	var token atomic.Uint64
	client := &http.Client{Transport: &Transport{Base: srv.Client().Transport,
		Token: func(*http.Request) (uint64, bool) { return token.Load(), token.Load() != 0 }}}
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

	resp, _ := get() // no token
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	token.Store(9)
	resp, _ = get()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp, _ = get()
	require.Equal(t, http.StatusOK, resp.StatusCode, "equal token admitted")
	token.Store(7)
	resp, body := get()
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Equal(t, map[string]string{"error": "stale fencing token", "resource": "/res", "token": "7", "highest": "9"}, body)
	require.Equal(t, int32(2), served.Load())
	require.Equal(t, uint64(9), fencer.Highest("/res"))

	for _, bad := range []string{"x", "-1", "+1", "1.0", "18446744073709551616"} {
		req, err := http.NewRequest("GET", srv.URL+"/res", nil)
		require.NoError(t, err)
		req.Header.Set(Header, bad)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
	}
	srv.Client().CloseIdleConnections()
	require.Equal(t, int32(2), served.Load())
}

func FuzzParseToken(f *testing.F) {
	for _, s := range []string{"0", "1", "42", "18446744073709551615", "18446744073709551616", "", "-1", "+1", " 1", "1 ", "0x10", "007", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParseToken(s)
		if err != nil {
			return
		}
		// Accepted values are plain decimal and round-trip modulo leading zeros.
		back, err2 := strconv.ParseUint(strconv.FormatUint(tok, 10), 10, 64)
		if err2 != nil || back != tok {
			t.Fatalf("%q -> %d does not round-trip", s, tok)
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '0' || s[i] > '9' {
				t.Fatalf("accepted non-digit in %q", s)
			}
		}
	})
}

// With a nil Token, a request whose context carries no grant goes out
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
