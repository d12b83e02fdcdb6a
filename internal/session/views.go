package session

// The root's views: each checks its arguments in the order the root
// documents, routes the name (or takes the group) to its replica, and
// reads the group's state there, linearizably unless it says otherwise.
// They answer in the state machine's own view types, named here so that
// the root converts them to its public ones without knowing internal/fsm.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
	"github.com/fencelock/fencelock/internal/seeded"
)

// The state machine's views, as the calls below return them.
type (
	LockInfo     = fsm.LockInfo
	Holder       = fsm.Holder
	Waiter       = fsm.Waiter
	LockEntry    = fsm.LockEntry
	ElectionInfo = fsm.ElectionInfo
	Candidate    = fsm.Candidate
	SessionInfo  = fsm.SessionInfo
)

// The page sizes of the listings, and how many waiting requests a listed
// lock names.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 10000
	QueueListed      = 16
)

// ListQuery is what one page of a listing asks for: at most Limit
// entries, after the lock or election called After, or after session
// AfterID.
type ListQuery struct {
	Limit   int
	After   string
	AfterID uint64
}

func (q ListQuery) check() error {
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return fmt.Errorf("%w: list limit %d outside [1, %d]", replica.ErrInvalidConfig, q.Limit, MaxListLimit)
	}
	return nil
}

// LockView is a lock with the sessions of its waiting requests, head
// first (Queue), and those requests (Waiting).
type LockView struct {
	Info    LockInfo
	Queue   []uint64
	Waiting []Waiter
}

// Inspect reads lock name, with its whole queue, in the group it lives in.
func (h *Host) Inspect(ctx context.Context, name string) (LockView, error) {
	_, r, err := h.route(ctx, name)
	if err != nil {
		return LockView{}, err
	}
	v, err := r.Read(ctx, func(st *fsm.State) any {
		return LockView{st.Lock(name), st.Queue(name, fsm.MaxWaitersPerLock), st.Waiters(name, fsm.MaxWaitersPerLock)}
	})
	if err != nil {
		return LockView{}, err
	}
	return v.(LockView), nil
}

// ListedLock is a lock of a listing and the group it lives in.
type ListedLock struct {
	LockEntry
	Group string
}

// LockPage is one page of Locks: of one Group, or with AllGroups of every
// group, merged in name order.
type LockPage struct {
	Group     string
	AllGroups bool
	Locks     []ListedLock
	More      bool
}

// Locks lists the held locks whose names start with prefix: prefix@group
// lists group's, a prefix without '@' every group's (each group's first
// page after q.After, merged; names are unique across groups, so one After
// pages through them all). A group that fails fails the page, named.
func (h *Host) Locks(ctx context.Context, prefix string, q ListQuery) (LockPage, error) {
	if err := q.check(); err != nil {
		return LockPage{}, err
	}
	base, group, r, named, err := h.routePrefix(ctx, prefix)
	if err != nil {
		return LockPage{}, err
	}
	if named {
		locks, more, err := locksPage(ctx, r, group, base, q)
		if err != nil {
			return LockPage{}, err
		}
		return LockPage{Group: group, Locks: locks, More: more}, nil
	}
	out := LockPage{AllGroups: true}
	groups, err := h.cfg.Groups.Reachable(ctx)
	if err != nil {
		return LockPage{}, err
	}
	for _, group := range groups {
		r, err := h.Group(ctx, group)
		if err != nil {
			return LockPage{}, err
		}
		locks, more, err := locksPage(ctx, r, group, prefix, q)
		if err != nil {
			if group != "" {
				err = fmt.Errorf("group %q: %w", group, err)
			}
			return LockPage{}, err
		}
		out.Locks = append(out.Locks, locks...)
		out.More = out.More || more
	}
	slices.SortFunc(out.Locks, func(a, b ListedLock) int { return strings.Compare(a.Name, b.Name) })
	if len(out.Locks) > q.Limit {
		out.Locks, out.More = out.Locks[:q.Limit], true
	}
	return out, nil
}

// locksPage reads one page of group's locks (replica r) starting with
// prefix.
func locksPage(ctx context.Context, r Group, group, prefix string, q ListQuery) ([]ListedLock, bool, error) {
	type page struct {
		locks []LockEntry
		more  bool
	}
	v, err := r.Read(ctx, func(st *fsm.State) any {
		locks, more := st.LocksPage(prefix, q.After, q.Limit, QueueListed)
		return page{locks, more}
	})
	if err != nil {
		return nil, false, err
	}
	p := v.(page)
	out := make([]ListedLock, len(p.locks))
	for i, l := range p.locks {
		out[i] = ListedLock{LockEntry: l, Group: group}
	}
	return out, p.more, nil
}

// Contended reads group's count most contended locks, each with its first
// QueueListed waiting requests.
func (h *Host) Contended(ctx context.Context, group string, count int) ([]LockView, error) {
	if count < 1 || count > MaxContended {
		return nil, fmt.Errorf("%w: contended count %d outside [1, %d]", replica.ErrInvalidConfig, count, MaxContended)
	}
	r, err := h.Group(ctx, group)
	if err != nil {
		return nil, err
	}
	v, err := r.Read(ctx, func(st *fsm.State) any {
		locks := st.Contended(count)
		out := make([]LockView, len(locks))
		for i, l := range locks {
			out[i] = LockView{Info: l, Waiting: st.Waiters(l.Name, QueueListed)}
		}
		return out
	})
	if err != nil {
		return nil, err
	}
	out := v.([]LockView)
	for i := range out {
		for _, w := range out[i].Waiting {
			out[i].Queue = append(out[i].Queue, w.Session)
		}
	}
	return out, nil
}

// Sessions reads one page of group's open sessions, in ID order.
func (h *Host) Sessions(ctx context.Context, group string, q ListQuery) ([]SessionInfo, bool, error) {
	if err := q.check(); err != nil {
		return nil, false, err
	}
	r, err := h.Group(ctx, group)
	if err != nil {
		return nil, false, err
	}
	type page struct {
		sessions []SessionInfo
		more     bool
	}
	v, err := r.Read(ctx, func(st *fsm.State) any {
		s, more := st.SessionsPage(q.AfterID, q.Limit)
		return page{s, more}
	})
	if err != nil {
		return nil, false, err
	}
	p := v.(page)
	return p.sessions, p.more, nil
}

// Election reads election in the group it lives in.
func (h *Host) Election(ctx context.Context, election string) (ElectionInfo, error) {
	_, r, err := h.route(ctx, election)
	if err != nil {
		return ElectionInfo{}, err
	}
	read := r.Read
	if seeded.On(seeded.LeaderStaleRead) {
		read = func(_ context.Context, q fsm.Query) (any, error) { return r.StaleRead(q) }
	}
	v, err := read(ctx, func(st *fsm.State) any { return st.Election(election) })
	if err != nil {
		return ElectionInfo{}, err
	}
	return v.(ElectionInfo), nil
}

// Candidates reads election and its first q.Limit queued candidates. It
// checks the name, then q, then routes the name.
func (h *Host) Candidates(ctx context.Context, election string, q ListQuery) (ElectionInfo, []Candidate, error) {
	if err := checkName(election); err != nil {
		return ElectionInfo{}, nil, err
	}
	if err := q.check(); err != nil {
		return ElectionInfo{}, nil, err
	}
	_, r, err := h.Route(ctx, election)
	if err != nil {
		return ElectionInfo{}, nil, err
	}
	type read struct {
		info  ElectionInfo
		queue []Candidate
	}
	v, err := r.Read(ctx, func(st *fsm.State) any {
		return read{st.Election(election), st.Candidates(election, q.Limit)}
	})
	if err != nil {
		return ElectionInfo{}, nil, err
	}
	got := v.(read)
	return got.info, got.queue, nil
}

// Elections reads one page of the elections whose names start with
// prefix: prefix@group lists group's, a prefix without '@' the default
// group's.
func (h *Host) Elections(ctx context.Context, prefix string, q ListQuery) ([]ElectionInfo, bool, error) {
	if err := q.check(); err != nil {
		return nil, false, err
	}
	base, _, r, named, err := h.routePrefix(ctx, prefix)
	if err != nil {
		return nil, false, err
	}
	if !named {
		if r, err = h.Group(ctx, ""); err != nil {
			return nil, false, err
		}
	}
	type page struct {
		elections []ElectionInfo
		more      bool
	}
	v, err := r.Read(ctx, func(st *fsm.State) any {
		es, more := st.ElectionsPage(base, q.After, q.Limit)
		return page{es, more}
	})
	if err != nil {
		return nil, false, err
	}
	p := v.(page)
	return p.elections, p.more, nil
}

// Ready reads every group at once, and returns the error of the first (in
// Names order) that could not be read, naming it. A named group that has
// not elected its first leader here (no group ID yet: just created, or
// just started on this host) is not read: a new group never makes a
// replica unready.
func (h *Host) Ready(ctx context.Context) error {
	names := h.cfg.Groups.Names()
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		r := h.cfg.Groups.Group(name)
		if r == nil || (name != "" && r.GroupID() == 0) {
			continue // dropped meanwhile, or not yet led here
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.Read(ctx, func(*fsm.State) any { return nil })
			if err != nil {
				label := "the default group"
				if name != "" {
					label = fmt.Sprintf("group %q", name)
				}
				errs[i] = fmt.Errorf("%s is not ready here: %w", label, err)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// SessionName returns the name the default group stored for session id,
// as this replica's copy has it, without a round trip: "" if the copy
// knows none (the name never changes, but a copy may not have caught up
// with the open).
func (h *Host) SessionName(id uint64) string {
	r, err := h.Group(context.Background(), "")
	if err != nil {
		return ""
	}
	v, err := r.StaleRead(func(st *fsm.State) any { info, _ := st.Session(id); return info.Name })
	if err != nil {
		return ""
	}
	return v.(string)
}
