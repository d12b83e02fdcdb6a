package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fencelock/fencelock"
)

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
	wt := &wait{cancel: func() {}, queued: make(chan struct{}), done: make(chan struct{}), lock: l, lead: lead}
	close(wt.done)
	return wt
}

// startWait runs call in the background, on the server's context, so that
// it waits in the queue after the HTTP request that asked for it returned;
// call passes the option it is given, which keeps the wait's queue position.
// The call's span (see fencelock.Config.TracerProvider) is a child of the
// trace span of req, the context of the request that started it (from its
// traceparent header), though it outlives it. hs.mu is held.
func (s *Server) startWait(req context.Context, call func(ctx context.Context, position fencelock.AcquireOption) (*fencelock.Lock, *fencelock.Leadership, error)) (*wait, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fencelock.ErrClosed
	}
	ctx, cancel := context.WithCancel(s.ctx)
	if sc := trace.SpanContextFromContext(req); sc.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, sc)
	}
	wt := &wait{cancel: cancel, queued: make(chan struct{}), done: make(chan struct{})}
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

// --- locks ---

// AcquireResponse answers an acquire.
type AcquireResponse struct {
	Granted      bool `json:"granted"`
	FencingToken ID   `json:"fencing_token,omitempty"`
	// Fence is the token with the group's ID, "GROUP:TOKEN" (fencelock.Fence).
	Fence string `json:"fence,omitempty"`
	// QueuePosition is 1 for the next in line; set while waiting.
	QueuePosition int `json:"queue_position,omitempty"`
	// HolderSession is the session's ID in the lock's group, with a grant
	// or a place in the queue: what the lock's views and watch events name
	// it by. It is session_id in the default group; in a named group
	// ("name@group") it is the ID of the session's part there.
	HolderSession ID `json:"holder_session,omitempty"`
}

// groupOf returns the group a lock or election name lives in: the part
// after its last '@'; "" (the default group) for a name without one.
func groupOf(name string) string {
	if i := strings.LastIndexByte(name, '@'); i >= 0 {
		return name[i+1:]
	}
	return ""
}

// holderSession is the ID hs goes by in name's group (AcquireResponse).
func holderSession(hs *session, name string) ID {
	id, _ := hs.s.IDIn(groupOf(name))
	return ID(id)
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	var req AcquireRequest
	name, hs, ok := s.sessionCall(w, r, func(b []byte) (ID, error) {
		var err error
		req, err = DecodeAcquire(b)
		return req.SessionID, err
	})
	if !ok {
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()

	hs.mu.Lock()
	wt := hs.locks[name]
	if wt != nil && wt.over() {
		delete(hs.locks, name)
		wt = nil
	}
	if wt == nil {
		// A lock the session holds with no call here was granted through
		// another replica and kept when this one adopted the session: the
		// client re-issues its acquire, and gets that grant back.
		if l := hs.heldLock(name); l != nil {
			wt = grantedWait(l, nil)
			hs.locks[name] = wt
		}
	}
	if wt == nil && !req.Wait {
		// Held under hs.mu: a concurrent acquire of the same lock by the
		// same session waits for this one and then sees its grant.
		l, err := hs.s.TryAcquire(ctx, name)
		if err == nil {
			hs.locks[name] = grantedWait(l, nil)
		}
		hs.mu.Unlock()
		switch {
		case errors.Is(err, fencelock.ErrLocked):
			writeJSON(w, http.StatusOK, AcquireResponse{Granted: false})
		case s.retryLost(w, r, hs, err, s.acquire):
		case err != nil:
			writeError(w, err)
		default:
			writeJSON(w, http.StatusOK, AcquireResponse{Granted: true, FencingToken: ID(l.Token()), Fence: l.Fence().String(),
				HolderSession: holderSession(hs, name)})
		}
		return
	}
	if wt == nil {
		var err error
		wt, err = s.startWait(r.Context(), func(ctx context.Context, position fencelock.AcquireOption) (*fencelock.Lock, *fencelock.Leadership, error) {
			l, err := hs.s.Acquire(ctx, name, position)
			return l, nil, err
		})
		if err != nil {
			hs.mu.Unlock()
			writeError(w, err)
			return
		}
		hs.locks[name] = wt
	}
	hs.mu.Unlock()
	pos, err := awaitQueued(ctx, hs, false, name, wt)
	switch {
	case s.retryLost(w, r, hs, err, s.acquire):
	case err != nil:
		writeError(w, err)
	case pos == 0:
		writeJSON(w, http.StatusOK, AcquireResponse{Granted: true, FencingToken: ID(wt.lock.Token()), Fence: wt.lock.Fence().String(),
			HolderSession: holderSession(hs, name)})
	default:
		writeJSON(w, http.StatusOK, AcquireResponse{Granted: false, QueuePosition: pos, HolderSession: holderSession(hs, name)})
	}
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

// ReleaseResponse answers a release.
type ReleaseResponse struct {
	Released  bool `json:"released,omitempty"`
	Withdrawn bool `json:"withdrawn,omitempty"`
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	var req ReleaseRequest
	name, hs, ok := s.sessionCall(w, r, func(b []byte) (ID, error) {
		var err error
		req, err = DecodeRelease(b)
		return req.SessionID, err
	})
	if !ok {
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	hs.mu.Lock()
	wt := hs.locks[name]
	hs.mu.Unlock()
	if req.FencingToken == 0 {
		s.withdraw(w, ctx, hs, hs.locks, name, wt)
		return
	}
	if wt == nil || !wt.isDone() || wt.lock == nil || wt.lock.Token() != uint64(req.FencingToken) {
		// A grant kept by an adoption has no call here.
		l := hs.heldLock(name)
		if l == nil || l.Token() != uint64(req.FencingToken) {
			writeError(w, newError(http.StatusConflict, CodeStaleToken,
				"fencing token "+req.FencingToken.String()+" is not the session's current grant of this lock"))
			return
		}
		wt = grantedWait(l, nil)
	}
	err := wt.lock.Release(ctx)
	if err == nil || errors.Is(err, fencelock.ErrNotHeld) {
		hs.mu.Lock()
		if hs.locks[name] == wt {
			delete(hs.locks, name)
		}
		hs.mu.Unlock()
	}
	if s.retryLost(w, r, hs, err, s.release) {
		return
	}
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ReleaseResponse{Released: true})
}

// withdraw takes a session's waiting request out of its queue (ctx ends the
// Acquire or Campaign, which withdraws it and gives back a grant that raced
// ahead), and answers once it has.
func (s *Server) withdraw(w http.ResponseWriter, ctx context.Context, hs *session, m map[string]*wait, name string, wt *wait) {
	if wt == nil || wt.isDone() {
		writeError(w, newError(http.StatusConflict, CodeStaleToken, "the session has no queued request for "+name+" to withdraw; to release a grant, send its token"))
		return
	}
	wt.cancel()
	select {
	case <-wt.done:
	case <-ctx.Done():
		writeError(w, ctx.Err())
		return
	}
	hs.mu.Lock()
	if m[name] == wt {
		delete(m, name)
	}
	hs.mu.Unlock()
	writeJSON(w, http.StatusOK, ReleaseResponse{Withdrawn: true})
}

// LockJSON describes a lock.
type LockJSON struct {
	Name          string `json:"name"`
	Held          bool   `json:"held"`
	HolderSession ID     `json:"holder_session,omitempty"` // the oldest holder's
	HolderName    string `json:"holder_name,omitempty"`    // its session's name
	// GrantedAt is when the oldest grant was made (RFC 3339, by the
	// proposing replica's clock), HeldForMS how long ago that was by this
	// replica's: both absent when free or unknown.
	GrantedAt    string `json:"granted_at,omitempty"`
	HeldForMS    int64  `json:"held_for_ms,omitempty"`
	FencingToken ID     `json:"fencing_token,omitempty"` // the oldest holder's
	Owner        uint64 `json:"owner,omitempty"`         // the replica the oldest holder's session lives on
	// Shared and Permits tell a shared lock's or a semaphore's holders
	// (taken in Go with AcquireShared, AcquireSemaphore); Holders lists
	// every current grant, oldest first.
	Shared  bool         `json:"shared,omitempty"`
	Permits int          `json:"permits,omitempty"`
	Holders []HolderJSON `json:"holders"`
	Waiters int          `json:"waiters"`
	// Queue is the waiting sessions, head first: all of them from GET
	// /v1/locks/{name}, the first 16 in a listing (Waiters counts them all).
	Queue []ID `json:"queue"`
	// Waiting is the same waiting requests with their sessions' names and
	// places.
	Waiting []WaiterJSON `json:"waiting"`
}

// HolderJSON is one current grant of a lock.
type HolderJSON struct {
	Session      ID     `json:"session_id"`
	Name         string `json:"name"` // the holder's session's name
	FencingToken ID     `json:"fencing_token"`
	Owner        uint64 `json:"owner"`
	GrantedAt    string `json:"granted_at,omitempty"`  // RFC 3339; absent: unknown
	HeldForMS    int64  `json:"held_for_ms,omitempty"` // by this replica's clock
}

// WaiterJSON is one waiting request of a lock.
type WaiterJSON struct {
	Session  ID     `json:"session_id"`
	Name     string `json:"name"`
	Place    int    `json:"place"` // 1: next
	Owner    uint64 `json:"owner"`
	Shared   bool   `json:"shared,omitempty"`
	QueuedAt string `json:"queued_at,omitempty"`
	// WaitedMS is how long it has waited, by this replica's clock.
	WaitedMS int64 `json:"waited_ms,omitempty"`
}

// stamp renders a time the group recorded, and how long ago it was: ""
// and 0 for an unknown one.
func stamp(t, now time.Time) (string, int64) {
	if t.IsZero() {
		return "", 0
	}
	return t.UTC().Format(time.RFC3339Nano), max(now.Sub(t), 0).Milliseconds()
}

func lockJSON(info fencelock.LockInfo) LockJSON {
	now := time.Now()
	out := LockJSON{Name: info.Name, Held: info.Held, HolderSession: ID(info.SessionID), FencingToken: ID(info.Token),
		Shared: info.Shared, Permits: info.Permits, Holders: []HolderJSON{}, Waiters: info.Waiters, Queue: []ID{},
		HolderName: info.SessionName, Waiting: []WaiterJSON{}}
	out.GrantedAt, out.HeldForMS = stamp(info.GrantedAt, now)
	for _, h := range info.Holders {
		hj := HolderJSON{Session: ID(h.SessionID), Name: h.Name, FencingToken: ID(h.Token), Owner: h.Owner}
		hj.GrantedAt, hj.HeldForMS = stamp(h.GrantedAt, now)
		out.Holders = append(out.Holders, hj)
	}
	for _, wt := range info.Waiting {
		wj := WaiterJSON{Session: ID(wt.SessionID), Name: wt.Name, Place: wt.Place, Owner: wt.Owner, Shared: wt.Shared}
		wj.QueuedAt, wj.WaitedMS = stamp(wt.QueuedAt, now)
		out.Waiting = append(out.Waiting, wj)
	}
	if len(info.Holders) > 0 {
		out.Owner = info.Holders[0].Owner
	}
	for _, q := range info.Queue {
		out.Queue = append(out.Queue, ID(q))
	}
	return out
}

func (s *Server) getLock(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := validName(name); err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	info, err := s.node.Inspect(ctx, name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, lockJSON(info))
}

// LockList answers GET /v1/locks.
type LockList struct {
	// Group is the group listed ("" is the default group): its session
	// IDs are IDs in that group.
	Group string     `json:"group"`
	Locks []LockJSON `json:"locks"`
	More  bool       `json:"more"`
	Next  string     `json:"next,omitempty"` // the "after" of the next page
}

func (s *Server) listLocks(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	switch q.Get("sort") {
	case "", "name":
	case "waiters":
		s.listContended(w, r)
		return
	default:
		writeError(w, newError(http.StatusBadRequest, CodeBadRequest, `sort must be "name" or "waiters"`))
		return
	}
	limit, err := pageLimit(r)
	if err != nil {
		writeError(w, err)
		return
	}
	opts := []fencelock.ListOption{fencelock.ListLimit(limit)}
	if a := q.Get("after"); a != "" {
		opts = append(opts, fencelock.ListAfter(a))
	}
	prefix, err := listPrefix(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	page, err := s.node.Locks(ctx, prefix, opts...)
	if err != nil {
		writeError(w, err)
		return
	}
	out := LockList{Group: page.Group, Locks: []LockJSON{}, More: page.More}
	for _, d := range page.Locks {
		out.Locks = append(out.Locks, lockJSON(d.LockInfo))
	}
	if page.More && len(page.Locks) > 0 {
		out.Next = page.Locks[len(page.Locks)-1].Name
	}
	writeJSON(w, http.StatusOK, out)
}

// listPrefix is the prefix GET /v1/locks lists: ?prefix, with ?group's
// "@group" added when it has none. A prefix naming one group and ?group
// another is a 400: a listing covers one group.
func listPrefix(r *http.Request) (string, error) {
	q := r.URL.Query()
	prefix, group := q.Get("prefix"), q.Get("group")
	if group == "" {
		return prefix, nil
	}
	if strings.IndexByte(prefix, '@') < 0 {
		return prefix + "@" + group, nil
	}
	if groupOf(prefix) != group {
		return "", newError(http.StatusBadRequest, CodeBadRequest,
			"prefix "+strconv.Quote(prefix)+" names group "+strconv.Quote(groupOf(prefix))+", group "+strconv.Quote(group))
	}
	return prefix, nil
}

// sessionOpen reports whether session id is still open in group; on a
// failed read it says yes (the event is then called a release).
func (s *Server) sessionOpen(ctx context.Context, group string, id uint64) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	page, err := s.node.SessionsIn(ctx, group, fencelock.ListAfterSession(id-1), fencelock.ListLimit(1))
	return err != nil || (len(page.Sessions) > 0 && page.Sessions[0].ID == id)
}

// endKey names one grant across the groups: tokens are per group, so two
// groups' grants may share one.
type endKey struct {
	group string
	token uint64
}

// endKind is how one grant ended, found once for all the streams that
// report it.
type endKind struct {
	done chan struct{}
	kind string
}

// grantEnd tells whether the grant with token ended by a release
// ("released") or because its session did ("expired"). Every watcher of the
// lock reports the same end: one read of the group answers them all, rather
// than one per watcher, which would make a release cost as many reads as
// the lock has watchers.
func (s *Server) grantEnd(ctx context.Context, group string, session, token uint64) string {
	key := endKey{group, token}
	s.mu.Lock()
	e := s.ends[key]
	if e == nil {
		e = &endKind{done: make(chan struct{}), kind: "released"}
		if len(s.ends) >= 4096 { // a bound: ends are reported within moments
			clear(s.ends)
		}
		s.ends[key] = e
		s.mu.Unlock()
		if !s.sessionOpen(ctx, group, session) {
			e.kind = "expired"
		}
		close(e.done)
		return e.kind
	}
	s.mu.Unlock()
	select {
	case <-e.done:
		return e.kind
	case <-ctx.Done():
		return "released"
	}
}

// LockEvent is the data of one watch event.
type LockEvent struct {
	LockJSON
	// Previous holder and token, for released and expired.
	PreviousSession ID `json:"previous_session,omitempty"`
	PreviousToken   ID `json:"previous_token,omitempty"`
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := validName(name); err != nil {
		writeError(w, err)
		return
	}
	st, ok := s.startStream(w, r)
	if !ok {
		return
	}
	defer st.stop()
	ch := s.node.Watch(st.ctx, name)
	var prev *fencelock.LockInfo
	for {
		info, ok := recv(st, ch)
		if !ok {
			return
		}
		if info.Err != nil {
			st.send("error", Error{Message: info.Err.Error(), Code: classify(info.Err).code})
			return
		}
		ev := LockEvent{LockJSON: lockJSON(info)}
		switch {
		case prev == nil:
			st.send("state", ev)
		case prev.Held && (!info.Held || info.Token != prev.Token):
			// The grant ended: by release, or by the end of its session.
			kind := s.grantEnd(st.ctx, groupOf(name), prev.SessionID, prev.Token)
			end := ev
			end.PreviousSession, end.PreviousToken = ID(prev.SessionID), ID(prev.Token)
			if info.Held { // passed on in the same step: the end, then the grant
				end.LockJSON = lockJSON(fencelock.LockInfo{Name: name, Waiters: info.Waiters})
			}
			st.send(kind, end)
			if info.Held {
				st.send("granted", ev)
			}
		case info.Held && !prev.Held:
			st.send("granted", ev)
		default:
			st.send("queue", ev)
		}
		prev = &info
	}
}

// listContended answers GET /v1/locks?sort=waiters: the limit (at most
// fencelock.MaxContended, default 10) locks of group (the query's "group";
// the default group without one) with the longest queues, longest first.
// It is one page: More is always false.
func (s *Server) listContended(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("after") != "" || q.Get("prefix") != "" {
		writeError(w, newError(http.StatusBadRequest, CodeBadRequest, "sort=waiters takes no prefix or after: it ranks every lock of the group"))
		return
	}
	limit := 10
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > fencelock.MaxContended {
			writeError(w, newError(http.StatusBadRequest, CodeBadRequest,
				"limit must be 1 to "+strconv.Itoa(fencelock.MaxContended)+" with sort=waiters"))
			return
		}
		limit = n
	}
	ctx, cancel := s.callCtx(r)
	defer cancel()
	locks, err := s.node.ContendedIn(ctx, q.Get("group"), limit)
	if err != nil {
		writeError(w, err)
		return
	}
	out := LockList{Locks: []LockJSON{}}
	for _, l := range locks {
		out.Locks = append(out.Locks, lockJSON(l))
	}
	writeJSON(w, http.StatusOK, out)
}
