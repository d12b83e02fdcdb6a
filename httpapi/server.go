// Package httpapi serves fencelock's HTTP/JSON API (docs/http.md) from one
// replica, so that clients in any language take locks and run elections
// through any replica of a group.
//
// A session made over HTTP belongs to the group, not to the replica that
// created it: any replica serves every call for it. Each replica that
// serves it holds a fencelock.Session made with
// fencelock.WithExternalKeepAlive, renewed at the group only when its
// client heartbeats, so a crashed client's locks pass on within one TTL of
// its last heartbeat, as a crashed Go holder's do. A call for a session
// served by another replica is forwarded to it while it answers (WithPeers:
// an optimisation, so that a session does not move at every call); when it
// does not, within a twentieth of the session's TTL (stopped, crashed,
// restarted, hung, unknown), this replica adopts the
// session: it resumes it at the group with every lock and term it holds,
// their fencing tokens unchanged, and serves the call. So a replica's stop,
// crash or restart loses no session whose client goes on calling another
// replica within its TTL.
//
// A session answers only to its creator: its create response carries a
// secret, which every call acting on it must send in the
// Fencelock-Session-Secret header. Bearer tokens (WithACL) say which names
// a caller may read, lock, elect or administer.
//
// A request with a W3C traceparent header continues the client's trace:
// the spans of the calls it makes (see fencelock.Config.TracerProvider)
// are children of the span the header names.
package httpapi

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servicehook"
	"github.com/fencelock/fencelock/metrics"
)

// MaxBodyBytes is the default bound on a request body (WithMaxBody): an
// election value is at most 4096 bytes, so no valid body comes near it.
const MaxBodyBytes = 64 << 10

// SecretHeader is the request header that carries a session's secret, the
// session_secret of its create response, on every call acting on it.
const SecretHeader = "Fencelock-Session-Secret"

// The defaults of the limits that keep a slow or idle client from pinning
// the server (WithBodyTimeout, WithMaxStreams; the http.Server's own in
// cmd/fencelock).
const (
	// DefaultBodyTimeout is how long a request body may take to arrive
	// after its headers.
	DefaultBodyTimeout = 30 * time.Second
	// DefaultMaxStreams bounds the open watch and observe streams.
	DefaultMaxStreams = 1024
	// DefaultStreamWriteTimeout is how long one event may take to reach a
	// stream's client before the stream is closed.
	DefaultStreamWriteTimeout = 10 * time.Second
)

// forwardedHeader marks a request one replica forwarded to another, so that
// it is never forwarded again (no loops while ownership is being learnt).
const forwardedHeader = "Fencelock-Forwarded"

// Server is the API of one replica. It is an http.Handler; Close it before
// closing its Node.
type Server struct {
	node      *fencelock.Node
	mux       *http.ServeMux
	peers     map[uint64]*url.URL
	forwardRT http.RoundTripper
	acl       atomic.Pointer[ACL] // nil or empty: no token needed
	// loopbackAdmin: without tokens, a loopback client has every right
	// (WithLoopbackAdmin).
	loopbackAdmin bool
	maxBody       int64
	timeout       time.Duration
	log           *slog.Logger
	metrics       http.Handler

	bodyTimeout time.Duration
	streamWrite time.Duration
	maxStreams  int
	streams     atomic.Int64 // open streams

	ctx    context.Context // ends at Close: waits, streams
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[ID]*session      // this replica's copies of HTTP sessions: the ones it serves
	adopting map[ID]chan struct{} // adoptions in progress, closed when done (lockAdoption)
	ends     map[endKey]*endKind  // how grants ended, by group and token (grantEnd)
	closed   bool
}

// New returns the API of node.
func New(node *fencelock.Node, opts ...Option) *Server {
	s := &Server{
		node: node, mux: http.NewServeMux(), peers: map[uint64]*url.URL{},
		maxBody: MaxBodyBytes, timeout: 10 * time.Second,
		bodyTimeout: DefaultBodyTimeout, maxStreams: DefaultMaxStreams, streamWrite: DefaultStreamWriteTimeout,
		sessions: map[ID]*session{}, adopting: map[ID]chan struct{}{}, ends: map[endKey]*endKind{},
	}
	for _, o := range opts {
		o(s)
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector(node))
	s.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	s.routes()
	return s
}

// Close ends the Server's waiting acquires and campaigns and its watch
// streams, and gives up its copies of the sessions it serves, in this
// process only. It closes no session at the group and withdraws no
// request: their clients go on calling other replicas, which adopt them
// with every lock and token and every queued request in its place (a
// re-issued acquire or campaign is answered by its request's grant, never
// queued a second time); a session whose client stops calling expires one
// TTL later, as when a Go holder's process exits, and its requests leave
// their queues then.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	copies := make([]*session, 0, len(s.sessions))
	for _, hs := range s.sessions {
		copies = append(copies, hs)
	}
	s.mu.Unlock()
	// Given up before the waits' context ends: a wait whose session is
	// over here returns without withdrawing its request, which a cancel
	// would.
	for _, hs := range copies {
		servicehook.Abandon(hs.s)
	}
	s.cancel()
	s.wg.Wait()
	return nil
}

// SetACL replaces the bearer tokens and their rights (cmd/fencelock calls
// it on SIGHUP); calls already past the check keep the rights they had. A
// nil or empty acl requires no token (and allows no admin call).
func (s *Server) SetACL(acl *ACL) {
	if acl.Len() == 0 {
		acl = nil
	}
	s.acl.Store(acl)
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// body returns the request body (guard read it within its bounds), and
// leaves it to be read again in case the call is forwarded.
func body(r *http.Request) ([]byte, error) {
	if h, ok := r.Body.(*heldBody); ok {
		h.Reset(h.b)
		return h.b, nil
	}
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

// decodeBody reads r's body and decodes it with decode, once the path
// checked out (pathErr nil; a body that cannot be read is said first).
// ok false: the response was written.
func decodeBody[T any](w http.ResponseWriter, r *http.Request, pathErr error, decode func([]byte) (T, error)) (req T, ok bool) {
	b, err := body(r)
	if err == nil {
		err = pathErr
	}
	if err == nil {
		req, err = decode(b)
	}
	if err != nil {
		writeError(w, err)
		return req, false
	}
	return req, true
}

// heldBody is a request body that guard read whole: body returns its
// bytes without copying them again, and rewinds it for a forward to read.
type heldBody struct {
	bytes.Reader
	b []byte
}

func newHeldBody(b []byte) *heldBody {
	h := &heldBody{b: b}
	h.Reset(b)
	return h
}

func (*heldBody) Close() error { return nil }

// callCtx bounds a call to the group.
func (s *Server) callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.timeout)
}

// reply answers a read: it asks the node within the call's bound
// (callCtx) and writes what render makes of the answer with a 200, or the
// error the node gave.
func reply[T any](s *Server, w http.ResponseWriter, r *http.Request, ask func(context.Context) (T, error), render func(T) any) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	v, err := ask(ctx)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, render(v))
}

// change makes an administrator's change within the call's bound
// (callCtx) and reports whether it was made; if not, it answered the error.
func (s *Server) change(w http.ResponseWriter, r *http.Request, do func(ctx context.Context) error) bool {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	if err := do(ctx); err != nil {
		writeError(w, err)
		return false
	}
	return true
}

// replyNamed is reply for a read of the lock or election the path names
// (pathName).
func replyNamed[T any](s *Server, w http.ResponseWriter, r *http.Request, ask func(ctx context.Context, name string) (T, error), render func(name string, v T) any) {
	name, ok := pathName(w, r)
	if !ok {
		return
	}
	reply(s, w, r, func(ctx context.Context) (T, error) { return ask(ctx, name) }, func(v T) any { return render(name, v) })
}

// pathName is the {name} of a call on one lock or election, checked
// (validName); ok false: the 400 was written.
func pathName(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if err := validName(name); err != nil {
		writeError(w, err)
		return "", false
	}
	return name, true
}

// isCtxErr reports a context error of the caller's own request.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
