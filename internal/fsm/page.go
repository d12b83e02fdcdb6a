package fsm

import (
	"cmp"
	"container/heap"
	"slices"
	"strings"
)

// LockEntry describes one lock in a listing.
type LockEntry struct {
	LockInfo
	Owner uint64   // the replica the oldest holder's session lives on; 0 if free (delayed)
	Queue []uint64 // sessions of the first queued requests, head first
	// Waiting is the same first queued requests with their sessions'
	// names, places and times.
	Waiting []Waiter
}

// LocksPage lists, in name order, up to limit locks whose names start with
// prefix and sort after after; more reports whether further locks match.
// Each entry lists up to queue waiting sessions.
//
// The lock table is a hash table, so a page costs one pass over every lock
// plus O(log limit) per lock that sorts low enough to enter the page: about
// O(n) for a page of n locks in all, with O(limit) memory. It runs on the
// apply goroutine and delays applies while it runs; callers bound limit.
func (st *State) LocksPage(prefix, after string, limit, queue int) (page []LockEntry, more bool) {
	return listPage(limit, func(offer func(string, *lock)) {
		for l := range st.locks.all {
			if l.name > after && strings.HasPrefix(l.name, prefix) {
				offer(l.name, l)
			}
		}
	}, func(l *lock) LockEntry {
		e := LockEntry{LockInfo: l.info(), Queue: l.waiting(queue), Waiting: l.waiterList(queue)}
		if h := l.oldest(); h != nil { // a delayed lock may be free
			e.Owner = h.s.owner
		}
		return e
	})
}

// SessionsPage lists, in ID order, up to limit sessions with IDs above
// after; more reports whether further sessions exist. It costs like
// LocksPage.
func (st *State) SessionsPage(after uint64, limit int) (page []SessionInfo, more bool) {
	return listPage(limit, func(offer func(uint64, *session)) {
		for id, s := range st.sessions {
			if id > after {
				offer(id, s)
			}
		}
	}, (*session).info)
}

// ElectionsPage lists, in name order, up to limit elections (those with
// a leader or candidates) whose names start with prefix and sort after
// after; more reports whether further elections match. It costs like
// LocksPage, over the elections.
func (st *State) ElectionsPage(prefix, after string, limit int) (page []ElectionInfo, more bool) {
	return listPage(limit, func(offer func(string, *lock)) {
		for e := range st.elections.all {
			if e.name > after && strings.HasPrefix(e.name, prefix) {
				offer(e.name, e)
			}
		}
	}, (*lock).electionInfo)
}

// listPage is one page of a listing: of what scan offers, the limit
// smallest keys' values, in key order, each as entry describes it, and
// whether scan offered more. It keeps limit+1 values in a topK, so the
// order scan offers in (a map's) does not matter, and costs one pass of
// scan plus O(log limit) per value that enters the page.
func listPage[K cmp.Ordered, V, E any](limit int, scan func(offer func(K, V)), entry func(V) E) (page []E, more bool) {
	if limit <= 0 {
		return nil, false
	}
	sel := &topK[K, V]{k: limit + 1}
	scan(sel.offer)
	vals := sel.sorted()
	if len(vals) > limit {
		vals, more = vals[:limit], true
	}
	page = make([]E, len(vals))
	for i, v := range vals {
		page[i] = entry(v)
	}
	return page, more
}

// MaxContended is the most locks Contended returns.
const MaxContended = 100

// Contended returns the n locks (at most MaxContended; none for n <= 0)
// with the longest wait queues, longest first and, among queues of one
// length, in name order, each as Lock describes it: its holders with
// their names and grant times, and its queue's length. A lock nobody
// waits for is never listed.
//
// The state keeps the locks anyone waits for apart from the rest, so a
// query ranks only those: O(c log n) for c contended locks, whatever the
// number of locks held, with O(n) memory. It runs on the apply goroutine.
func (st *State) Contended(n int) []LockInfo {
	n = min(n, MaxContended)
	if n <= 0 {
		return nil
	}
	r := make(ranking, 0, n)
	for m := st.contended.head; m != nil; m = m.hot.next {
		l := m.l
		switch {
		case len(r) < n:
			heap.Push(&r, l)
		case l.waiters() < r[0].waiters(): // one comparison rejects most
		case ranksAbove(l, r[0]):
			r[0] = l
			heap.Fix(&r, 0)
		}
	}
	slices.SortFunc(r, func(a, b *lock) int {
		if ranksAbove(a, b) {
			return -1
		}
		return 1 // names are unique: never equal
	})
	out := make([]LockInfo, len(r))
	for i, l := range r {
		out[i] = l.info()
	}
	return out
}

// ranksAbove reports whether a is more contended than b: a longer queue
// or, as long, an earlier name. Names are unique, so the ranking is a
// total order and the result does not depend on the order of the scan.
func ranksAbove(a, b *lock) bool {
	if wa, wb := a.waiters(), b.waiters(); wa != wb {
		return wa > wb
	}
	return a.name < b.name
}

// ranking is a heap of locks whose root ranks lowest: the one a more
// contended lock displaces.
type ranking []*lock

func (r ranking) Len() int           { return len(r) }
func (r ranking) Less(i, j int) bool { return ranksAbove(r[j], r[i]) }
func (r ranking) Swap(i, j int)      { r[i], r[j] = r[j], r[i] }
func (r *ranking) Push(x any)        { *r = append(*r, x.(*lock)) }
func (r *ranking) Pop() any {
	old := *r
	x := old[len(old)-1]
	*r = old[:len(old)-1]
	return x
}

// topK keeps the k smallest keys offered, in a max-heap, so that a key
// larger than all k kept is dismissed with one comparison. Keys are unique,
// so the result does not depend on the order of the offers (a map's).
type topK[K cmp.Ordered, V any] struct {
	k    int
	keys []K
	vals []V
}

func (t *topK[K, V]) offer(key K, v V) {
	if len(t.keys) < t.k {
		t.keys, t.vals = append(t.keys, key), append(t.vals, v)
		heap.Fix(t, len(t.keys)-1)
		return
	}
	if key < t.keys[0] {
		t.keys[0], t.vals[0] = key, v
		heap.Fix(t, 0)
	}
}

func (t *topK[K, V]) sorted() []V {
	idx := make([]int, len(t.keys))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(t.keys[a], t.keys[b]) })
	out := make([]V, len(idx))
	for i, j := range idx {
		out[i] = t.vals[j]
	}
	return out
}

// heap.Interface, a max-heap on keys.
func (t *topK[K, V]) Len() int           { return len(t.keys) }
func (t *topK[K, V]) Less(i, j int) bool { return t.keys[i] > t.keys[j] }
func (t *topK[K, V]) Swap(i, j int) {
	t.keys[i], t.keys[j] = t.keys[j], t.keys[i]
	t.vals[i], t.vals[j] = t.vals[j], t.vals[i]
}
func (t *topK[K, V]) Push(any) {}
func (t *topK[K, V]) Pop() any { return nil }
