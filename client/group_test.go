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

func newGroup(t *testing.T) *group {
	t.Helper()
	g := &group{Cluster: fencelocktest.NewCluster(t, 3, fencelocktest.WithHTTP()), urls: map[uint64]string{}}
	for id := uint64(1); id <= 3; id++ {
		g.urls[id] = g.URL(id)
	}
	return g
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

// hold opens a session of c with ttl and acquires name in it, failing the
// test if either fails.
func hold(t *testing.T, ctx context.Context, c *Client, ttl time.Duration, name string) (*Session, *Lock) {
	t.Helper()
	s, err := c.NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	l, err := s.Acquire(ctx, name)
	require.NoError(t, err)
	return s, l
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
