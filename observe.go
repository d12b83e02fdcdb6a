package fencelock

import (
	"context"
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Observe reports the leader of election as this replica applies changes to
// it: first the current leader (a linearizable read), then every change, in
// order. It may skip intermediate states when changes come faster than the
// receiver reads, but never leaves the receiver on a stale one: the value
// waiting to be received is always the latest. An election without a leader
// is reported as a LeaderInfo with Token 0.
//
// Nothing polls: changes come from the entries this replica applies, and a
// change wakes all of an election's observers at once, however many there
// are. Observers that start together share their first read. The channel is
// closed when ctx ends or the node closes; for an invalid election name it
// carries one LeaderInfo whose Err wraps ErrInvalidName, and is closed. Until the group can serve the first read, nothing is
// sent. A replica cut off from its group applies nothing, so its observers
// see no change until it catches up; Leader gives a linearizable answer.
func (n *Node) Observe(ctx context.Context, election string) <-chan LeaderInfo {
	if !fsm.ValidName(election) {
		out := make(chan LeaderInfo, 1)
		out <- LeaderInfo{Election: election, Err: invalidName(election)}
		close(out)
		return out
	}
	out := make(chan LeaderInfo)
	// Register before the read, so that no change applied after the read
	// can be missed.
	w := n.watches.add(election)
	started := n.goBackground(func() {
		defer close(out)
		defer n.watches.remove(w)
		n.observe(ctx, w, out)
	})
	if !started {
		n.watches.remove(w)
		close(out)
	}
	return out
}

// observed is an election's leader as of a log index.
type observed struct {
	info  LeaderInfo
	index uint64
}

func (n *Node) observe(ctx context.Context, w *watch, out chan<- LeaderInfo) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(n.ctx, cancel)() // Close cancels n.ctx
	cur, err := n.firstRead(ctx, w)
	if err != nil {
		return
	}
	var last LeaderInfo
	sent := false
	for {
		latest, changed := n.watches.load(w)
		if latest.index > cur.index {
			cur = latest
		}
		send := out
		if sent && cur.info == last {
			send = nil // nothing new: wait for a change
		}
		select {
		case send <- cur.info:
			last, sent = cur.info, true
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// firstRead returns the election's state from a linearizable read that
// began after the caller registered w. Observers share reads: at most one
// read per election is in flight, and those who arrive meanwhile share the
// next one, so a thousand observers starting at once cost two reads, not a
// thousand (whose retries, when the group is slow to answer, would make it
// slower still).
func (n *Node) firstRead(ctx context.Context, w *watch) (observed, error) {
	r, start := n.watches.join(w)
	if start {
		n.startRead(w, r)
	}
	select {
	case <-r.done:
		return r.res, r.err
	case <-ctx.Done():
		n.watches.leave(w, r)
		return observed{}, ctx.Err()
	}
}

// startRead runs the shared read r of w, then the next one if observers
// joined it meanwhile.
func (n *Node) startRead(w *watch, r *sharedRead) {
	ctx, cancel := context.WithCancel(n.ctx)
	n.watches.started(r, cancel)
	ok := n.goBackground(func() {
		defer cancel()
		v, err := n.r.Read(ctx, func(st *fsm.State) any {
			return observed{leaderInfo(st.Election(w.name)), st.Index()}
		})
		if err == nil {
			r.res = v.(observed)
		}
		r.err = err
		close(r.done)
		if next := n.watches.finished(w); next != nil {
			n.startRead(w, next)
		}
	})
	if !ok { // the node is closing: fail this read and any queued after it
		cancel()
		for ; r != nil; r = n.watches.finished(w) {
			r.err = ErrClosed
			close(r.done)
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

// watches is the registry of the elections observed on this node. The apply
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
	info := LeaderInfo{Election: e.Name}
	if e.Kind != fsm.EventDeposed {
		info = LeaderInfo{Election: e.Name, Value: e.Value, Token: e.Token, SessionID: e.Session}
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
		w.latest = observed{leaderInfo(st.Election(name)), st.Index()}
		close(w.changed)
		w.changed = make(chan struct{})
	}
}
