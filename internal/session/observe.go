package session

import (
	"context"
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/replica"
)

// Leader is an election's leader as a group reports it; Token 0: none.
type Leader struct {
	Election, Value string
	Token, Session  uint64
	Parent          uint64 // the leader's session's parent (fsm.Command.Parent); 0: none or unknown
	Name            string // the leader's session's name
	At              uint64 // when it was elected, unix nanoseconds (0: unknown)
}

// LeaderOf is the leader an election's state names.
func LeaderOf(e fsm.ElectionInfo) Leader {
	if !e.Led {
		return Leader{Election: e.Name}
	}
	return Leader{Election: e.Name, Value: e.Value, Token: e.Token, Session: e.Session, Parent: e.Parent, Name: e.SessionName, At: e.ElectedAt}
}

// Observe runs one Observe of election, in the group it lives in, until
// ctx ends or the Host closes, then closes the channel: the leader from a
// linearizable read, then every change this replica applies, each
// converted by conv, the value waiting to be received always the latest.
// An invalid name or one in no group of the deployment is its error.
func Observe[T comparable](h *Host, ctx context.Context, election string, conv func(Leader) T) (<-chan T, error) {
	group, r, err := h.route(ctx, election)
	if err != nil {
		return nil, err
	}
	rt := h.router(group)
	out := make(chan T)
	// Register before the read, so that no change applied after the read
	// can be missed.
	w := rt.watches.add(election)
	started := rt.goBackground(func() {
		defer close(out)
		defer rt.watches.remove(w)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(rt.ctx, cancel)() // Close cancels it, and so does the group's drop
		cur, err := rt.firstRead(ctx, r, w)
		if err != nil {
			return
		}
		var last T
		sent := false
		for {
			latest, changed := rt.watches.load(w)
			if latest.index > cur.index {
				cur = latest
			}
			v := conv(cur.info)
			send := out
			if sent && v == last {
				send = nil // nothing new: wait for a change
			}
			select {
			case send <- v:
				last, sent = v, true
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	})
	if !started {
		rt.watches.remove(w)
		close(out)
	}
	return out, nil
}

// observed is an election's leader as of a log index.
type observed struct {
	info  Leader
	index uint64
}

// firstRead returns the election's state from a linearizable read that
// began after the caller registered w. Observers share reads: at most one
// read per election is in flight, and those who arrive meanwhile share the
// next one, so a thousand observers starting at once cost two reads, not a
// thousand (whose retries, when the group is slow to answer, would make it
// slower still).
func (rt *router) firstRead(ctx context.Context, r Group, w *watch) (observed, error) {
	sr, start := rt.watches.join(w)
	if start {
		rt.startRead(r, w, sr)
	}
	select {
	case <-sr.done:
		return sr.res, sr.err
	case <-ctx.Done():
		rt.watches.leave(w, sr)
		return observed{}, ctx.Err()
	}
}

// startRead runs the shared read sr of w, then the next one if observers
// joined it meanwhile.
func (rt *router) startRead(r Group, w *watch, sr *sharedRead) {
	ctx, cancel := context.WithCancel(rt.ctx)
	rt.watches.started(sr, cancel)
	ok := rt.goBackground(func() {
		defer cancel()
		v, err := r.Read(ctx, func(st *fsm.State) any {
			return observed{LeaderOf(st.Election(w.name)), st.Index()}
		})
		if err == nil {
			sr.res = v.(observed)
		}
		sr.err = err
		close(sr.done)
		if next := rt.watches.finished(w); next != nil {
			rt.startRead(r, w, next)
		}
	})
	if !ok { // the Host is closing: fail this read and any queued after it
		cancel()
		for ; sr != nil; sr = rt.watches.finished(w) {
			sr.err = replica.ErrClosed
			close(sr.done)
		}
	}
}

// sharedRead is one read of an election's state, serving every observer
// that joined it before it began.
type sharedRead struct {
	done    chan struct{} // closed when res and err are set
	res     observed
	err     error
	waiters int                // observers still waiting for it
	cancel  context.CancelFunc // once started: called when nobody waits any more
}

// watches is the registry of the elections observed in a group. The apply
// goroutine keeps each one's leader up to date from the entries it applies
// and wakes its observers by closing one channel, so the cost of a change to
// the apply goroutine does not grow with the number of observers.
type watches struct {
	mu    sync.Mutex
	m     map[string]*watch
	dirty []*watch // changed by the entry being applied
}

// watch is one observed election.
type watch struct {
	name    string
	refs    int           // observers
	latest  observed      // index 0: nothing applied since the first observer came
	changed chan struct{} // closed and replaced on every change
	reading bool          // a shared read is in flight
	next    *sharedRead   // the read that starts after it, if anyone waits for it
}

func newWatches() *watches { return &watches{m: make(map[string]*watch)} }

func (ws *watches) add(name string) *watch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.m[name]
	if w == nil {
		w = &watch{name: name, changed: make(chan struct{})}
		ws.m[name] = w
	}
	w.refs++
	return w
}

func (ws *watches) remove(w *watch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w.refs--; w.refs == 0 {
		delete(ws.m, w.name)
	}
}

// join makes the caller wait for the next read of w to begin, and reports
// whether the caller must start it.
func (ws *watches) join(w *watch) (r *sharedRead, start bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w.next == nil {
		w.next = &sharedRead{done: make(chan struct{})}
	}
	r = w.next
	r.waiters++
	if w.reading {
		return r, false
	}
	w.reading, w.next = true, nil
	return r, true
}

// leave withdraws an observer that gave up waiting for r; a read nobody
// waits for is cancelled, or never started.
func (ws *watches) leave(w *watch, r *sharedRead) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if r.waiters--; r.waiters > 0 {
		return
	}
	if w.next == r {
		w.next = nil
	} else if r.cancel != nil {
		r.cancel()
	}
}

func (ws *watches) started(r *sharedRead, cancel context.CancelFunc) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	r.cancel = cancel
	if r.waiters == 0 {
		cancel()
	}
}

// finished ends w's read in flight and returns the next one to start, if
// anyone waits for it.
func (ws *watches) finished(w *watch) *sharedRead {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w.reading = false
	r := w.next
	if r == nil {
		return nil
	}
	w.reading, w.next = true, nil
	return r
}

// load returns the latest state known from applied entries and the channel
// that will be closed when it changes.
func (ws *watches) load(w *watch) (observed, <-chan struct{}) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	return w.latest, w.changed
}

// applied records an election event of the entry at index. Every such event
// determines the election's leader after it, so no earlier state is needed.
func (ws *watches) applied(index uint64, e *fsm.Event) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.m[e.Name]
	if w == nil {
		return
	}
	info := Leader{Election: e.Name}
	if e.Kind != fsm.EventDeposed {
		info = Leader{Election: e.Name, Value: e.Value, Token: e.Token, Session: e.Session, Parent: e.Parent, Name: e.SessionName, At: e.At}
	}
	if w.latest.index != index {
		ws.dirty = append(ws.dirty, w)
	}
	w.latest = observed{info, index}
}

// notify wakes the observers of the elections the last entry changed: once
// per entry, with the state after the whole entry.
func (ws *watches) notify() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, w := range ws.dirty {
		close(w.changed)
		w.changed = make(chan struct{})
	}
	clear(ws.dirty)
	ws.dirty = ws.dirty[:0]
}

// restored brings every observed election up to a state restored from a
// snapshot, whose entries' events were never seen.
func (ws *watches) restored(st *fsm.State) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for name, w := range ws.m {
		w.latest = observed{LeaderOf(st.Election(name)), st.Index()}
		close(w.changed)
		w.changed = make(chan struct{})
	}
}
