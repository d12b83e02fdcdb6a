package fencelock

import (
	"context"
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Watch reports lock name as this replica applies changes to it: first its
// state from a linearizable read, then every change (granted, released,
// expired, revoked, a waiter queued or gone), in order. Like Observe it may
// skip intermediate states when changes come faster than the receiver
// reads, but the value waiting to be received is always the latest, and
// nothing polls: the entries this replica applies wake the watchers of the
// names they touch. The channel is closed when ctx ends or the node closes;
// for an invalid name it carries one LockInfo whose Err wraps
// ErrInvalidName, and is closed. A replica cut off from its group applies
// nothing, so its watchers see no change until it catches up.
func (n *Node) Watch(ctx context.Context, name string) <-chan LockInfo {
	if !fsm.ValidName(name) {
		out := make(chan LockInfo, 1)
		out <- LockInfo{Name: name, Err: invalidName(name)}
		close(out)
		return out
	}
	out := make(chan LockInfo)
	// Registered before the first read, so that no change applied after
	// the read can be missed.
	w := n.lockWatches.add(name)
	started := n.goBackground(func() {
		defer close(out)
		defer n.lockWatches.remove(name, w)
		n.watch(ctx, name, w, out)
	})
	if !started {
		n.lockWatches.remove(name, w)
		close(out)
	}
	return out
}

func (n *Node) watch(ctx context.Context, name string, w *lockWatch, out chan<- LockInfo) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(n.ctx, cancel)() // Close cancels n.ctx
	cur, err := n.Inspect(ctx, name)
	if err != nil {
		return
	}
	var last LockInfo
	sent := false
	for {
		send := out
		if sent && cur.equal(last) {
			send = nil // nothing new: wait for a change
		}
		select {
		case send <- cur:
			last, sent = cur, true
		case <-w.changed:
			// The local copy is at or past the change that woke us, and
			// past the linearizable first read: it never goes back.
			v, err := n.r.StaleRead(func(st *fsm.State) any { return st.Lock(name) })
			if err != nil {
				return
			}
			cur = lockInfo(v.(fsm.LockInfo))
		case <-ctx.Done():
			return
		}
	}
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

// lockWatches is the registry of the locks watched on this node. The apply
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
