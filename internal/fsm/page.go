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
	if limit <= 0 {
		return nil, false
	}
	sel := &topK[string, *lock]{k: limit + 1}
	for l := range st.locks.all {
		if l.name > after && strings.HasPrefix(l.name, prefix) {
			sel.offer(l.name, l)
		}
	}
	locks := sel.sorted()
	if len(locks) > limit {
		locks, more = locks[:limit], true
	}
	page = make([]LockEntry, len(locks))
	for i, l := range locks {
		page[i] = LockEntry{LockInfo: st.Lock(l.name), Queue: l.waiting(queue)}
		if h := l.oldest(); h != nil { // a delayed lock may be free
			page[i].Owner = h.s.owner
		}
	}
	return page, more
}

// SessionsPage lists, in ID order, up to limit sessions with IDs above
// after; more reports whether further sessions exist. It costs like
// LocksPage.
func (st *State) SessionsPage(after uint64, limit int) (page []SessionInfo, more bool) {
	if limit <= 0 {
		return nil, false
	}
	sel := &topK[uint64, *session]{k: limit + 1}
	for id, s := range st.sessions {
		if id > after {
			sel.offer(id, s)
		}
	}
	sessions := sel.sorted()
	if len(sessions) > limit {
		sessions, more = sessions[:limit], true
	}
	page = make([]SessionInfo, len(sessions))
	for i, s := range sessions {
		page[i] = s.info()
	}
	return page, more
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
