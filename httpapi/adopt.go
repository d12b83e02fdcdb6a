package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servicehook"
)

// A session belongs to the group, not to the replica that created it. Its
// client's secret never leaves the client and this replica's memory: the
// group keeps only nonces derived from a digest of it (sessionNonces),
// which its resume checks. So any replica given the secret can take the
// session over (adopt it: fencelock's resume, in every group) with every
// grant and its token, and serve the call itself; no replica's stop,
// crash or restart loses a session whose client goes on calling another.
//
// A replica serves the sessions it holds a copy of (s.sessions). A call
// for another live session is forwarded to the replica the group names as
// its owner while that one answers, within forwardWait (so that a client
// spreading its calls over the replicas does not move its session at each
// call), and adopted here when it does not: a hung owner is a dead one.

// local returns this replica's copy of session id, if it has one.
func (s *Server) local(id ID) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[id]
}

// lookup finds the session a call names and checks the caller's secret.
// This replica's live copy serves it. Otherwise, if the session is open at
// the group: a call not forwarded already goes to the replica the group
// names as the session's owner, when that one is known (WithPeers) and
// answers within forwardWait (forwarded true: the response is written);
// failing that, this
// replica adopts the session, which checks the secret at the group. A
// session that is over, or never was, is errNoSession; a wrong secret is
// errWrongSecret, and adopts nothing.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, id ID) (hs *session, forwarded bool, err error) {
	if hs := s.local(id); hs != nil {
		if err := hs.checkSecret(r); err != nil {
			return nil, false, err
		}
		if hs.s.Err() == nil {
			return hs, false, nil
		}
		// Over here: expired, closed, or taken over by another replica,
		// which the group's record tells apart.
		s.drop(hs)
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	page, err := s.node.Sessions(ctx, fencelock.ListAfterSession(uint64(id)-1), fencelock.ListLimit(1))
	if err != nil {
		return nil, false, err
	}
	if len(page.Sessions) == 0 || page.Sessions[0].ID != uint64(id) {
		return nil, false, errNoSession
	}
	secret := r.Header.Get(SecretHeader)
	if secret == "" {
		return nil, false, errSecretRequired
	}
	owner := page.Sessions[0].Owner
	if owner != s.node.Status().ReplicaID && r.Header.Get(forwardedHeader) == "" {
		if peer := s.peers[owner]; peer != nil && s.forward(w, r, peer, forwardWait(page.Sessions[0].TTL)) {
			return nil, true, nil
		}
	}
	hs, err = s.adopt(ctx, r, id, secret)
	return hs, false, err
}

// errOwnerCannotServe makes forward give a call back when the owner
// answered that it cannot serve it (it is stopping, or runs a version
// that answers 421), or did not answer in time: this replica then adopts
// the session.
var errOwnerCannotServe = errors.New("httpapi: the owner cannot serve the call")

// forwardWait is how long a forwarded call waits for the owner's answer
// before this replica adopts the session instead: a quarter of the
// session's safety margin (TTL/5 for every session the API makes), 500ms
// for a 10s TTL. A hung owner (SIGSTOP, a stalled host) accepts the
// connection and never answers; the client gives each endpoint a share of
// a heartbeat's budget (half the lease, TTL/10 an endpoint for three), and
// this leaves the replica half of that share to adopt and answer, so the
// heartbeat is answered well before the lease runs out. An owner slower
// than this loses the session to this replica, which is always safe.
func forwardWait(ttl time.Duration) time.Duration { return ttl / 20 }

// forward proxies r to peer, the session's owner, and reports whether it
// answered: false, with nothing written, when it could not be reached,
// sent no answer within wait, or answered 503 or 421. Its headers go
// along, the bearer token and the session's secret among them: the owner
// checks both.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, peer *url.URL, wait time.Duration) bool {
	b, err := body(r)
	if err != nil {
		return false
	}
	// The bound is on the answer's arrival (its status line and headers),
	// which the transport cannot bound for a caller-given RoundTripper;
	// the body of an answer that came in time is copied to its end.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	late := time.AfterFunc(wait, cancel)
	failed := false
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(peer)
			pr.Out.Header.Set(forwardedHeader, strconv.FormatUint(s.node.Status().ReplicaID, 10))
		},
		Transport:     s.forwardRT,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if !late.Stop() {
				return errOwnerCannotServe // it came as the wait ran out: the body is cut off
			}
			if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusMisdirectedRequest {
				return errOwnerCannotServe
			}
			return nil
		},
		ErrorHandler: func(http.ResponseWriter, *http.Request, error) { failed = true },
	}
	p.ServeHTTP(w, r.WithContext(ctx))
	late.Stop()
	r.Body = io.NopCloser(bytes.NewReader(b)) // for this replica to serve it after all
	return !failed
}

// adopt takes session id over from the replica that held it, if secret is
// its own, and serves it from then on (see servicehook.Adopt): its locks
// and terms stay held with their tokens, its queued requests stay queued
// in their places (a re-issued call claims its own, and a withdraw with no
// call here finds it: see request and withdraw), and it is renewed at once.
// Adoptions of one session on this replica run one at a time, and one that
// finds the session adopted meanwhile uses that copy.
func (s *Server) adopt(ctx context.Context, r *http.Request, id ID, secret string) (*session, error) {
	unlock, err := s.lockAdoption(ctx, id)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if hs := s.local(id); hs != nil && hs.s.Err() == nil {
		return hs, hs.checkSecret(r)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fencelock.ErrClosed
	}
	v, err := servicehook.Adopt(ctx, s.node, uint64(id), sessionNonces(secret), fencelock.WithExternalKeepAlive())
	if errors.Is(err, fencelock.ErrSessionExpired) {
		// The group refuses a wrong nonce as it refuses a session that is
		// over, telling nothing: the record tells which it was.
		if s.sessionOpen(ctx, "", uint64(id)) {
			return nil, errWrongSecretElsewhere
		}
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	hs := newSession(v.(*fencelock.Session), sha256.Sum256([]byte(secret)))
	if err := s.keep(hs); err != nil {
		// This Server is closing, and its Node with it, which ends the
		// copy here without closing the session at the group: another
		// replica adopts it at its client's next call.
		return nil, err
	}
	s.log.Info("httpapi: session adopted from another replica", "session", uint64(id))
	return hs, nil
}

// errWrongSecretElsewhere refuses a call that a replica not serving the
// session could not adopt it for: the group refused the secret. A session
// made by a replica of a version before adoption has no nonces derived
// from its secret, and is refused alike: only its own replica serves it.
var errWrongSecretElsewhere = errForbidden("wrong session secret (" + SecretHeader + ") for this session" +
	" (or a session made by an older replica, which only that replica can serve)")

// lockAdoption makes this replica's adoptions of session id run one at a
// time; call the returned func when done.
func (s *Server) lockAdoption(ctx context.Context, id ID) (unlock func(), err error) {
	for {
		s.mu.Lock()
		ch := s.adopting[id]
		if ch == nil {
			ch = make(chan struct{})
			s.adopting[id] = ch
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.adopting, id)
				s.mu.Unlock()
				close(ch)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// retriedKey marks a call re-run after this replica's copy of its session
// was lost during it.
type retriedKey struct{}

// retryLost re-runs call h once, and reports that it did, when the call
// failed because this replica's copy of its session was lost during it:
// most often another replica took the session over (its client called
// there while this one seemed down), and the re-run finds it there,
// forwarding or adopting it back; a session that is over is then a plain
// 404. A copy whose default part lives but which lost a part in a named
// group (two replicas adopting at once can leave it to the other) is
// abandoned here, without closing anything at the groups, and the re-run
// adopts the session again, taking that part back with its grants. The
// bound of one re-run per call keeps two replicas from passing a session
// back and forth for ever.
func (s *Server) retryLost(w http.ResponseWriter, r *http.Request, hs *session, err error, h http.HandlerFunc, leases ...fencelock.GroupLease) bool {
	if err == nil || r.Context().Value(retriedKey{}) != nil {
		return false
	}
	if hs.s.Err() == nil {
		lost := errors.Is(err, fencelock.ErrSessionExpired)
		for _, l := range leases {
			lost = lost || (l.Group != "" && errors.Is(l.Err, fencelock.ErrSessionExpired))
		}
		if !lost {
			return false
		}
		servicehook.Abandon(hs.s)
	}
	s.drop(hs)
	h(w, r.WithContext(context.WithValue(r.Context(), retriedKey{}, true)))
	return true
}
