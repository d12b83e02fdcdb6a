package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/servicehook"
	"github.com/fencelock/fencelock/lockapi"
)

// --- locks ---

// AcquireResponse answers an acquire.
// It is lockapi.AcquireResponse, which the Go client decodes too.
type AcquireResponse = lockapi.AcquireResponse

// groupOf returns the group a lock or election name lives in
// (fencelock.SplitName): "" (the default group) for a name without '@'.
func groupOf(name string) string {
	_, group, _ := fencelock.SplitName(name)
	return group
}

// holderSession is the ID hs goes by in name's group (AcquireResponse).
func holderSession(hs *session, name string) ID {
	id, _ := hs.s.IDIn(groupOf(name))
	return ID(id)
}

func (s *Server) acquire(w http.ResponseWriter, r *http.Request) {
	arrived := servicehook.Now(s.node) // before the session's lookup, which may adopt it
	req, name, hs, ok := decodeCall(s, w, r, DecodeAcquire)
	if !ok {
		return
	}
	mode := lockMode{shared: req.Shared || req.Permits > 0, permits: req.Permits}
	var opts []fencelock.AcquireOption
	if req.MaxHoldMillis != 0 {
		opts = append(opts, fencelock.WithMaxHold(req.MaxHold()))
	}
	s.request(w, r, hs, name, grantCall{
		wait: req.Wait,
		mode: mode,
		try: func(ctx context.Context) (*fencelock.Lock, *fencelock.Leadership, error) {
			l, err := mode.take(ctx, hs.s, name, true, opts...)
			return l, nil, err
		},
		start: func(ctx context.Context, position fencelock.AcquireOption) (*fencelock.Lock, *fencelock.Leadership, error) {
			o := append(append([]fencelock.AcquireOption(nil), opts...), position)
			l, err := mode.take(ctx, hs.s, name, false, o...)
			return l, nil, err
		},
		taken:   fencelock.ErrLocked,
		refused: AcquireResponse{Granted: false},
		granted: func(wt *wait) any {
			return AcquireResponse{Granted: true, FencingToken: ID(wt.lock.Token()), Fence: wt.lock.Fence().String(),
				HolderSession: holderSession(hs, name), LeaseMS: grantLease(hs.s, wt.lock, arrived)}
		},
		queued: func(pos int) any {
			return AcquireResponse{Granted: false, QueuePosition: pos, HolderSession: holderSession(hs, name)}
		},
	}, s.acquire)
}

// ReleaseResponse answers a release.
type ReleaseResponse struct {
	Released  bool `json:"released,omitempty"`
	Withdrawn bool `json:"withdrawn,omitempty"`
}

func (s *Server) release(w http.ResponseWriter, r *http.Request) {
	req, name, hs, ok := decodeCall(s, w, r, DecodeRelease)
	if !ok {
		return
	}
	s.finish(w, r, hs, name, endCall{
		token:   req.FencingToken,
		notHeld: fencelock.ErrNotHeld,
		stale:   staleLock,
		end:     func(ctx context.Context, wt *wait) error { return wt.lock.Release(ctx) },
		answer:  ReleaseResponse{Released: true},
	}, s.release)
}

func staleLock(token ID) error {
	return newError(http.StatusConflict, CodeStaleToken,
		"fencing token "+token.String()+" is not the session's current grant of this lock")
}

// LockJSON describes a lock.
// It is lockapi.LockJSON, which the Go client decodes too.
type LockJSON = lockapi.LockJSON

// HolderJSON is one current grant of a lock.
// It is lockapi.HolderJSON, which the Go client decodes too.
type HolderJSON = lockapi.HolderJSON

// WaiterJSON is one waiting request of a lock.
// It is lockapi.WaiterJSON, which the Go client decodes too.
type WaiterJSON = lockapi.WaiterJSON

// stamp renders a time the group recorded, and how long ago it was: ""
// and 0 for an unknown one.
func stamp(t, now time.Time) (string, int64) {
	if t.IsZero() {
		return "", 0
	}
	return t.UTC().Format(time.RFC3339Nano), max(now.Sub(t), 0).Milliseconds()
}

// partID is the part_id a view shows: a named group's part ID, and
// none (0, left out) in the default group, where it is the session_id.
func partID(named bool, id uint64) ID {
	if !named {
		return 0
	}
	return ID(id)
}

func lockJSON(info fencelock.LockInfo) LockJSON {
	now := time.Now()
	named := groupOf(info.Name) != ""
	out := LockJSON{Name: info.Name, Group: groupOf(info.Name), Held: info.Held, HolderSession: ID(info.SessionID),
		HolderPart: partID(named, info.PartID), FencingToken: ID(info.Token),
		Shared: info.Shared, Permits: info.Permits, Holders: []HolderJSON{}, Waiters: info.Waiters, Queue: []ID{},
		HolderName: info.SessionName, Waiting: []WaiterJSON{}}
	out.GrantedAt, out.HeldForMS = stamp(info.GrantedAt, now)
	for _, h := range info.Holders {
		hj := HolderJSON{Session: ID(h.SessionID), Part: partID(named, h.PartID), Name: h.Name, FencingToken: ID(h.Token), Owner: h.Owner}
		hj.GrantedAt, hj.HeldForMS = stamp(h.GrantedAt, now)
		out.Holders = append(out.Holders, hj)
	}
	for _, wt := range info.Waiting {
		wj := WaiterJSON{Session: ID(wt.SessionID), Part: partID(named, wt.PartID), Name: wt.Name, Place: wt.Place, Owner: wt.Owner, Shared: wt.Shared}
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
	replyNamed(s, w, r, s.node.Inspect, func(_ string, info fencelock.LockInfo) any { return lockJSON(info) })
}

// LockList answers GET /v1/locks.
type LockList struct {
	// Group is the group listed ("" is the default group, or with
	// AllGroups every group): each lock's session IDs are IDs in its
	// group.
	Group string `json:"group"`
	// AllGroups: neither ?group nor the prefix named a group, and the
	// page lists every group's locks in name order, each with its group.
	AllGroups bool       `json:"all_groups,omitempty"`
	Locks     []LockJSON `json:"locks"`
	More      bool       `json:"more"`
	Next      string     `json:"next,omitempty"` // the "after" of the next page
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
	opts, err := pageByName(r)
	if err != nil {
		writeError(w, err)
		return
	}
	prefix, err := listPrefix(r)
	if err != nil {
		writeError(w, err)
		return
	}
	ask := func(ctx context.Context) (fencelock.LockPage, error) { return s.node.Locks(ctx, prefix, opts...) }
	reply(s, w, r, ask, func(page fencelock.LockPage) any {
		out := LockList{Group: page.Group, AllGroups: page.AllGroups, Locks: []LockJSON{}, More: page.More}
		for _, d := range page.Locks {
			out.Locks = append(out.Locks, lockJSON(d.LockInfo))
		}
		if page.More && len(page.Locks) > 0 {
			out.Next = page.Locks[len(page.Locks)-1].Name
		}
		return out
	})
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
	return err != nil || (len(page.Sessions) > 0 && page.Sessions[0].PartID == id)
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
	// Previous holder and token, for released and expired: its session_id
	// (absent if unknown) and, in a named group, its part_id there.
	PreviousSession ID `json:"previous_session,omitempty"`
	PreviousPart    ID `json:"previous_part,omitempty"`
	PreviousToken   ID `json:"previous_token,omitempty"`
}

func (s *Server) watch(w http.ResponseWriter, r *http.Request) {
	var prev *fencelock.LockInfo
	errOf := func(info fencelock.LockInfo) error { return info.Err }
	follow(s, w, r, s.node.Watch, errOf, func(st *stream, name string, info fencelock.LockInfo) {
		ev := LockEvent{LockJSON: lockJSON(info)}
		switch {
		case prev == nil:
			st.send("state", ev)
		case prev.Held && (!info.Held || info.Token != prev.Token):
			// The grant ended: by release, or by the end of its session.
			kind := s.grantEnd(st.ctx, groupOf(name), prev.PartID, prev.Token)
			end := ev
			end.PreviousSession, end.PreviousToken = ID(prev.SessionID), ID(prev.Token)
			end.PreviousPart = partID(groupOf(name) != "", prev.PartID)
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
	})
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
	ask := func(ctx context.Context) ([]fencelock.LockInfo, error) {
		return s.node.ContendedIn(ctx, q.Get("group"), limit)
	}
	reply(s, w, r, ask, func(locks []fencelock.LockInfo) any {
		out := LockList{Locks: []LockJSON{}}
		for _, l := range locks {
			out.Locks = append(out.Locks, lockJSON(l))
		}
		return out
	})
}
