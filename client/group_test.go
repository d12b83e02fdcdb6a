package client

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/httpapi"
	"github.com/fencelock/fencelock/transport"
)

var quiet = slog.New(slog.DiscardHandler)

// group is three replicas in this process, each serving the API on a real
// node, as httpapi's tests run them (cheaper than serve processes).
type group struct {
	t     *testing.T
	nodes map[uint64]*fencelock.Node
	apis  map[uint64]*httpapi.Server
	srvs  map[uint64]*httptest.Server
	urls  map[uint64]string
	once  map[uint64]*sync.Once
}

func newGroup(t *testing.T) *group {
	t.Helper()
	net := transport.NewNetwork(3)
	members := map[uint64]string{1: net.Addr(1), 2: net.Addr(2), 3: net.Addr(3)}
	g := &group{t: t, nodes: map[uint64]*fencelock.Node{}, apis: map[uint64]*httpapi.Server{},
		srvs: map[uint64]*httptest.Server{}, urls: map[uint64]string{}, once: map[uint64]*sync.Once{}}
	for id := uint64(1); id <= 3; id++ {
		g.srvs[id] = httptest.NewUnstartedServer(nil)
		g.urls[id] = "http://" + g.srvs[id].Listener.Addr().String()
		g.once[id] = &sync.Once{}
	}
	dir := t.TempDir()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for id := uint64(1); id <= 3; id++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := fencelock.Start(context.Background(), fencelock.Config{ReplicaID: id, Members: members,
				Dir: filepath.Join(dir, fmt.Sprint(id)), Transport: net, Logger: quiet})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			g.nodes[id] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for id := uint64(1); id <= 3; id++ {
		g.apis[id] = httpapi.New(g.nodes[id], httpapi.WithLogger(quiet), httpapi.WithPeers(g.urls))
		g.srvs[id].Config.Handler = g.apis[id]
		g.srvs[id].Start()
	}
	t.Cleanup(func() {
		for id := uint64(1); id <= 3; id++ {
			g.stop(id)
		}
	})
	return g
}

// stop stops replica id: its API, its HTTP server, its node.
func (g *group) stop(id uint64) {
	g.once[id].Do(func() {
		g.apis[id].Close()
		g.srvs[id].CloseClientConnections()
		g.srvs[id].Close()
		g.nodes[id].Close()
	})
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
