package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// shortLease serves h, but gives an acquire's answer that grants the
// lease_ms lease, as a replica does for a grant whose session's part in
// its group is near its deadline; with failAfter, every call but
// GET /v1/status is answered 503 from that answer on (the group, and every
// replica, out of reach).
func shortLease(t *testing.T, h http.Handler, lease int64, failAfter bool) string {
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status" && failing.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(503)
			io.WriteString(w, `{"error":"unreachable","code":"unavailable"}`)
			return
		}
		if !strings.HasSuffix(r.URL.Path, "/acquire") {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		var m map[string]any
		if rec.Code == 200 && json.Unmarshal(body, &m) == nil && m["granted"] == true {
			if _, ok := m["lease_ms"]; !ok {
				t.Errorf("the replica's answer has no lease_ms: %s", body)
			}
			m["lease_ms"] = lease
			body, _ = json.Marshal(m)
			failing.Store(failAfter)
		}
		maps.Copy(w.Header(), rec.Header())
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// shortLeaseSession opens a session with a TTL of 10s (a lease of 6s) on a
// new group through shortLease(lease, failAfter) in front of its replica 1.
func shortLeaseSession(t *testing.T, lease int64, failAfter bool) (context.Context, *Session) {
	t.Helper()
	g, ctx := newGroup(t)
	c := newClient(t, shortLease(t, g.API(1), lease, failAfter))
	return ctx, newSession(t, ctx, c, 10*time.Second)
}

// A grant's lease_ms shorter than the heartbeats' brings LeaseLeft down to
// it, and, with no heartbeat answered after, Done closes by it (not by the
// heartbeats' lease, 6s), the lock's with it.
func TestGrantLeaseBringsDoneEarlier(t *testing.T) {
	ctx, s := shortLeaseSession(t, 800, true)
	require.Greater(t, s.LeaseLeft(), 5*time.Second)
	sent := now()
	l, err := s.Acquire(ctx, "jobs/short")
	require.NoError(t, err)
	got := now()
	require.LessOrEqual(t, s.LeaseLeft(), 800*time.Millisecond, "LeaseLeft is the grant's lease")
	s.mu.Lock()
	deadline := s.deadline
	s.mu.Unlock()
	// Counted from the acquire's send: between the test's send and its
	// receipt of the answer, not from the receipt.
	require.False(t, deadline.Before(sent.Add(800*time.Millisecond)), "counted from before the acquire's send")
	require.False(t, got.Add(800*time.Millisecond).Before(deadline), "counted from after the answer arrived")
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done still open 10s after a grant's lease of 800ms")
	}
	ended := now()
	require.False(t, ended.Before(deadline), "Done closed %v before the grant's lease ended", deadline.Sub(ended))
	require.Less(t, ended.Sub(deadline), 300*time.Millisecond, "Done closed %v after the grant's lease ended", ended.Sub(deadline))
	require.ErrorIs(t, s.Err(), fencelock.ErrSessionExpired)
	require.Contains(t, s.Err().Error(), "a grant's lease ran out")
	select {
	case <-l.Done():
	default:
		t.Fatal("the lock outlived its grant's lease")
	}
}

// A grant's lease that ends before the next heartbeat is due makes the
// session heartbeat at once: the heartbeat renews the grant's group (its
// part now holds the grant), and lifts the deadline past the grant's
// lease. The session lives on.
func TestGrantLeaseHeartbeatsAtOnce(t *testing.T) {
	ctx, s := shortLeaseSession(t, 1000, false)
	require.NoError(t, s.SetHeartbeatPeriod(3*time.Second)) // none due for 3s
	var mu sync.Mutex
	var beats []error
	s.OnHeartbeat(func(err error, _ time.Duration) {
		mu.Lock()
		beats = append(beats, err)
		mu.Unlock()
	})
	l, err := s.Acquire(ctx, "jobs/renewed")
	require.NoError(t, err)
	select {
	case <-s.Done():
		t.Fatalf("the session ended: %v", s.Err())
	case <-time.After(1500 * time.Millisecond): // past the grant's lease
	}
	require.NoError(t, s.Err())
	require.NoError(t, l.Err())
	require.Greater(t, s.LeaseLeft(), 3*time.Second, "a heartbeat sent after the grant lifted the deadline")
	mu.Lock()
	require.NotEmpty(t, beats, "a heartbeat was sent before the period's")
	require.NoError(t, beats[0])
	mu.Unlock()
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
}

// A grant whose lease_ms is 0 (its part in the grant's group promises
// nothing from the call's send) does not end the session: the session
// heartbeats at once, before Acquire returns, and that heartbeat, which
// renewed the part holding the grant, times the deadline. The session and
// the lock live on.
func TestGrantLeaseZeroRenewsAtOnce(t *testing.T) {
	ctx, s := shortLeaseSession(t, 0, false)
	require.NoError(t, s.SetHeartbeatPeriod(3*time.Second)) // none due for 3s
	var beats atomic.Int64
	s.OnHeartbeat(func(err error, _ time.Duration) {
		if err == nil {
			beats.Add(1)
		}
	})
	start := now()
	l, err := s.Acquire(ctx, "jobs/zero")
	require.NoError(t, err)
	require.NoError(t, s.Err(), "a grant's lease_ms of 0 ended the session")
	require.NoError(t, l.Err())
	require.Equal(t, int64(1), beats.Load(), "one heartbeat, sent before Acquire returned")
	left := s.LeaseLeft()
	require.LessOrEqual(t, left, 6*time.Second)
	require.GreaterOrEqual(t, left, 6*time.Second-now().Sub(start), "the heartbeat's lease, sent after the call began, times the deadline")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
}

// A holder that sees its session over sees each of its locks over too: the
// session's end closes its grants' Done before its own, never after. (CI
// caught TestGrantLeaseBringsDoneEarlier's lock still open just after its
// session's Done closed.) The test holds the grant's lock, so an end that
// closed the session's Done first is caught between the two.
func TestSessionEndsItsGrantsFirst(t *testing.T) {
	g, ctx := newGroup(t)
	c := newClient(t, g.urls[1])
	s, l := hold(t, ctx, c, 10*time.Second, "jobs/order")
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	l.g.mu.Lock()
	go s.end(errors.New("test: over"))
	select {
	case <-s.done:
		open := !isClosed(l.g.done)
		l.g.mu.Unlock()
		require.False(t, open, "the session's Done closed while its lock's was still open")
	case <-time.After(200 * time.Millisecond):
		// The end waits for the grant, as it should: let it go on.
		l.g.mu.Unlock()
	}
	<-s.done
	require.True(t, isClosed(l.Done()))
	require.ErrorContains(t, l.Err(), "test: over")
}
