package httpapi

import (
	"log/slog"
	"net/http"
	"net/url"
	"time"
)

// Option configures a Server.
type Option func(*Server)

// WithPeers gives the HTTP base URLs of the other replicas by replica ID
// ("http://10.0.0.2:7080"), so that calls for sessions they serve are
// forwarded to them. Without a URL for a session's replica, or when it
// does not answer within a twentieth of the session's TTL (a quarter of
// its safety margin: a hung replica is a dead one), this replica adopts
// the session instead (see the package doc): forwarding is never needed
// for a call to succeed.
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

// WithLoopbackAdmin gives a call from this machine (a loopback client
// address) every right, the admin right included, while the Server has no
// tokens (WithACL with a nil or empty ACL): a deployment on one machine for
// development or a walkthrough (`fencelock serve --dev`) can run the admin
// commands without a tokens file. Any other client keeps the rule of a
// Server without tokens (every right but admin). Never use it where a proxy
// on the same host forwards other machines' calls: they arrive from
// loopback too. A Server with tokens ignores it.
func WithLoopbackAdmin() Option { return func(s *Server) { s.loopbackAdmin = true } }
