package httpapi

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/fencelock/fencelock"
)

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
// A listing's names all start with the prefix's part before its "@group"
// (a named group's names carry "@group" at their end; a prefix without
// one lists every group's names that start with it): that part is what
// the token must cover.
func needListRead(p *principal, r *http.Request) error {
	prefix, _, _ := fencelock.SplitName(r.URL.Query().Get("prefix"))
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

// routeTable is every route the server answers, its public ones and the
// right each method needs (routes registers it; the package's tests hold
// openapi.yaml to it).
func (s *Server) routeTable() []*route {
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
	add("/v1/members/{id}/replace", false, hm{"POST": s.replaceMember}, am{"POST": needAdminAll})
	add("/v1/groups", false, hm{"GET": s.listGroups}, am{"GET": needAnyRead})
	add("/v1/groups/{name}", false, hm{"POST": s.createGroup, "DELETE": s.dropGroup}, am{"POST": needAdminGroups, "DELETE": needAdminGroups})
	add("/v1/groups/{name}/voters", false, hm{"PUT": s.setVoters}, am{"PUT": needAdminGroups})
	add("/v1/status", false, hm{"GET": s.status}, nil)
	add(SnapshotPath, false, hm{"GET": s.snapshot}, am{"GET": needBackup}) // snapshot.go
	add("/metrics", false, hm{"GET": s.metrics.ServeHTTP}, nil)
	add("/healthz", true, hm{"GET": s.healthz}, nil)
	add("/readyz", true, hm{"GET": s.readyz}, nil)
	add("/livez", true, hm{"GET": s.healthz}, nil)
	add("/{$}", true, hm{"GET": s.dashboard}, nil)
	add("/v1/openapi.yaml", true, hm{"GET": s.openapi}, nil) // openapi.go
	return rs
}

func (s *Server) routes() {
	for _, rt := range s.routeTable() {
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
			if acl == nil && s.loopbackAdmin && fromLoopback(r) {
				p = &loopbackPrincipal
			}
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
			r.Body = newHeldBody(b)
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

// loopbackPrincipal is a loopback client of a Server with
// WithLoopbackAdmin and no tokens: every right.
var loopbackPrincipal = principal{grants: allRights}

// fromLoopback reports whether r's client address is a loopback one.
func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
