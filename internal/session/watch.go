package session

import (
	"context"
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
)

// WatchLock runs one Watch of lock name, in the group it lives in, until
// ctx ends or the Host closes, then closes out: it sends first(ctx) (a
// linearizable read), then local(the lock as this replica applied it)
// after each change, skipping a value same as the last one sent. The root
// converts to its own type. An invalid name or one in no group of the
// deployment is its error.
func WatchLock[T any](h *Host, ctx context.Context, name string, first func(context.Context) (T, error),
	local func(LockInfo) T, same func(a, b T) bool) (<-chan T, error) {
	group, r, err := h.route(ctx, name)
	if err != nil {
		return nil, err
	}
	rt := h.router(group)
	out := make(chan T)
	// Registered before the first read, so that no change applied after
	// the read can be missed.
	w := rt.lockWatches.add(name)
	started := rt.goBackground(func() {
		defer close(out)
		defer rt.lockWatches.remove(name, w)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(rt.ctx, cancel)() // Close cancels it, and so does the group's drop
		cur, err := first(ctx)
		if err != nil {
			return
		}
		var last T
		sent := false
		for {
			send := out
			if sent && same(cur, last) {
				send = nil // nothing new: wait for a change
			}
			select {
			case send <- cur:
				last, sent = cur, true
			case <-w.changed:
				// The local copy is at or past the change that woke us, and
				// past the linearizable first read: it never goes back.
				v, err := r.StaleRead(func(st *fsm.State) any { return st.Lock(name) })
				if err != nil {
					return
				}
				cur = local(v.(fsm.LockInfo))
			case <-ctx.Done():
				return
			}
		}
	})
	if !started {
		rt.lockWatches.remove(name, w)
		close(out)
	}
	return out, nil
}

// queueKey is what lockWatches calls the queue of lock name, or the
// candidates of election name: elections are a namespace of their own, and
// no name holds a NUL.
func queueKey(name string, election bool) string {
	if election {
		return "\x00" + name
	}
	return name
}

// lockWatches is the registry of the locks watched in a group. The apply
// goroutine only marks a name changed (a non-blocking send per watcher);
// each watcher then reads the lock itself, so a slow reader costs the
// apply path nothing.
type lockWatches struct {
	mu sync.Mutex
	m  map[string]map[*lockWatch]struct{}
}

type lockWatch struct{ changed chan struct{} } // capacity 1: changes coalesce

func newLockWatches() *lockWatches { return &lockWatches{m: make(map[string]map[*lockWatch]struct{})} }

func (lw *lockWatches) add(name string) *lockWatch {
	w := &lockWatch{changed: make(chan struct{}, 1)}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if lw.m[name] == nil {
		lw.m[name] = make(map[*lockWatch]struct{})
	}
	lw.m[name][w] = struct{}{}
	return w
}

func (lw *lockWatches) remove(name string, w *lockWatch) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	delete(lw.m[name], w)
	if len(lw.m[name]) == 0 {
		delete(lw.m, name)
	}
}

// touch wakes the watchers of lock name.
func (lw *lockWatches) touch(name string) {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for w := range lw.m[name] {
		w.wake()
	}
}

// touchAll wakes every watcher: a snapshot replaced the state.
func (lw *lockWatches) touchAll() {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	for _, ws := range lw.m {
		for w := range ws {
			w.wake()
		}
	}
}

func (w *lockWatch) wake() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// reportPositions calls report with the place of request seq of p in the
// queue of lock name (with election, among the candidates of election
// name), 1 for the head, each time it changes as this replica applies the
// queue's changes, until stop closes or the request leaves the queue. The
// first call reports the place the request queued at.
//
// Like Watch it reads this replica's copy after each change it applies (no
// polling): a replica that lags reports late, never out of order. The
// returned joined waits until it no longer reports.
func (p *Part) reportPositions(stop <-chan struct{}, name string, election bool, seq uint64, report func(int)) (joined func()) {
	rt := p.rt
	key := queueKey(name, election)
	w := rt.lockWatches.add(key)
	done := make(chan struct{})
	started := rt.goBackground(func() {
		defer close(done)
		defer rt.lockWatches.remove(key, w)
		r, err := rt.replica(context.Background())
		if err != nil {
			return
		}
		last := 0
		for {
			v, err := r.StaleRead(func(st *fsm.State) any { return st.Position(p.id, seq) })
			if err != nil {
				return
			}
			pos := v.(int)
			if pos == 0 {
				return // granted, withdrawn, or the part is over
			}
			if pos != last {
				report(pos)
				last = pos
			}
			select {
			case <-w.changed:
			case <-stop:
				return
			case <-rt.ctx.Done():
				return
			}
		}
	})
	if !started {
		rt.lockWatches.remove(key, w)
		close(done)
	}
	return func() { <-done }
}
