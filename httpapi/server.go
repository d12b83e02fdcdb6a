// Package httpapi serves fencelock's HTTP/JSON API (docs/http.md) from one
// replica, so that clients in any language take locks and run elections
// through any replica of a group.
//
// A session made over HTTP is a fencelock.Session of the replica that
// created it, made with fencelock.WithExternalKeepAlive: it is renewed at the
// group only when its client heartbeats, so a crashed client's locks pass on
// within one TTL of its last heartbeat, as a crashed Go holder's do. Calls
// naming a session owned by another replica are forwarded to it when its HTTP
// address is known (WithPeers), and answered with 421 session_elsewhere
// otherwise.
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
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
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
// ("http://10.0.0.2:7080"), so that calls for sessions they own are
// forwarded to them. Without a URL for the owner such calls get 421.
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
	sessions map[ID]*session     // the HTTP sessions this replica owns
	owners   map[ID]uint64       // learnt owners of other replicas' sessions
	ends     map[endKey]*endKind // how grants ended, by group and token (grantEnd)
	closed   bool
}

// New returns the API of node.
func New(node *fencelock.Node, opts ...Option) *Server {
	s := &Server{
		node: node, mux: http.NewServeMux(), peers: map[uint64]*url.URL{},
		maxBody: MaxBodyBytes, timeout: 10 * time.Second,
		bodyTimeout: DefaultBodyTimeout, maxStreams: DefaultMaxStreams, streamWrite: DefaultStreamWriteTimeout,
		sessions: map[ID]*session{}, owners: map[ID]uint64{}, ends: map[endKey]*endKind{},
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
// at the group: their clients cannot heartbeat to a closed replica, so the
// group expires them one TTL later, after the clients stopped acting, as
// when a Go holder's process exits.
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

// lookup finds the HTTP session id named by a call. A session this replica
// owns is returned; one another replica owns is forwarded there (forwarded
// true: the response is written), or refused with 421; an unknown or ended
// one is errNoSession.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, id ID) (hs *session, forwarded bool, err error) {
	s.mu.Lock()
	hs = s.sessions[id]
	owner, known := s.owners[id]
	s.mu.Unlock()
	if hs != nil {
		if err := hs.checkSecret(r); err != nil {
			return nil, false, err
		}
		if hs.s.Err() != nil {
			s.drop(hs)
			return nil, false, errNoSession
		}
		return hs, false, nil
	}
	me := s.node.Status().ReplicaID
	if !known {
		ctx, cancel := s.callCtx(r)
		defer cancel()
		page, err := s.node.Sessions(ctx, fencelock.ListAfterSession(uint64(id)-1), fencelock.ListLimit(1))
		if err != nil {
			return nil, false, err
		}
		if len(page.Sessions) == 0 || page.Sessions[0].ID != uint64(id) {
			return nil, false, errNoSession
		}
		owner = page.Sessions[0].Owner
		if owner != me {
			s.mu.Lock()
			if len(s.owners) > 10000 { // a bound, not a cache policy: owners never change, relearning is cheap
				clear(s.owners)
			}
			s.owners[id] = owner
			s.mu.Unlock()
		}
	}
	if owner == me {
		// Open at the group, but not among this process's sessions: it
		// was made before this replica restarted, and nobody renews it.
		return nil, false, errNoSession
	}
	peer := s.peers[owner]
	if peer == nil || r.Header.Get(forwardedHeader) != "" {
		e := newError(http.StatusMisdirectedRequest, CodeMisdirected,
			"session "+id.String()+" lives on replica "+strconv.FormatUint(owner, 10)+": call that replica")
		e.owner = owner
		return nil, false, e
	}
	s.forward(w, r, id, peer)
	return nil, true, nil
}

// forward proxies r to peer, streams included. Its headers go along, the
// bearer token and the session's secret among them: the owner checks both.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, id ID, peer *url.URL) {
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(peer)
			pr.Out.Header.Set(forwardedHeader, strconv.FormatUint(s.node.Status().ReplicaID, 10))
		},
		Transport:     s.forwardRT,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The owner is down: once the group has expired its sessions,
			// this one is simply over.
			if !s.sessionOpen(r.Context(), "", uint64(id)) {
				s.mu.Lock()
				delete(s.owners, id)
				s.mu.Unlock()
				writeError(w, errNoSession)
				return
			}
			writeError(w, newError(http.StatusServiceUnavailable, CodeUnavailable,
				"the replica that owns the session cannot be reached: "+err.Error()))
		},
	}
	p.ServeHTTP(w, r)
}

// --- sessions ---

// SessionResponse answers POST /v1/sessions and heartbeats.
type SessionResponse struct {
	SessionID ID `json:"session_id,omitempty"`
	// SessionSecret is the session's credential, in the create response
	// only: every call acting on the session sends it in the
	// Fencelock-Session-Secret header. No other answer shows it.
	SessionSecret string `json:"session_secret,omitempty"`
	TimeoutMS     int64  `json:"timeout_ms"`
	// LeaseMS is how long after sending the heartbeat (or the create) whose
	// answer this is the client may act as holder of everything the session
	// holds, in every group: stop acting by then unless a later heartbeat
	// was answered. It is the shortest of Leases over the groups where the
	// session holds a lock, a leadership or a request (and the default
	// group): a heartbeat that could not renew such a group fails instead.
	LeaseMS int64 `json:"lease_ms"`
	// Leases is the lease of the session's part in each group it has one
	// in, by group name ("" the default group), in milliseconds from the
	// send of the heartbeat: TTL − 2·margin for a part this heartbeat
	// renewed, 0 for one it did not (it promises nothing, and ends by its
	// own deadline at the replica).
	Leases map[string]int64 `json:"leases,omitempty"`
}

// sessionResponse is the answer to a create (leases nil: only the default
// part, just opened) or to a heartbeat (leases: what its KeepAliveGroups
// round did).
func sessionResponse(fs *fencelock.Session, withID bool, leases []fencelock.GroupLease) SessionResponse {
	r := leaseResponse(fs.TTL(), fs.SafetyMargin(), leases)
	if withID {
		r.SessionID = ID(fs.ID())
	}
	return r
}

// leaseResponse is the timing of a session's answer: each part's lease, and
// lease_ms the shortest over the parts that hold something.
//
// A part's lease counts from the client's send, which came before the round
// began: a renewed part's deadline lies TTL − margin after that begin at
// least, and the lease, TTL − 2·margin, leaves a margin more for the
// client's clock rate against this replica's. A part not renewed promises
// nothing from this send: 0.
func leaseResponse(ttl, margin time.Duration, leases []fencelock.GroupLease) SessionResponse {
	full := (ttl - 2*margin).Milliseconds()
	r := SessionResponse{TimeoutMS: ttl.Milliseconds(), LeaseMS: full, Leases: map[string]int64{"": full}}
	if leases == nil {
		return r
	}
	clear(r.Leases)
	least, found := int64(0), false
	for _, l := range leases {
		var ms int64
		if l.Renewed {
			ms = full
		}
		r.Leases[l.Group] = ms
		if l.Holds && (!found || ms < least) {
			least, found = ms, true
		}
	}
	if !found { // the default part always counts; without it, nothing is promised
		least = r.Leases[""]
	}
	r.LeaseMS = least
	return r
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	b, err := body(r)
	if err != nil {
		writeError(w, err)
		return
	}
	req, err := DecodeCreateSession(b)
	if err != nil {
		writeError(w, err)
		return
	}
	// A session's name is who the operator sees holding a lock: the
	// client's own, else its address, which at least finds the machine.
	name := req.Name
	if name == "" {
		name = r.RemoteAddr
	}
	opts := []fencelock.SessionOption{fencelock.WithExternalKeepAlive(), fencelock.WithSessionName(name)}
	if req.TTL() > 0 {
		opts = append(opts, fencelock.WithTTL(req.TTL()))
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	fs, err := s.node.NewSession(ctx, opts...)
	if err != nil {
		writeError(w, err)
		return
	}
	secret, digest, err := newSecret()
	if err != nil {
		_ = fs.Close(ctx)
		writeError(w, err)
		return
	}
	hs := &session{s: fs, digest: digest, locks: map[string]*wait{}, elections: map[string]*wait{}}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = fs.Close(ctx)
		writeError(w, fencelock.ErrClosed)
		return
	}
	s.sessions[ID(fs.ID())] = hs
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		// Forget the session once it ends, however it ends.
		defer s.wg.Done()
		select {
		case <-fs.Done():
			s.drop(hs)
		case <-s.ctx.Done():
		}
	}()
	resp := sessionResponse(fs, true, nil)
	resp.SessionSecret = secret
	writeJSON(w, http.StatusCreated, resp)
}

// secretBytes is the size of a session secret: 256 bits from crypto/rand,
// more than the 128 anyone could guess at.
const secretBytes = 32

// newSecret makes a session secret, and the digest the session keeps of it
// (the replica keeps no copy of the secret itself).
func newSecret() (secret string, digest [sha256.Size]byte, err error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", digest, err
	}
	secret = base64.RawURLEncoding.EncodeToString(b[:])
	return secret, sha256.Sum256([]byte(secret)), nil
}

// checkSecret refuses a call that does not carry the session's secret,
// comparing digests in constant time so that timing tells nothing of it.
func (hs *session) checkSecret(r *http.Request) error {
	got := r.Header.Get(SecretHeader)
	if got == "" {
		return errForbidden("the session's secret is required: send its session_secret in the " + SecretHeader + " header")
	}
	d := sha256.Sum256([]byte(got))
	if subtle.ConstantTimeCompare(d[:], hs.digest[:]) != 1 {
		return errForbidden("wrong session secret (" + SecretHeader + ") for this session")
	}
	return nil
}

func (s *Server) drop(hs *session) {
	s.mu.Lock()
	if s.sessions[ID(hs.s.ID())] == hs {
		delete(s.sessions, ID(hs.s.ID()))
	}
	s.mu.Unlock()
	hs.cancelAll()
}

func (s *Server) sessionFromPath(w http.ResponseWriter, r *http.Request) (*session, bool) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	hs, fwd, err := s.lookup(w, r, id)
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return hs, !fwd
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request) {
	if _, err := body(r); err != nil { // any body is ignored, but bounded
		writeError(w, err)
		return
	}
	hs, ok := s.sessionFromPath(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	// A heartbeat answered OK promises its lease for every group where the
	// session holds something: KeepAliveGroups fails (503, naming the
	// groups) when one of them was not renewed, so no lease_ms outlasts a
	// part whose group may already be passing its locks on.
	leases, err := hs.s.KeepAliveGroups(ctx)
	if err != nil {
		if hs.s.Err() != nil {
			s.drop(hs)
		}
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionResponse(hs.s, false, leases))
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(SecretHeader) == "" {
		// guard let it through: the caller is an administrator.
		s.endSession(w, r)
		return
	}
	if r.URL.Query().Has("group") {
		writeError(w, newError(http.StatusBadRequest, CodeBadRequest,
			"?group= ends one part of a session, an administrator's call (no "+SecretHeader+"); with the secret, DELETE ends the whole session"))
		return
	}
	hs, ok := s.sessionFromPath(w, r)
	if !ok {
		return
	}
	hs.cancelAll()
	ctx, cancel := s.callCtx(r)
	defer cancel()
	err := hs.s.Close(ctx)
	s.drop(hs)
	if err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// endSession ends any session at the group, without its secret, as an
// expiry would (Node.EndSession: a lock-delay applies, for its holder did
// not choose to stop). Any replica can: the owner need not be up. With
// ?group= it ends the session with that ID in that group
// (Node.EndSessionIn): one part of a session, whose other parts live on.
func (s *Server) endSession(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	group := r.URL.Query().Get("group")
	ctx, cancel := s.callCtx(r)
	defer cancel()
	if err := s.node.EndSessionIn(ctx, group, uint64(id)); err != nil {
		writeError(w, err)
		return
	}
	if group == "" {
		s.mu.Lock()
		hs := s.sessions[id]
		s.mu.Unlock()
		if hs != nil {
			s.drop(hs)
		}
	}
	s.log.Info("httpapi: session ended by an administrator", "session", uint64(id), "group", group)
	w.WriteHeader(http.StatusNoContent)
}

// SessionJSON describes a session in GET /v1/sessions.
type SessionJSON struct {
	SessionID ID     `json:"session_id"`
	Name      string `json:"name"`
	Owner     int64  `json:"owner"`
	TimeoutMS int64  `json:"timeout_ms"`
	Held      int    `json:"held"`
	Waiting   int    `json:"waiting"`
}

// SessionList answers GET /v1/sessions.
type SessionList struct {
	// Group is the group listed (?group=; "" is the default group, whose
	// IDs are the session_ids of the API). In a named group each entry is
	// a session's part there, under its ID in that group.
	Group    string        `json:"group"`
	Sessions []SessionJSON `json:"sessions"`
	More     bool          `json:"more"`
	// Next is the "after" of the next page, when More.
	Next string `json:"next,omitempty"`
}

func pageLimit(r *http.Request) (int, error) {
	q := r.URL.Query().Get("limit")
	if q == "" {
		return fencelock.DefaultListLimit, nil
	}
	n, err := strconv.Atoi(q)
	if err != nil || n < 1 || n > fencelock.MaxListLimit {
		return 0, newError(http.StatusBadRequest, CodeBadRequest, "limit must be 1 to "+strconv.Itoa(fencelock.MaxListLimit))
	}
	return n, nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	limit, err := pageLimit(r)
	if err != nil {
		writeError(w, err)
		return
	}
	opts := []fencelock.ListOption{fencelock.ListLimit(limit)}
	if a := r.URL.Query().Get("after"); a != "" {
		id, err := parseID(a)
		if err != nil {
			writeError(w, err)
			return
		}
		opts = append(opts, fencelock.ListAfterSession(uint64(id)))
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	page, err := s.node.SessionsIn(ctx, r.URL.Query().Get("group"), opts...)
	if err != nil {
		writeError(w, err)
		return
	}
	out := SessionList{Group: page.Group, Sessions: []SessionJSON{}, More: page.More}
	for _, si := range page.Sessions {
		out.Sessions = append(out.Sessions, SessionJSON{SessionID: ID(si.ID), Name: si.Name, Owner: int64(si.Owner),
			TimeoutMS: si.TTL.Milliseconds(), Held: si.Held, Waiting: si.Waiting})
	}
	if page.More && len(page.Sessions) > 0 {
		out.Next = ID(page.Sessions[len(page.Sessions)-1].ID).String()
	}
	writeJSON(w, http.StatusOK, out)
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
