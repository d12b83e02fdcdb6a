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
// does not (stopped, crashed, restarted, unknown), this replica adopts the
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
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"

	"github.com/fencelock/fencelock"
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

// Option configures a Server.
type Option func(*Server)

// WithPeers gives the HTTP base URLs of the other replicas by replica ID
// ("http://10.0.0.2:7080"), so that calls for sessions they serve are
// forwarded to them. Without a URL for a session's replica, or when it
// does not answer, this replica adopts the session instead (see the
// package doc): forwarding is never needed for a call to succeed.
func WithPeers(peers map[uint64]string) Option {
	return func(s *Server) {
		for id, u := range peers {
			if pu, err := url.Parse(u); err == nil && pu.Host != "" {
				s.peers[id] = pu
			}
		}
	}
}

// WithForwardTransport sets the transport forwarded calls use (for TLS to
// peers, client certificates); nil means http.DefaultTransport.
func WithForwardTransport(rt http.RoundTripper) Option {
	return func(s *Server) { s.forwardRT = rt }
}

// WithBearerTokens makes every call but /livez, /healthz, /readyz and the
// dashboard's page require "Authorization: Bearer T" with T one of tokens, each with
// every right. An empty list requires nothing.
func WithBearerTokens(tokens []string) Option {
	return func(s *Server) { s.SetACL(aclFromTokens(tokens)) }
}

// WithACL makes every call but /livez, /healthz, /readyz and the dashboard's
// page require "Authorization: Bearer T" with T one of acl's tokens, and allows
// it only what T's rights allow (ParseTokens). A nil or empty acl requires
// no token, and allows every call but the admin right's (revoke, ending a
// session without its secret).
func WithACL(acl *ACL) Option { return func(s *Server) { s.SetACL(acl) } }

// WithBodyTimeout bounds how long a request body may take to arrive after
// its headers (default DefaultBodyTimeout); a slower one is refused with
// 408, so that a client trickling a body cannot hold a connection and a
// goroutine for ever. 0 or less: no bound.
func WithBodyTimeout(d time.Duration) Option { return func(s *Server) { s.bodyTimeout = d } }

// WithMaxStreams bounds the watch and observe streams open at once on this
// Server (default DefaultMaxStreams); the next is refused with 429
// too_many_streams. Each stream begins with a linearizable read of the
// group and holds a goroutine and a connection while it lasts.
func WithMaxStreams(n int) Option { return func(s *Server) { s.maxStreams = n } }

// WithStreamWriteTimeout bounds how long one event may take to be written
// to a stream's client (default DefaultStreamWriteTimeout): a client that
// does not read has its stream closed rather than buffered for.
func WithStreamWriteTimeout(d time.Duration) Option {
	return func(s *Server) { s.streamWrite = d }
}

// WithMaxBody bounds request bodies; larger ones get 413.
func WithMaxBody(n int64) Option { return func(s *Server) { s.maxBody = n } }

// WithRequestTimeout bounds how long a call waits for the group (no leader,
// no quorum) before it answers 503; default 10s.
func WithRequestTimeout(d time.Duration) Option { return func(s *Server) { s.timeout = d } }

// WithLogger sets the logger; nil means slog.Default().
func WithLogger(l *slog.Logger) Option { return func(s *Server) { s.log = l } }

// Server is the API of one replica. It is an http.Handler; Close it before
// closing its Node.
type Server struct {
	node      *fencelock.Node
	mux       *http.ServeMux
	peers     map[uint64]*url.URL
	forwardRT http.RoundTripper
	acl       atomic.Pointer[ACL] // nil or empty: no token needed
	maxBody   int64
	timeout   time.Duration
	log       *slog.Logger
	metrics   http.Handler

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

// Close ends the Server's waiting acquires and campaigns (withdrawing them
// from their queues) and its watch streams. It does not close the sessions
// at the group: their clients go on calling other replicas, which adopt
// them with every lock and token (a re-issued acquire finds its grant, or
// queues again); a session whose client stops calling expires one TTL
// later, as when a Go holder's process exits.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
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

// access decides whether the caller p (nil without tokens) may make call r:
// nil, or the 403 naming the missing right.
type access func(p *principal, r *http.Request) error

// needName requires right on the call's {name}.
func needName(right Right) access {
	return func(p *principal, r *http.Request) error {
		if name := r.PathValue("name"); !p.may(right, name) {
			return errNoRight(p, right, " on "+strconv.Quote(name))
		}
		return nil
	}
}

// needSessions is the right to have sessions: lock or elect, on any name.
func needSessions(p *principal, r *http.Request) error {
	if !p.mayAny(RightLock) && !p.mayAny(RightElect) {
		return errForbidden("this token has no lock or elect right, which sessions need")
	}
	return nil
}

func needAnyRead(p *principal, r *http.Request) error {
	if !p.mayAny(RightRead) {
		return errForbidden("this token has no read right")
	}
	return nil
}

// needListRead allows GET /v1/locks and GET /v1/elections only for a prefix
// the token may read whole: a listing is refused rather than filtered, so
// that its pages and "more" keep their meaning. GET /v1/locks?sort=waiters
// takes no prefix, so it needs read on every name.
//
// A listing covers one group, and its names all start with the prefix's
// part before its "@group" (the group's names carry "@group" at their
// end): that part is what the token must cover.
func needListRead(p *principal, r *http.Request) error {
	prefix := r.URL.Query().Get("prefix")
	if i := strings.LastIndexByte(prefix, '@'); i >= 0 {
		prefix = prefix[:i]
	}
	if !p.mayPrefix(RightRead, prefix) {
		return errForbidden("this token has no read right on every name with prefix " + strconv.Quote(prefix) +
			": list with a prefix it may read")
	}
	return nil
}

// needDelete: ending one's own session needs its secret and the right to
// have sessions; ending another's, without its secret, admin on every name.
func needDelete(p *principal, r *http.Request) error {
	if r.Header.Get(SecretHeader) != "" {
		return needSessions(p, r)
	}
	if !p.may(RightAdmin, AllNames) {
		return errNoRight(p, RightAdmin, ` on "*" (no `+SecretHeader+` header: ending another's session)`)
	}
	return nil
}

// route is one path with its methods; a method it lacks gets a JSON 405.
type route struct {
	path    string
	methods map[string]http.HandlerFunc
	public  bool              // no bearer token needed
	access  map[string]access // by method; none: any valid token
}

func (s *Server) routes() {
	var rs []*route
	add := func(path string, public bool, m map[string]http.HandlerFunc, a map[string]access) {
		rs = append(rs, &route{path: path, methods: m, public: public, access: a})
	}
	type hm = map[string]http.HandlerFunc
	type am = map[string]access
	add("/v1/sessions", false, hm{"POST": s.createSession, "GET": s.listSessions}, am{"POST": needSessions, "GET": needAnyRead})
	add("/v1/sessions/{id}", false, hm{"DELETE": s.deleteSession}, am{"DELETE": needDelete})
	add("/v1/sessions/{id}/heartbeat", false, hm{"POST": s.heartbeat}, am{"POST": needSessions})
	add("/v1/locks", false, hm{"GET": s.listLocks}, am{"GET": needListRead})
	add("/v1/locks/{name}", false, hm{"GET": s.getLock}, am{"GET": needName(RightRead)})
	add("/v1/locks/{name}/acquire", false, hm{"POST": s.acquire}, am{"POST": needName(RightLock)})
	add("/v1/locks/{name}/release", false, hm{"POST": s.release}, am{"POST": needName(RightLock)})
	add("/v1/locks/{name}/watch", false, hm{"GET": s.watch}, am{"GET": needName(RightRead)})
	add("/v1/locks/{name}/revoke", false, hm{"POST": s.revokeLock}, am{"POST": needName(RightAdmin)})
	add("/v1/elections", false, hm{"GET": s.listElections}, am{"GET": needListRead})
	add("/v1/elections/{name}", false, hm{"GET": s.getElection}, am{"GET": needName(RightRead)})
	add("/v1/elections/{name}/campaign", false, hm{"POST": s.campaign}, am{"POST": needName(RightElect)})
	add("/v1/elections/{name}/proclaim", false, hm{"POST": s.proclaim}, am{"POST": needName(RightElect)})
	add("/v1/elections/{name}/resign", false, hm{"POST": s.resign}, am{"POST": needName(RightElect)})
	add("/v1/elections/{name}/observe", false, hm{"GET": s.observe}, am{"GET": needName(RightRead)})
	add("/v1/elections/{name}/revoke", false, hm{"POST": s.revokeElection}, am{"POST": needName(RightAdmin)})
	add("/v1/members", false, hm{"GET": s.listMembers, "POST": s.addMember}, am{"GET": needAnyRead, "POST": needAdminAll})
	add("/v1/members/{id}", false, hm{"DELETE": s.removeMember}, am{"DELETE": needAdminAll})
	add("/v1/status", false, hm{"GET": s.status}, nil)
	add(SnapshotPath, false, hm{"GET": s.snapshot}, am{"GET": needBackup}) // snapshot.go
	add("/metrics", false, hm{"GET": s.metrics.ServeHTTP}, nil)
	add("/healthz", true, hm{"GET": s.healthz}, nil)
	add("/readyz", true, hm{"GET": s.readyz}, nil)
	add("/livez", true, hm{"GET": s.healthz}, nil)
	add("/{$}", true, hm{"GET": s.dashboard}, nil)
	for _, rt := range rs {
		var allow []string
		for m, h := range rt.methods {
			allow = append(allow, m)
			s.mux.Handle(m+" "+rt.path, s.guard(rt.public, rt.access[m], h))
		}
		if slices.Contains(allow, "GET") {
			allow = append(allow, "HEAD")
		}
		slices.Sort(allow)
		allowed := strings.Join(allow, ", ")
		// The mux answers a method a path lacks in plain text: this
		// method-less pattern, less specific than the others, answers it
		// in JSON like every other error.
		s.mux.HandleFunc(rt.path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allowed)
			writeError(w, newError(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
				r.Method+" not allowed on "+rt.path+"; allowed: "+allowed))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, newError(http.StatusNotFound, CodeNotFound, "no such path: "+r.URL.Path))
	})
}

// guard bounds the time the body may take, checks the bearer token and its
// rights, and reads the body within its bounds (so that no handler waits
// on a slow client).
func (s *Server) guard(public bool, need access, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hasBody := r.Body != nil && r.Body != http.NoBody
		var rc *http.ResponseController
		if hasBody && s.bodyTimeout > 0 {
			// Set before any answer: the server reads what is left of an
			// unread body after the handler, under this deadline too.
			rc = http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Now().Add(s.bodyTimeout))
		}
		if !public {
			acl := s.acl.Load()
			var p *principal
			if acl != nil {
				got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
				if ok {
					p = acl.match(got)
				}
				if p == nil {
					w.Header().Set("WWW-Authenticate", `Bearer realm="fencelock"`)
					writeError(w, newError(http.StatusUnauthorized, CodeUnauthorized, "missing or wrong bearer token"))
					return
				}
			}
			if need != nil {
				if err := need(p, r); err != nil {
					writeError(w, err)
					return
				}
			}
		}
		if r.Method == http.MethodGet && s.streamWrite > 0 {
			// A view can be large (a page of a thousand locks): a client
			// that does not read it must not hold the handler for ever.
			// It has the call's own bound to be answered, and the
			// stream's write timeout to take the answer; a stream sets
			// its own deadline for each event.
			wrc := http.NewResponseController(w)
			_ = wrc.SetWriteDeadline(time.Now().Add(s.timeout + s.streamWrite))
			defer wrc.SetWriteDeadline(time.Time{})
		}
		if hasBody {
			b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
			if err != nil {
				var ne interface{ Timeout() bool }
				if errors.As(err, &ne) && ne.Timeout() {
					w.Header().Set("Connection", "close")
					err = newError(http.StatusRequestTimeout, CodeRequestTimeout,
						"the request body did not arrive within "+s.bodyTimeout.String()+" of its headers")
				}
				writeError(w, err)
				return
			}
			if rc != nil {
				// The body is in: the connection's next read is the next
				// request's, or the server's watch for the client going.
				_ = rc.SetReadDeadline(time.Time{})
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		if r.Header.Get("Traceparent") != "" {
			// The client's trace continues here: the spans of the calls
			// this request makes (fencelock.Acquire, ...) are children of
			// the client's span. A forwarded request keeps the header.
			r = r.WithContext(traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header)))
		}
		h(w, r)
	}
}

// traceContext reads W3C trace context (traceparent, tracestate).
var traceContext propagation.TraceContext

// body returns the request body (guard read it within its bounds), and
// leaves it to be read again in case the call is forwarded.
func body(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(b))
	return b, nil
}

// callCtx bounds a call to the group.
func (s *Server) callCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.timeout)
}

// --- status, health ---

// StatusJSON answers GET /v1/status: this replica's view of the group.
type StatusJSON struct {
	ReplicaID    uint64            `json:"replica_id"`
	LeaderID     uint64            `json:"leader_id"`
	IsLeader     bool              `json:"is_leader"`
	Term         uint64            `json:"term"`
	AppliedIndex uint64            `json:"applied_index"`
	GroupID      string            `json:"group_id"`
	Voters       map[string]string `json:"voters"`
	NonVoting    map[string]string `json:"non_voting"`
	Sessions     int               `json:"sessions"`
	LocksHeld    int               `json:"locks_held"`
	Waiters      int               `json:"waiters"`
	// Unreachable are the voters this replica has not heard from in the
	// last few election timeouts: down, or cut off from it. Known on the
	// leader, and on every replica while the group has no leader; empty on
	// a follower (fencelock.Status.Unreached).
	Unreachable []uint64 `json:"unreachable"`
	// HTTPSessions counts the sessions this replica's API owns.
	HTTPSessions int `json:"http_sessions"`
	// Groups are every group this replica runs, the default group (name
	// "") first; the fields above are the default group's.
	Groups []GroupJSON `json:"groups"`
	// Version is what this replica runs: build and log formats.
	Version VersionJSON `json:"version"`
}

// GroupJSON is one group in StatusJSON.
type GroupJSON struct {
	Name      string   `json:"name"`
	GroupID   string   `json:"group_id"`
	LeaderID  uint64   `json:"leader_id"`
	IsLeader  bool     `json:"is_leader"`
	NonVoting bool     `json:"non_voting"`
	Voters    []uint64 `json:"voters"`
	Term      uint64   `json:"term"`
	LocksHeld int      `json:"locks_held"`
	// Unreachable are the group's voters this replica does not reach.
	Unreachable []uint64 `json:"unreachable"`
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	st := s.node.Stats()
	out := StatusJSON{ReplicaID: st.ReplicaID, LeaderID: st.LeaderID, IsLeader: st.IsLeader, Term: st.Term,
		AppliedIndex: st.AppliedIndex, GroupID: strconv.FormatUint(st.GroupID, 16),
		Voters: map[string]string{}, NonVoting: map[string]string{},
		Sessions: st.Sessions, LocksHeld: st.LocksHeld, Waiters: st.Waiters,
		Unreachable: append([]uint64{}, st.Unreached...), Version: NewVersionJSON(st.Version)}
	for id, a := range st.Voters {
		out.Voters[strconv.FormatUint(id, 10)] = a
	}
	for _, g := range st.Groups {
		out.Groups = append(out.Groups, GroupJSON{Name: g.Name, GroupID: strconv.FormatUint(g.GroupID, 16),
			LeaderID: g.LeaderID, IsLeader: g.IsLeader, NonVoting: g.NonVoting,
			Voters: slices.Sorted(maps.Keys(g.Voters)), Term: g.Term, LocksHeld: g.LocksHeld,
			Unreachable: append([]uint64{}, g.Unreached...)})
	}
	// The full membership (non-voting replicas too) is a linearizable read;
	// without a quorum the local view above is still worth showing.
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if m, err := s.node.Members(ctx); err == nil {
		for id, a := range m.NonVoting {
			out.NonVoting[strconv.FormatUint(id, 10)] = a
		}
	}
	s.mu.Lock()
	out.HTTPSessions = len(s.sessions)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, out)
}

// healthz answers /livez (and /healthz, its older name): the process
// serves HTTP. It asks nothing of the groups: a replica without a quorum is
// alive, and restarting it would not bring the quorum back.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyTimeout bounds /readyz's read, under the 1 s a Kubernetes probe
// waits by default.
const readyTimeout = 800 * time.Millisecond

// readyz answers /readyz: 200 when this replica has caught up with a
// leader it knows, in every group (fencelock.Node.Ready); else 503 with the
// cause (code no_quorum when that is it).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := s.node.Ready(ctx); err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// isCtxErr reports a context error of the caller's own request.
func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
