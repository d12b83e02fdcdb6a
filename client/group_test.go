package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// group is three replicas in this process, each serving the API on a real
// node (fencelocktest's kit: cheaper than serve processes).
type group struct {
	*fencelocktest.Cluster
	urls map[uint64]string // each replica's API, by ID
}

// newGroup starts a group and returns it with the test's context (see
// testCtx): every test of a group needs both.
func newGroup(t *testing.T) (*group, context.Context) {
	t.Helper()
	g := &group{Cluster: fencelocktest.NewCluster(t, 3, fencelocktest.WithHTTP()), urls: map[uint64]string{}}
	for id := uint64(1); id <= 3; id++ {
		g.urls[id] = g.URL(id)
	}
	return g, testCtx(t)
}

// front is an endpoint in front of a replica's API whose behaviour a test
// switches: pass calls through, answer 503 or 421, hang, or stop (closed
// port).
type front struct {
	srv   *httptest.Server
	mode  atomic.Value  // "ok", "503", "421", "lose", "hang", "hang once"
	hung  chan struct{} // closed by stop: a hanging call returns
	hits  atomic.Int64  // every request
	calls atomic.Int64  // every request but GET /v1/status
	owner atomic.Uint64 // the owner a 421 names
	url   string
	once  sync.Once
}

func newFront(t *testing.T, h http.Handler) *front {
	f := &front{hung: make(chan struct{})}
	f.mode.Store("ok")
	f.owner.Store(9)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		if r.URL.Path == "/v1/status" {
			h.ServeHTTP(w, r)
			return
		}
		f.calls.Add(1)
		switch f.mode.Load().(string) {
		case "503":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(503)
			io.WriteString(w, `{"error":"replica closing","code":"unavailable"}`)
		case "lose": // served, then the answer is lost: the replica died after applying it
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
				}
			}
		case "hang": // takes the call and never answers, as a SIGSTOPped replica
			<-f.hung
		case "hang once": // this call hangs until the caller gives up; the next are passed through
			f.mode.Store("ok")
			select {
			case <-f.hung:
			case <-r.Context().Done():
			}
		case "421":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(421)
			fmt.Fprintf(w, `{"error":"session lives on replica %d","code":"session_elsewhere","owner":%d}`, f.owner.Load(), f.owner.Load())
		default:
			h.ServeHTTP(w, r)
		}
	}))
	f.url = f.srv.URL
	t.Cleanup(f.stop)
	return f
}

func (f *front) stop() {
	f.once.Do(func() {
		close(f.hung)
		f.srv.CloseClientConnections()
		f.srv.Close()
	})
}

func newClient(t *testing.T, endpoints ...string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := New(ctx, Config{Endpoints: endpoints, AttemptTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// newSession opens a session of c with ttl and opts, failing the test if
// it fails.
func newSession(t *testing.T, ctx context.Context, c *Client, ttl time.Duration, opts ...fencelock.SessionOption) *Session {
	t.Helper()
	s, err := c.NewSession(ctx, append([]fencelock.SessionOption{fencelock.WithTTL(ttl)}, opts...)...)
	require.NoError(t, err)
	return s
}

// hold opens a session of c with ttl and acquires name in it, failing the
// test if either fails.
func hold(t *testing.T, ctx context.Context, c *Client, ttl time.Duration, name string) (*Session, *Lock) {
	t.Helper()
	s := newSession(t, ctx, c, ttl)
	l, err := s.Acquire(ctx, name)
	require.NoError(t, err)
	return s, l
}

// acquireQueued calls s.Acquire(ctx, name) in the background, sending the
// request's queue positions on positions; result, called once, waits for
// what Acquire returned.
func acquireQueued(ctx context.Context, s *Session, name string) (positions <-chan int, result func() (*Lock, error)) {
	queued := make(chan int, 16)
	type acquired struct {
		l   *Lock
		err error
	}
	done := make(chan acquired, 1)
	go func() {
		l, err := s.Acquire(ctx, name, fencelock.WithQueuePosition(func(p int) { queued <- p }))
		done <- acquired{l, err}
	}()
	return queued, func() (*Lock, error) {
		a := <-done
		return a.l, a.err
	}
}

// grantedAfter releases held and returns the lock that result (an
// acquireQueued's) gives next, failing the test unless it is granted with a
// token past held's.
func grantedAfter(t *testing.T, ctx context.Context, held *Lock, result func() (*Lock, error)) *Lock {
	t.Helper()
	require.NoError(t, held.Release(ctx))
	l, err := result()
	require.NoError(t, err)
	require.NotNil(t, l)
	require.Greater(t, l.Token(), held.Token())
	return l
}

// requireHeldBy fails the test unless c inspects name held by l's grant,
// of session s named sessionName.
func requireHeldBy(t *testing.T, ctx context.Context, c *Client, name string, l *Lock, s *Session, sessionName string) {
	t.Helper()
	info, err := c.Inspect(ctx, name)
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, l.Token(), info.Token)
	require.Equal(t, s.ID(), info.SessionID)
	require.Equal(t, sessionName, info.SessionName)
}

// waitEvent reads events until ok holds for one, and returns that one. It
// fails the test if events closes (saying closed), if an event carries an
// error (errOf), or if none is ok within 20s (saying none).
func waitEvent[T any](t *testing.T, events <-chan T, errOf func(T) error, ok func(T) bool, closed, none string) T {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e, open := <-events:
			require.True(t, open, closed)
			require.NoError(t, errOf(e))
			if ok(e) {
				return e
			}
		case <-timeout:
			t.Fatal(none)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
