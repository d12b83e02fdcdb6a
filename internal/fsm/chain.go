package fsm

// link threads an element into a chain.
type link[T any] struct{ prev, next *T }

// linked is an element type that carries its own link, so that a chain
// allocates nothing per element: a group may hold millions of locks, and a
// map or a slice per session or per queue would cost more memory than the
// locks themselves.
type linked[T any] interface {
	*T
	chained() *link[T]
}

// chain is a doubly linked list threaded through its elements: pushing at
// the tail, removing any element and finding the head take constant time.
// It serves both as a lock's FIFO queue of waiters and as the list of the
// locks a session holds.
type chain[T any, P linked[T]] struct {
	head, tail *T
	n          int
}

func (c *chain[T, P]) push(e *T) {
	at := P(e).chained()
	at.prev, at.next = c.tail, nil
	if c.tail != nil {
		P(c.tail).chained().next = e
	} else {
		c.head = e
	}
	c.tail = e
	c.n++
}

func (c *chain[T, P]) remove(e *T) {
	at := P(e).chained()
	if at.prev != nil {
		P(at.prev).chained().next = at.next
	} else {
		c.head = at.next
	}
	if at.next != nil {
		P(at.next).chained().prev = at.prev
	} else {
		c.tail = at.prev
	}
	at.prev, at.next = nil, nil
	c.n--
}

// all yields the elements head first; the caller may remove the element it
// is given.
func (c *chain[T, P]) all(yield func(*T) bool) {
	for e := c.head; e != nil; {
		next := P(e).chained().next
		if !yield(e) {
			return
		}
		e = next
	}
}
