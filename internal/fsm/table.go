package fsm

import (
	"hash/maphash"
	"math/bits"
)

// lockTable is a set of locks keyed by their names: the state's locks, or
// its elections. A group may hold millions of locks, and a map[string]*lock
// spends a 16-byte string header on every key, which the lock holds
// already, and at a million entries runs half empty (its tables double).
// This is an open-addressing table of pointers instead (linear probing,
// with backward-shift deletion, so no tombstones), whose key is read
// through the lock, and a byte per slot of the name's hash, so that a probe
// follows a pointer only when that byte matches: about 9 bytes a slot, and
// it can be sized to the count a snapshot gives.
//
// The hash is seeded per table, at random: a table's iteration order, like
// a map's, is not the same on every replica, so nothing the state machine
// replies or saves may follow it.
//
// The zero value is an empty table ready to use; a table must not be
// copied once used.
type lockTable struct {
	slots []*lock // nil: empty
	tags  []uint8 // per slot: 0 if empty, else tagOf its name's hash
	n     int
	seed  maphash.Seed
}

// lockTableLoad is the most a table is filled, as a fraction: an insert
// beyond it doubles the slots. Restore sizes a table below it, so that
// applying the log after a snapshot does not have to grow it at once.
const (
	lockTableLoadNum, lockTableLoadDen = 3, 4
	lockTableMinSlots                  = 8
)

// newLockTable returns a table with room for n locks.
func newLockTable(n int) *lockTable {
	t := &lockTable{}
	t.resize(max(lockTableMinSlots, n*5/3)) // 60% full at n
	return t
}

func (t *lockTable) hash(name string) uint64 { return maphash.String(t.seed, name) }

func tagOf(h uint64) uint8 { return uint8(h) | 0x80 }

// home is the slot where a name of hash h is first looked for: h scaled to
// the table's length, so that the length need not be a power of two.
func (t *lockTable) home(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(t.slots)))
	return int(hi)
}

func (t *lockTable) next(i int) int {
	if i++; i == len(t.slots) {
		return 0
	}
	return i
}

// len is how many locks the table holds.
func (t *lockTable) len() int { return t.n }

// get returns the lock called name, or nil.
func (t *lockTable) get(name string) *lock {
	if t.n == 0 {
		return nil
	}
	h := t.hash(name)
	tag := tagOf(h)
	for i := t.home(h); t.tags[i] != 0; i = t.next(i) {
		if t.tags[i] == tag && t.slots[i].name == name {
			return t.slots[i]
		}
	}
	return nil
}

// add inserts l, unless the table holds a lock of its name already; it
// reports whether it did.
func (t *lockTable) add(l *lock) bool {
	if (t.n+1)*lockTableLoadDen > len(t.slots)*lockTableLoadNum {
		t.resize(max(lockTableMinSlots, 2*len(t.slots)))
	}
	h := t.hash(l.name)
	tag := tagOf(h)
	i := t.home(h)
	for ; t.tags[i] != 0; i = t.next(i) {
		if t.tags[i] == tag && t.slots[i].name == l.name {
			return false
		}
	}
	t.slots[i], t.tags[i] = l, tag
	t.n++
	return true
}

// remove deletes the lock called name, if the table holds it.
func (t *lockTable) remove(name string) {
	if t.n == 0 {
		return
	}
	h := t.hash(name)
	tag := tagOf(h)
	i := t.home(h)
	for ; ; i = t.next(i) {
		if t.tags[i] == 0 {
			return
		}
		if t.tags[i] == tag && t.slots[i].name == name {
			break
		}
	}
	// Backward shift: move each later lock of the run whose home is not
	// between the hole and it into the hole, so that every lock stays
	// reachable from its home without crossing an empty slot.
	for j := t.next(i); t.tags[j] != 0; j = t.next(j) {
		k := t.home(t.hash(t.slots[j].name))
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue // its home is cyclically in (i, j]: it stays
		}
		t.slots[i], t.tags[i] = t.slots[j], t.tags[j]
		i = j
	}
	t.slots[i], t.tags[i] = nil, 0
	t.n--
}

// all yields the table's locks in no particular order. The table must not
// change while it runs.
func (t *lockTable) all(yield func(*lock) bool) {
	for _, l := range t.slots {
		if l != nil && !yield(l) {
			return
		}
	}
}

// resize moves the locks into a table of n slots.
func (t *lockTable) resize(n int) {
	old := t.slots
	if t.slots == nil {
		t.seed = maphash.MakeSeed()
	}
	t.slots, t.tags, t.n = make([]*lock, n), make([]uint8, n), 0
	for _, l := range old {
		if l != nil {
			t.add(l)
		}
	}
}
