package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/seeded"
	"github.com/fencelock/fencelock/internal/servicehook"
)

// The calls that ask for a grant (acquire, campaign) and that end one
// (release, resign) are one handler each, request and finish: a lock and
// an election differ only in the calls they make and the answers they
// write (grantCall, endCall).

// wait is one Acquire or Campaign made for a session: in flight (the server
// waits in the queue on the client's behalf), granted, or failed.
type wait struct {
	cancel context.CancelFunc
	queued chan struct{} // closed when the group queued the request
	// position is the request's place in the queue (1: next), as this
	// replica last applied it; 0 before it queued.
	position atomic.Int64
	done     chan struct{} // closed when the call returned; then:
	lock     *fencelock.Lock
	lead     *fencelock.Leadership
	err      error
	// mode is the lock mode the call asked for (a grant kept by an
	// adoption: the mode it has); a re-issued acquire must name it.
	mode lockMode
}

// lockMode is an acquire's mode: exclusive (the zero value), shared, or a
// semaphore's permit (permits > 0, shared).
type lockMode struct {
	shared  bool
	permits int
}

// take makes the Session call that takes name in mode m (its Try form
// with try): the one call an acquire's try and start differ in.
func (m lockMode) take(ctx context.Context, s *fencelock.Session, name string, try bool, opts ...fencelock.AcquireOption) (*fencelock.Lock, error) {
	switch {
	case m.permits > 0 && try:
		return s.TryAcquireSemaphore(ctx, name, m.permits, opts...)
	case m.permits > 0:
		return s.AcquireSemaphore(ctx, name, m.permits, opts...)
	case m.shared && try:
		return s.TryAcquireShared(ctx, name, opts...)
	case m.shared:
		return s.AcquireShared(ctx, name, opts...)
	case try:
		return s.TryAcquire(ctx, name, opts...)
	default:
		return s.Acquire(ctx, name, opts...)
	}
}

func (m lockMode) String() string {
	switch {
	case m.permits > 0:
		return "a semaphore of " + strconv.Itoa(m.permits) + " permits"
	case m.shared:
		return "shared"
	}
	return "exclusive"
}

// modeOf is the mode of a grant of a lock.
func modeOf(l *fencelock.Lock) lockMode {
	if l == nil || !l.Shared() {
		return lockMode{}
	}
	return lockMode{shared: true, permits: l.Permits()}
}

func (wt *wait) isDone() bool {
	select {
	case <-wt.done:
		return true
	default:
		return false
	}
}

// over reports a wait whose call failed or whose grant ended: a new acquire
// starts afresh.
func (wt *wait) over() bool {
	if !wt.isDone() {
		return false
	}
	switch {
	case wt.lock != nil:
		return wt.lock.Err() != nil
	case wt.lead != nil:
		return wt.lead.Err() != nil
	}
	return true
}

// holds reports whether the session holds lock name (with election, leads
// election name).
func (hs *session) holds(name string, election bool) bool {
	if election {
		for _, l := range hs.s.Leaderships() {
			if l.Election() == name {
				return true
			}
		}
		return false
	}
	for _, l := range hs.s.Locks() {
		if l.Name() == name {
			return true
		}
	}
	return false
}

func (hs *session) cancelAll() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, wt := range hs.locks {
		wt.cancel()
	}
	for _, wt := range hs.elections {
		wt.cancel()
	}
}

// grantedWait is the wait of a call that returned at once.
func grantedWait(l *fencelock.Lock, lead *fencelock.Leadership) *wait {
	wt := &wait{cancel: func() {}, queued: make(chan struct{}), done: make(chan struct{}), lock: l, lead: lead, mode: modeOf(l)}
	close(wt.done)
	return wt
}

// startWait runs call in the background, on the server's context, so that
// it waits in the queue after the HTTP request that asked for it returned;
// call passes the option it is given, which keeps the wait's queue position.
// The call's span (see fencelock.Config.TracerProvider) is a child of the
// trace span of req, the context of the request that started it (from its
// traceparent header), though it outlives it. hs.mu is held.
func (s *Server) startWait(req context.Context, mode lockMode, call func(ctx context.Context, position fencelock.AcquireOption) (*fencelock.Lock, *fencelock.Leadership, error)) (*wait, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fencelock.ErrClosed
	}
	ctx, cancel := context.WithCancel(s.ctx)
	if sc := trace.SpanContextFromContext(req); sc.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	wt := &wait{cancel: cancel, queued: make(chan struct{}), done: make(chan struct{}), mode: mode}
	position := fencelock.WithQueuePosition(func(p int) {
		if wt.position.Swap(int64(p)) == 0 {
			close(wt.queued)
		}
	})
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		wt.lock, wt.lead, wt.err = call(ctx, position)
		close(wt.done)
	}()
	return wt, nil
}

// awaitQueued waits until the call wt makes for a session on lock name
// (with election, election name) is queued or has returned, and reports its
// place in the queue: 0 if it returned with a grant. A call that failed is
// forgotten from the session's waits, and its error returned, as is ctx's
// if it ends first (the request then stays in flight at the group, and a
// later call reports its state).
func awaitQueued(ctx context.Context, hs *session, election bool, name string, wt *wait) (pos int, err error) {
	select {
	case <-wt.queued:
	case <-wt.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	pos = int(wt.position.Load())
	if !wt.isDone() && hs.holds(name, election) {
		// The session holds it already (the grant was applied here, and
		// what a client learns it from, a watch or observe stream, is
		// written after): the call returns at once; answer with its grant
		// rather than with the place it had.
		select {
		case <-wt.done:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	if !wt.isDone() { // still waiting
		return pos, nil
	}
	if wt.err != nil {
		hs.mu.Lock()
		table := hs.locks
		if election {
			table = hs.elections
		}
		if table[name] == wt {
			delete(table, name)
		}
		hs.mu.Unlock()
		return 0, wt.err
	}
	return 0, nil
}

// withdraw takes a session's waiting request out of its queue (ctx ends the
// Acquire or Campaign, which withdraws it and gives back a grant that raced
// ahead), and answers once it has. A session adopted here may have a
// request with no call here: one its earlier replica queued, which the
// adoption kept, and which its client withdraws without re-issuing its
// call first; it is cancelled by its own number (servicehook.WithdrawKept).
// It answers nothing, and returns false, when the copy here shows no request
// to withdraw: only the group may say there is none (queuedGone).
func (s *Server) withdraw(w http.ResponseWriter, ctx context.Context, hs *session, m map[string]*wait, name string, election bool, wt *wait) (answered bool) {
	if wt == nil || wt.isDone() {
		if servicehook.WithdrawKept(hs.s, name, election) > 0 {
			writeJSON(w, http.StatusOK, ReleaseResponse{Withdrawn: true})
			return true
		}
		return false
	}
	wt.cancel()
	select {
	case <-wt.done:
	case <-ctx.Done():
		writeError(w, ctx.Err())
		return true
	}
	hs.mu.Lock()
	if m[name] == wt {
		delete(m, name)
	}
	hs.mu.Unlock()
	writeJSON(w, http.StatusOK, ReleaseResponse{Withdrawn: true})
	return true
}

// table returns the session's waits for locks, or with election for
// elections. hs.mu is held.
func (hs *session) table(election bool) map[string]*wait {
	if election {
		return hs.elections
	}
	return hs.locks
}

// held returns the session's grant of lock (with election, term of
// election) name as a granted wait, if it holds one: a grant kept by an
// adoption has no call here.
func (hs *session) held(name string, election bool) *wait {
	if election {
		if l := hs.heldTerm(name); l != nil {
			return grantedWait(nil, l)
		}
		return nil
	}
	if l := hs.heldLock(name); l != nil {
		return grantedWait(l, nil)
	}
	return nil
}

// grantCall is what an acquire and a campaign differ in.
type grantCall struct {
	election bool
	wait     bool // the client's "wait": queue, rather than try once
	// mode is an acquire's lock mode: the session's call (or grant) for
	// the name must have it, else the answer is permit_conflict.
	mode lockMode
	// try asks once; taken is its error when another holds the grant, and
	// refused the answer then.
	try     func(ctx context.Context) (*fencelock.Lock, *fencelock.Leadership, error)
	taken   error
	refused any
	// start waits in the queue, on the Server's context (startWait).
	start func(ctx context.Context, position fencelock.AcquireOption) (*fencelock.Lock, *fencelock.Leadership, error)
	// granted and queued are the answers with a grant, and with a place.
	granted func(wt *wait) any
	queued  func(pos int) any
}

// request asks for lock or election name for session hs, once per name: a
// call the session made already (in flight, queued or granted) is reported
// rather than made again, and so is a grant the session holds without a
// call here (one kept when this replica adopted the session): a re-issued
// acquire or campaign answers the grant it already has, and never queues
// behind its own session. self is the handler, for retryLost.
func (s *Server) request(w http.ResponseWriter, r *http.Request, hs *session, name string, c grantCall, self http.HandlerFunc) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	hs.mu.Lock()
	table := hs.table(c.election)
	wt := table[name]
	if wt != nil && wt.over() {
		delete(table, name)
		wt = nil
	}
	if wt == nil {
		if wt = hs.held(name, c.election); wt != nil {
			table[name] = wt
		}
	}
	if wt != nil && !c.election && wt.mode != c.mode {
		hs.mu.Unlock()
		writeError(w, newError(http.StatusConflict, CodePermitConflict, "the session's request for "+name+" is "+
			wt.mode.String()+", not "+c.mode.String()+": release or withdraw it first"))
		return
	}
	if wt == nil && !c.wait {
		// Held under hs.mu: a concurrent call for the same name by the
		// same session waits for this one and then sees its grant.
		l, lead, err := c.try(ctx)
		if err == nil {
			wt = grantedWait(l, lead)
			table[name] = wt
		}
		hs.mu.Unlock()
		switch {
		case errors.Is(err, c.taken):
			writeJSON(w, http.StatusOK, c.refused)
		case s.retryLost(w, r, hs, err, self):
		case err != nil:
			writeError(w, err)
		default:
			writeJSON(w, http.StatusOK, c.granted(wt))
		}
		return
	}
	fresh := false // the call this request made: its grant answers it
	if wt == nil {
		var err error
		if wt, err = s.startWait(r.Context(), c.mode, c.start); err != nil {
			hs.mu.Unlock()
			writeError(w, err)
			return
		}
		table[name] = wt
		fresh = true
	}
	hs.mu.Unlock()
	if !fresh && c.wait && r.Header.Get(forwardedHeader) == "" {
		holdReask(ctx, wt, reaskHold(hs.s.TTL(), s.timeout))
	}
	pos, err := awaitQueued(ctx, hs, c.election, name, wt)
	if err == nil && pos == 0 && (!fresh || wt.position.Load() != 0) && !seeded.On(seeded.GrantFromLocalState) {
		// The grant is not this call's command's result: an earlier
		// call's, one an adoption kept, or one passed on while queued, as
		// this replica applied it. Its copy of the session may be stale (a
		// replica frozen while another adopted the session) or behind the
		// group: the answer is written only once the group shows it.
		var again bool
		if again, err = s.retryBehind(w, r, hs, s.backed(ctx, hs, name, c.election, wt), self); again {
			return
		}
	}
	switch {
	case s.retryLost(w, r, hs, err, self):
	case err != nil:
		writeError(w, err)
	case pos == 0:
		writeJSON(w, http.StatusOK, c.granted(wt))
	default:
		writeJSON(w, http.StatusOK, c.queued(pos))
	}
}

// reaskHold bounds how long a re-issued waiting acquire or campaign is
// held for its grant (holdReask): a fortieth of the session's TTL (250ms
// for a 10s TTL), at most a quarter of the call's timeout (2.5s of the
// default 10s), so that the answer comes well within a client's share of
// a call's time per endpoint and never as the call's timeout. A re-ask
// forwarded from
// another replica is not held: that replica waits only forwardWait for
// the owner's answer before it adopts the session, and a hold plus the
// grant's backing reads could outlast it.
func reaskHold(ttl, timeout time.Duration) time.Duration {
	return min(ttl/40, timeout/4)
}

// holdReask waits, for at most d, until the call of a re-issued waiting
// acquire or campaign returns (granted or failed), or ctx ends: a long
// poll. A client that polls its queued request (the Go client waits 20ms
// after an answer that shows a new place, doubling to 500ms while none
// does) then learns of its grant when this replica applies it, not at
// its next poll, and a hot lock is not left granted to a waiter that has
// not heard yet. The answer after the hold is as without it: the state of
// the call, its grant backed by the group's reads.
func holdReask(ctx context.Context, wt *wait, d time.Duration) {
	if d <= 0 || wt.isDone() {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wt.done:
	case <-t.C:
	case <-ctx.Done():
	}
}

// errNotBacked: the group does not show a grant this replica's copy of
// the session holds (see backed).
var errNotBacked = errors.New("httpapi: the group does not show the grant")

// backed checks, by linearizable reads, that the group shows the grant wt
// holds for session hs: a current grant of lock (with election, the term of
// election) name to the session's part in name's group, with wt's token,
// and this replica as the owner of that part and, in a named group, of the
// session. Otherwise it fails with errNotBacked: the copy here was taken
// over by another replica (which may have released the grant, and another
// session taken it since), or the grant ended and this replica has not yet
// heard of it. A failed read fails with its error. Either way no "granted"
// may be answered from wt.
func (s *Server) backed(ctx context.Context, hs *session, name string, election bool, wt *wait) error {
	group := groupOf(name)
	part, ok := hs.s.IDIn(group)
	if !ok || wt.token() == 0 {
		return errNotBacked
	}
	self := s.node.Status().ReplicaID
	if election {
		l, err := s.node.Leader(ctx, name)
		if err != nil {
			return err
		}
		if l.PartID != part || l.Token != wt.token() {
			return errNotBacked
		}
		if err := s.owns(ctx, group, part, self); err != nil {
			return err
		}
	} else {
		info, err := s.node.Inspect(ctx, name)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(info.Holders, func(h fencelock.Holder) bool {
			return h.PartID == part && h.Token == wt.token() && h.Owner == self
		})
		if i < 0 {
			return errNotBacked
		}
	}
	if group != "" {
		return s.owns(ctx, "", hs.s.ID(), self)
	}
	return nil
}

// retryBehind drops this replica's copy of session hs when err says it is
// behind the group (errNotBacked) and makes the call again once, on the
// session adopted afresh: again true, the call is answered. The re-run
// itself gets an ErrUnavailable to answer instead; any other err is
// returned as it is.
func (s *Server) retryBehind(w http.ResponseWriter, r *http.Request, hs *session, err error, self http.HandlerFunc) (again bool, _ error) {
	if !errors.Is(err, errNotBacked) {
		return false, err
	}
	servicehook.Abandon(hs.s)
	s.drop(hs)
	if r.Context().Value(retriedKey{}) == nil {
		self(w, r.WithContext(context.WithValue(r.Context(), retriedKey{}, true)))
		return true, nil
	}
	return false, fmt.Errorf("%w: this replica's copy of the session was behind the group; call again", fencelock.ErrUnavailable)
}

// answerGone answers a release or withdrawal that this replica's copy of
// session hs cannot match: gone (from grantGone or queuedGone) nil is the
// group's word, and stale is answered; errNotBacked means the copy is
// behind the group, so it is dropped and the call made again once, on the
// session adopted afresh; any other error (a failed read) is answered.
func (s *Server) answerGone(w http.ResponseWriter, r *http.Request, hs *session, gone, stale error, self http.HandlerFunc) {
	again, gone := s.retryBehind(w, r, hs, gone, self)
	if again {
		return
	}
	if gone != nil {
		writeError(w, gone)
		return
	}
	writeError(w, stale)
}

// queuedGone checks, by a linearizable read, that the group shows no
// queued request of session hs for lock (with election, election) name;
// errNotBacked if it shows one or cannot list every request, or the read's
// error.
func (s *Server) queuedGone(ctx context.Context, hs *session, name string, election bool) error {
	mine := func(session uint64) bool { return session == hs.s.ID() || session == 0 }
	if election {
		cs, err := s.node.Candidates(ctx, name, fencelock.ListLimit(fencelock.MaxListLimit))
		if err != nil {
			return err
		}
		if cs.Total > len(cs.Queue) || slices.ContainsFunc(cs.Queue, func(c fencelock.Candidate) bool { return mine(c.SessionID) }) {
			return errNotBacked
		}
		return nil
	}
	info, err := s.node.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if info.Waiters > len(info.Waiting) || slices.ContainsFunc(info.Waiting, func(w fencelock.Waiter) bool { return mine(w.SessionID) }) {
		return errNotBacked
	}
	return nil
}

// grantGone checks, by a linearizable read, that the group shows no grant
// of lock (with election, term of election) name with token to session hs;
// errNotBacked if it shows one (the copy here is behind the group), or the
// read's error.
func (s *Server) grantGone(ctx context.Context, hs *session, name string, election bool, token uint64) error {
	if token == 0 {
		return nil
	}
	mine := func(session uint64) bool { return session == hs.s.ID() || session == 0 }
	if election {
		l, err := s.node.Leader(ctx, name)
		if errors.Is(err, fencelock.ErrNoLeader) {
			return nil // no term at all: none of the session's
		}
		if err != nil {
			return err
		}
		if l.Token == token && mine(l.SessionID) {
			return errNotBacked
		}
		return nil
	}
	info, err := s.node.Inspect(ctx, name)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(info.Holders, func(h fencelock.Holder) bool { return h.Token == token && mine(h.SessionID) }) {
		return errNotBacked
	}
	return nil
}

// owns checks, by a linearizable read of group, that its session (or
// part) id lives on replica self; errNotBacked if not.
func (s *Server) owns(ctx context.Context, group string, id, self uint64) error {
	page, err := s.node.SessionsIn(ctx, group, fencelock.ListAfterSession(id-1), fencelock.ListLimit(1))
	if err != nil {
		return err
	}
	if len(page.Sessions) == 0 || page.Sessions[0].PartID != id || page.Sessions[0].Owner != self {
		return errNotBacked
	}
	return nil
}

// endCall is what a release and a resign differ in.
type endCall struct {
	election bool
	token    ID    // the grant's; 0 withdraws the session's queued request
	notHeld  error // end's error for a grant already over: forgotten too
	// stale makes the answer when token is not the session's grant: a
	// func of no captures, so that a release that ends its grant, the
	// common case, makes no error it does not answer.
	stale  func(token ID) error
	end    func(ctx context.Context, wt *wait) error
	answer any
}

// finish ends the session's grant of name with c.token (one made here, or
// kept by an adoption), or with token 0 withdraws its queued request.
func (s *Server) finish(w http.ResponseWriter, r *http.Request, hs *session, name string, c endCall, self http.HandlerFunc) {
	ctx, cancel := s.callCtx(r)
	defer cancel()
	hs.mu.Lock()
	table := hs.table(c.election)
	wt := table[name]
	hs.mu.Unlock()
	if c.token == 0 {
		if !s.withdraw(w, ctx, hs, table, name, c.election, wt) {
			s.answerGone(w, r, hs, s.queuedGone(ctx, hs, name, c.election), newError(http.StatusConflict, CodeStaleToken,
				"the session has no queued request for "+name+" to withdraw; to release a grant, send its token"), self)
		}
		return
	}
	if wt == nil || !wt.isDone() || wt.token() != uint64(c.token) {
		if wt = hs.held(name, c.election); wt == nil || wt.token() != uint64(c.token) {
			// The copy here does not show the grant; "stale" is answered
			// only once the group agrees: a copy frozen while another
			// replica adopted the session and granted it would otherwise
			// tell its client a held lock is gone, and the live session
			// would keep it for good.
			s.answerGone(w, r, hs, s.grantGone(ctx, hs, name, c.election, uint64(c.token)), c.stale(c.token), self)
			return
		}
	}
	err := c.end(ctx, wt)
	if err == nil || errors.Is(err, c.notHeld) || errors.Is(err, fencelock.ErrMaxHoldExceeded) {
		hs.mu.Lock()
		if table[name] == wt {
			delete(table, name)
		}
		hs.mu.Unlock()
	}
	if s.retryLost(w, r, hs, err, self) {
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c.answer)
}

// token is the fencing token (or epoch) of wt's grant; 0 without one.
func (wt *wait) token() uint64 {
	switch {
	case wt.lock != nil:
		return wt.lock.Token()
	case wt.lead != nil:
		return wt.lead.Token()
	}
	return 0
}
