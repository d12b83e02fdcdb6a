package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servicehook"
	"github.com/fencelock/fencelock/lockapi"
)

// session is an HTTP session this replica serves, with the acquires and
// campaigns it made here, one per lock or election name: a second acquire
// of the same lock by the same session reports the first's state and never
// queues again.
type session struct {
	s *fencelock.Session
	// digest is the SHA-256 of the session's secret, compared with the
	// digest of each call's secret. Only this replica's memory holds it,
	// never the group's log: the group keeps the nonces, other digests.
	digest [sha256.Size]byte

	mu        sync.Mutex
	locks     map[string]*wait
	elections map[string]*wait
}

func newSession(fs *fencelock.Session, digest [sha256.Size]byte) *session {
	return &session{s: fs, digest: digest, locks: map[string]*wait{}, elections: map[string]*wait{}}
}

// heldLock returns the session's grant of lock name, if it holds it: one
// kept by an adoption has no wait here, and a re-issued acquire answers it
// rather than queue behind its own session.
func (hs *session) heldLock(name string) *fencelock.Lock {
	for _, l := range hs.s.Locks() {
		if l.Name() == name {
			return l
		}
	}
	return nil
}

// heldTerm returns the session's term of election name, if it leads it.
func (hs *session) heldTerm(name string) *fencelock.Leadership {
	for _, l := range hs.s.Leaderships() {
		if l.Election() == name {
			return l
		}
	}
	return nil
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

// sessionNonces returns the nonce each part of the session with secret
// opens with in its group: the first 8 bytes of a SHA-256 over a digest of
// the secret and the group's name. The group keeps the nonce, and its
// resume accepts only the same one, so a replica checks a caller's secret
// against the group by deriving it again; the nonce gives nothing back of
// the secret, and one group's tells nothing of another's. The closure keeps
// only the digest.
func sessionNonces(secret string) func(group string) uint64 {
	key := sha256.Sum256([]byte("fencelock-session-key\x00" + secret))
	return func(group string) uint64 {
		h := sha256.New()
		h.Write([]byte("fencelock-session-nonce\x00"))
		h.Write(key[:])
		h.Write([]byte(group))
		var sum [sha256.Size]byte
		return binary.LittleEndian.Uint64(h.Sum(sum[:0])[:8]) | 1 // never 0
	}
}

// errSecretRequired refuses a session's call without its secret.
var errSecretRequired = errForbidden("the session's secret is required: send its session_secret in the " + SecretHeader + " header")

// errWrongSecret refuses a session's call with another secret.
var errWrongSecret = errForbidden("wrong session secret (" + SecretHeader + ") for this session")

// checkSecret refuses a call that does not carry the session's secret,
// comparing digests in constant time so that timing tells nothing of it.
func (hs *session) checkSecret(r *http.Request) error {
	got := r.Header.Get(SecretHeader)
	if got == "" {
		return errSecretRequired
	}
	d := sha256.Sum256([]byte(got))
	if subtle.ConstantTimeCompare(d[:], hs.digest[:]) != 1 {
		return errWrongSecret
	}
	return nil
}

// keep makes hs one of the sessions this replica serves, until it ends
// here, however it ends (expired, closed, or taken over by another
// replica: its next command fails).
func (s *Server) keep(hs *session) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fencelock.ErrClosed
	}
	id := ID(hs.s.ID())
	old := s.sessions[id]
	s.sessions[id] = hs
	s.wg.Add(1)
	s.mu.Unlock()
	if old != nil && old != hs {
		old.cancelAll()
	}
	go func() {
		defer s.wg.Done()
		select {
		case <-hs.s.Done():
			s.drop(hs)
		case <-s.ctx.Done():
		}
	}()
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

// --- sessions ---

// SessionResponse answers POST /v1/sessions and heartbeats.
// It is lockapi.SessionResponse, which the Go client decodes too.
type SessionResponse = lockapi.SessionResponse

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
	req, ok := decodeBody(w, r, nil, DecodeCreateSession)
	if !ok {
		return
	}
	secret, digest, err := newSecret()
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
	// Its parts open with nonces derived from the secret, so that any
	// replica the client calls with it can adopt the session.
	opts := []fencelock.SessionOption{fencelock.WithExternalKeepAlive(), fencelock.WithSessionName(name),
		servicehook.DerivedNonces(sessionNonces(secret)).(fencelock.SessionOption)}
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
	if err := s.keep(newSession(fs, digest)); err != nil {
		_ = fs.Close(ctx)
		writeError(w, err)
		return
	}
	resp := sessionResponse(fs, true, nil)
	resp.SessionSecret = secret
	writeJSON(w, http.StatusCreated, resp)
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
	// part whose group may already be passing its locks on. A copy taken
	// over by another replica renews nothing: its keep-alive is refused.
	leases, err := hs.s.KeepAliveGroups(ctx)
	if err != nil {
		if s.retryLost(w, r, hs, err, s.heartbeat, leases...) {
			return
		}
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
	if err == nil && r.Context().Value(retriedKey{}) == nil && s.sessionOpen(ctx, "", hs.s.ID()) {
		// This copy had been taken over by another replica (its close was
		// refused there): close the session where it lives.
		err = fencelock.ErrSessionExpired
	}
	if s.retryLost(w, r, hs, err, s.deleteSession) {
		return
	}
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
// It is lockapi.SessionJSON, which the Go client decodes too.
type SessionJSON = lockapi.SessionJSON

// SessionList answers GET /v1/sessions.
type SessionList struct {
	// Group is the group listed (?group=; "" is the default group, whose
	// IDs are the session_ids of the API). In a named group each entry is
	// a session's part there: its session_id is the session's (0 for a
	// part opened before the group wrote log version 10), its part_id the
	// part's ID in that group.
	Group    string        `json:"group"`
	Sessions []SessionJSON `json:"sessions"`
	More     bool          `json:"more"`
	// Next is the "after" of the next page, when More: the last entry's
	// part_id in a named group, its session_id in the default group.
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

// pageByName is the page of a listing in name order (GET /v1/locks and
// /v1/elections): ?limit (pageLimit) and ?after, the last name of the
// page before.
func pageByName(r *http.Request) ([]fencelock.ListOption, error) {
	limit, err := pageLimit(r)
	if err != nil {
		return nil, err
	}
	opts := []fencelock.ListOption{fencelock.ListLimit(limit)}
	if a := r.URL.Query().Get("after"); a != "" {
		opts = append(opts, fencelock.ListAfter(a))
	}
	return opts, nil
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
		out.Sessions = append(out.Sessions, SessionJSON{SessionID: ID(si.ID), PartID: partID(page.Group != "", si.PartID), Name: si.Name, Owner: int64(si.Owner),
			TimeoutMS: si.TTL.Milliseconds(), Held: si.Held, Waiting: si.Waiting})
	}
	if page.More && len(page.Sessions) > 0 {
		out.Next = ID(page.Sessions[len(page.Sessions)-1].PartID).String()
	}
	writeJSON(w, http.StatusOK, out)
}
