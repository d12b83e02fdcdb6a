package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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

// A call fails over on no answer, 503 and 421, keeps to the replica that
// answered, and does not fail over on an answer another replica would
// repeat.
func TestCallFailsOver(t *testing.T) {
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
	c := &client{bases: []string{"http://" + deadAddr(t), misdirected, a, b}, hc: &http.Client{}}
	ctx := context.Background()
	var out map[string]bool
	require.NoError(t, c.do(ctx, "GET", "/x", nil, &out))
	require.True(t, out["ok"])
	require.Equal(t, 3, c.order()[0], "the replica that answered is tried first from now on")
	require.NoError(t, c.do(ctx, "GET", "/x", nil, &out))
	require.Equal(t, int32(1), hitsA.Load())

	err := c.do(ctx, "GET", "/missing", nil, nil)
	var ae *apiError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, 404, ae.status)
	require.Equal(t, int32(1), hitsA.Load(), "a 404 is not a reason to ask another replica")

	c = &client{bases: []string{"http://" + deadAddr(t), a}, hc: &http.Client{}}
	err = c.do(ctx, "GET", "/x", nil, nil)
	require.ErrorContains(t, err, "no replica answered")
	require.ErrorAs(t, err, &ae, "the last answer is kept")
}

// Two replicas take every call and never answer (hung), the first of them
// the one in use: a call with a deadline still reaches the third, each
// try bounded by an even share of the time left (not the 5s attempt), and
// the hung ones are asked last from then on.
func TestCallAsksEveryReplicaWithinItsDeadline(t *testing.T) {
	hung := make(chan struct{})
	var hungHits atomic.Int32
	hang := func(w http.ResponseWriter, r *http.Request) {
		hungHits.Add(1)
		<-hung
	}
	// Registered after the servers: runs before their Close, which waits
	// for the hung calls.
	a, b := apiServer(t, hang), apiServer(t, hang)
	ok := apiServer(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, `{"ok":true}`) })
	t.Cleanup(func() { close(hung) })
	c := &client{bases: []string{a, b, ok}, hc: &http.Client{}, attempt: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var out map[string]bool
	require.NoError(t, c.do(ctx, "GET", "/x", nil, &out), "the replica that answers was not asked in time")
	require.True(t, out["ok"])
	require.Equal(t, int32(2), hungHits.Load())
	require.Equal(t, []int{2, 0, 1}, c.order(), "the replica that answered first, the hung ones last")

	// Round the list from b (as if it had answered last, before it hung),
	// the hung b comes first: it is asked last, after the one that answers.
	c.mu.Lock()
	c.cur = 1
	c.mu.Unlock()
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	require.NoError(t, c.do(ctx, "GET", "/x", nil, &out))
	require.Equal(t, int32(2), hungHits.Load(), "a hung replica was asked again before the one that answers")
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string { return fencelocktest.FreePort(t) }

// A stream that ends (its replica went) is reopened on the next replica
// that answers, which starts with the current state; one refused for a
// reason every replica would share ends the follow with that error.
func TestFollowReopens(t *testing.T) {
	var served atomic.Int32
	a := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		if served.Add(1) > 1 { // it died after its first stream
			writeErr(w, http.StatusServiceUnavailable, "unavailable")
			return
		}
		fmt.Fprint(w, "event: state\ndata: {\"from\":\"a\"}\n\n")
	})
	quit := make(chan struct{})
	b := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, ": ping\n\nevent: state\ndata: {\"from\":\"b\"}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-quit:
		case <-r.Context().Done():
		}
	})
	defer close(quit)
	c := &client{bases: []string{a, b}, hc: &http.Client{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := c.stream(ctx, "/w")
	require.NoError(t, err)
	var ferr error
	events := c.follow(ctx, "/w", first, &ferr)
	for _, want := range []string{`{"from":"a"}`, `{"from":"b"}`} {
		select {
		case ev, ok := <-events:
			require.True(t, ok, "the follow ended: %v", ferr)
			require.Equal(t, "state", ev.Kind)
			require.JSONEq(t, want, string(ev.Data))
		case <-ctx.Done():
			t.Fatal("no event from " + want)
		}
	}
	cancel()
	for range events {
	}

	var once atomic.Int32
	forbidden := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		if once.Add(1) > 1 { // the token lost its read right, say
			writeErr(w, http.StatusForbidden, "forbidden")
			return
		}
		fmt.Fprint(w, "event: state\ndata: {}\n\n")
	})
	c = &client{bases: []string{forbidden}, hc: &http.Client{}}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	first, err = c.stream(ctx2, "/w")
	require.NoError(t, err)
	ferr = nil
	n := 0
	for range c.follow(ctx2, "/w", first, &ferr) {
		n++
	}
	require.Equal(t, 1, n)
	var ae *apiError
	require.ErrorAs(t, ferr, &ae)
	require.Equal(t, 403, ae.status)
	require.NoError(t, ctx2.Err(), "the follow ended on the refusal, not the deadline")
}

// A stream that carries nothing for streamIdle is given up and reopened.
func TestStreamIdle(t *testing.T) {
	old := streamIdle
	streamIdle = 200 * time.Millisecond
	defer func() { streamIdle = old }()
	quit := make(chan struct{})
	defer close(quit)
	var n atomic.Int32
	s := apiServer(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "event: state\ndata: {\"n\":%d}\n\n", n.Add(1))
		w.(http.Flusher).Flush()
		select { // silent, as a stopped replica is
		case <-quit:
		case <-r.Context().Done():
		}
	})
	c := &client{bases: []string{s}, hc: &http.Client{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first, err := c.stream(ctx, "/w")
	require.NoError(t, err)
	var ferr error
	events := c.follow(ctx, "/w", first, &ferr)
	for _, want := range []string{`{"n":1}`, `{"n":2}`} {
		ev := <-events
		require.JSONEq(t, want, string(ev.Data), "%v", ferr)
	}
	cancel()
	for range events {
	}
}

// Whatever a replica (or something posing as one) sends, the stream parser
// neither panics nor emits an event without a kind, and emits the well-formed
// ones it can see.
func FuzzScanEvents(f *testing.F) {
	f.Add([]byte("event: state\ndata: {\"held\":false}\n\n: ping\n\nevent: granted\ndata: {}\n\n"))
	f.Add([]byte("data: no kind\n\nevent: x\n"))
	f.Add([]byte("event: \ndata: \n\n\n\n"))
	f.Add([]byte("event: a\r\ndata: b\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lines := 0
		scanEvents(bytes.NewReader(b), func() { lines++ }, func(ev sseEvent) bool {
			if ev.Kind == "" {
				t.Fatalf("an event without a kind from %q", b)
			}
			return true
		})
		if lines > bytes.Count(b, []byte("\n"))+1 {
			t.Fatalf("%d lines from %d newlines", lines, bytes.Count(b, []byte("\n")))
		}
	})
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
