package fsm

import "github.com/fencelock/fencelock/internal/seeded"

// OpMemory is how many operator commands (Revoke, EndSession) with an
// operation ID the state remembers the outcome of: the last OpMemory of
// them in apply order, the oldest forgotten first. A retry finds its first
// attempt's outcome while fewer than OpMemory other operator commands
// applied in between; a caller retries within its proposal timeout, and
// operators do not issue thousands of revocations in that time. A retry of
// a forgotten one is judged afresh, as a command without an ID always is.
// (Version 7.)
const OpMemory = 4096

// ops remembers the outcomes of the last OpMemory operator commands that
// carried an operation ID (Command.Op), so that a retry of one changes
// nothing and gets the first attempt's result: a revoke by name proposed
// again after a leader change must not end the grant that replaced the one
// it ended. The order is the apply order, which every replica shares; the
// map is only for lookup and never iterated into state or snapshots.
type ops struct {
	results map[uint64]Result
	// ring holds the IDs in apply order: while it has fewer than OpMemory,
	// oldest first; once full, oldest at ring[head], which the next ID
	// replaces.
	ring []uint64
	head int
}

// result returns the remembered outcome of operation op.
func (o *ops) result(op uint64) (Result, bool) {
	r, ok := o.results[op]
	return r, ok
}

// remember records r as operation op's outcome, forgetting the oldest
// remembered operation if OpMemory are remembered already. op is not
// remembered yet and is not 0.
func (o *ops) remember(op uint64, r Result) {
	if o.results == nil {
		o.results = make(map[uint64]Result)
	}
	if len(o.ring) < OpMemory {
		o.ring = append(o.ring, op)
	} else {
		delete(o.results, o.ring[o.head])
		o.ring[o.head] = op
		o.head = (o.head + 1) % OpMemory
	}
	o.results[op] = Result{Status: r.Status, Value: r.Value}
}

// all yields the remembered operations, oldest first.
func (o *ops) all(yield func(op uint64, r Result) bool) {
	for i := range o.ring {
		op := o.ring[(o.head+i)%len(o.ring)]
		if !yield(op, o.results[op]) {
			return
		}
	}
}

// len is how many operations are remembered.
func (o *ops) len() int { return len(o.ring) }

// operator applies operator command c (Revoke, EndSession) at most once
// per operation ID: a command whose Op is remembered changes nothing and
// gets the first outcome; one without an ID (every command of an entry
// older than version 7) applies as it always did, each time.
func (st *State) operator(c *Command, apply func() Result) Result {
	if c.Op == 0 || seeded.On(seeded.RevokeTwice) {
		return apply()
	}
	if r, ok := st.ops.result(c.Op); ok {
		return r
	}
	r := apply()
	st.ops.remember(c.Op, r)
	return r
}
