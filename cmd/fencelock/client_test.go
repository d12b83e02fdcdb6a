package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencelock/fencelock"
	apiclient "github.com/fencelock/fencelock/client"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/stretchr/testify/require"
)

func TestParseBases(t *testing.T) {
	b, err := parseBases(" http://a:1/, https://b:2 ,,http://c:3")
	require.NoError(t, err)
	require.Equal(t, []string{"http://a:1", "https://b:2", "http://c:3"}, b)
	for _, bad := range []string{"", ",", "a:1", "http://a:1,ftp://b", "http://"} {
		_, err := parseBases(bad)
		require.ErrorIs(t, err, ErrBadURL, "%q", bad)
	}
}

func apiServer(t *testing.T, h http.HandlerFunc) string {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.URL
}

func writeErr(w http.ResponseWriter, status int, code string) {
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "code": code})
}

// An admin call (package client's Do, as members and groups make it)
// fails over on no answer, 503 and 421, keeps to the replica that
// answered, and does not fail over on an answer another replica would
// repeat: the CLI's calls go through the one failover client.
func TestAdminCallFailsOver(t *testing.T) {
	var hitsA, hitsB atomic.Int32
	a := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		hitsA.Add(1)
		writeErr(w, http.StatusServiceUnavailable, "unavailable")
	})
	b := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		hitsB.Add(1)
		if r.URL.Path == "/missing" {
			writeErr(w, http.StatusNotFound, "not_found")
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	})
	misdirected := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusMisdirectedRequest, "session_elsewhere")
	})
	ctx := context.Background()
	f := clientFlags{url: strings.Join([]string{"http://" + deadAddr(t), misdirected, a, b}, ",")}
	c, err := f.apiClient(ctx)
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, int32(1), hitsA.Load(), "the first call asked the replicas in turn")
	var out map[string]bool
	require.NoError(t, c.Do(ctx, "GET", "/x", nil, &out))
	require.True(t, out["ok"])
	require.Equal(t, int32(1), hitsA.Load(), "the replica that answered is asked first from then on")

	err = c.Do(ctx, "GET", "/missing", nil, nil)
	var ae *apiclient.Error
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 404, ae.Status)
	require.Equal(t, int32(1), hitsA.Load(), "a 404 is not a reason to ask another replica")

	f = clientFlags{url: "http://" + deadAddr(t) + "," + a}
	_, err = f.apiClient(ctx)
	require.ErrorIs(t, err, fencelock.ErrUnavailable)
	require.ErrorAs(t, err, &ae, "the last answer is kept")
}

// No list of URLs makes parseBases panic; what it accepts is http(s) URLs
// with a host, and what it refuses is ErrBadURL.
func FuzzParseBases(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:7081,http://127.0.0.1:7082", "", ",", "ftp://x", "http://[::1]:1/", "http://%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		bases, err := parseBases(s)
		if err != nil {
			if !errors.Is(err, ErrBadURL) {
				t.Fatalf("%q: %v is not ErrBadURL", s, err)
			}
			return
		}
		require.NotEmpty(t, bases)
		for _, b := range bases {
			l := strings.ToLower(b) // a scheme is case-insensitive
			require.True(t, strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://"), b)
		}
	})
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string { return fencelocktest.FreePort(t) }
