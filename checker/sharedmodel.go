package checker

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fencelock"
)

// Ref names one grant: its session and token.
type Ref struct {
	Session uint64
	Token   uint64
}

// sharedState is the model of one shared/exclusive lock or one semaphore:
// its current known grants in a canonical order, how many grants of
// unknown outcome (phantoms) it holds besides, whether its grants are one
// exclusive grant, and the highest token granted so far.
//
// Phantoms are counted, not named: a history with k acquires of unknown
// outcome that may each hold a shared grant would otherwise have 2^k
// states at once. Nothing tells phantoms apart (no operation names one,
// and the final read admits none), and any of them may be withdrawn at any
// moment after it was made (sharedStep), so a count accepts exactly the
// histories that named phantoms with a Lose each do.
type sharedState struct {
	Excl     bool
	Holders  []Ref
	Phantoms int
	Last     uint64
}

// held is the number of current grants, phantoms included.
func (s sharedState) held() int { return len(s.Holders) + s.Phantoms }

func (s sharedState) with(r Ref) sharedState {
	h := append(slices.Clone(s.Holders), r)
	slices.SortFunc(h, func(a, b Ref) int {
		return cmp.Or(cmp.Compare(a.Token, b.Token), cmp.Compare(a.Session, b.Session))
	})
	s.Holders = h
	return s
}

func (s sharedState) without(i int) sharedState {
	s.Holders = slices.Delete(slices.Clone(s.Holders), i, i+1)
	if s.held() == 0 {
		s.Excl = false
	}
	return s
}

// find returns the index of the grant (session, token), or -1.
func (s sharedState) find(session, token uint64) int {
	return slices.IndexFunc(s.Holders, func(r Ref) bool { return r.Session == session && r.Token == token })
}

// SharedModel is the sequential specification of a shared/exclusive lock
// (Acquire, AcquireShared and their Try forms on one name) and of a
// counting semaphore (AcquireSemaphore and TryAcquireSemaphore with
// Permits): any number of shared grants at once, up to Permits for a
// semaphore, or one exclusive grant; every grant's token larger than every
// earlier grant's; an exclusive grant only when nobody holds, a shared one
// only when nobody holds exclusively and a permit is free. A Try is refused
// only when the lock is held (an exclusive request: held at all; a shared
// one: held, since a queued exclusive request that makes the group refuse
// it is queued only behind holders), and a semaphore's Try only when every
// permit is held (a request queues only while none is free). Release only
// by a current grant, Lose of known grants and Kept as in LockModel, phantoms
// withdrawn at any moment after they were made, and the final read
// shows exactly the current grants. Partitioned by name; unknown outcomes
// are nondeterministic.
//
// The queue itself is not modelled: FIFO order is a property of when
// waiting calls take effect, which the history cannot pin down while
// every call is concurrent with the others; the fsm's tests prove it.
var SharedModel = porcupine.NondeterministicModel{
	Partition: LockModel.Partition,
	Init:      func() []any { return []any{sharedState{}} },
	Step: func(state, input, _ any) []any {
		return sharedStep(state.(sharedState), input.(Op))
	},
	Equal: func(a, b any) bool {
		x, y := a.(sharedState), b.(sharedState)
		return x.Excl == y.Excl && x.Last == y.Last && x.Phantoms == y.Phantoms && slices.Equal(x.Holders, y.Holders)
	},
	DescribeOperation: func(input, _ any) string {
		op := input.(Op)
		mode := "x"
		if op.Shared {
			mode = fmt.Sprintf("s%d", op.Permits)
		}
		return fmt.Sprintf("%v/%s(c%d,s%d,t%d,p%d,%v)->%v", op.Kind, mode, op.Client, op.Session, op.Token, op.Phantom, op.Holders, op.Outcome)
	},
	DescribeState: func(state any) string {
		s := state.(sharedState)
		var b strings.Builder
		fmt.Fprintf(&b, "excl=%v last=%d phantoms=%d", s.Excl, s.Last, s.Phantoms)
		for _, h := range s.Holders {
			fmt.Fprintf(&b, " [s%d t%d]", h.Session, h.Token)
		}
		return b.String()
	},
}

// sharedStep returns the states the lock may be in after op. A phantom
// may be withdrawn (its caller gave up, its session ended) at any moment
// after it was made, so op may see any number of the phantoms gone first:
// that is the phantoms' Lose, with no operations of its own for porcupine
// to order.
func sharedStep(s sharedState, op Op) []any {
	var out []any
	for gone := 0; gone <= s.Phantoms; gone++ {
		t := s
		t.Phantoms -= gone
		if t.held() == 0 {
			t.Excl = false
		}
		out = append(out, sharedStep1(t, op)...)
	}
	return out
}

func sharedStep1(s sharedState, op Op) []any {
	switch op.Kind {
	case OpAcquire, OpTryAcquire:
		limit := fencelock.MaxHoldersPerLock
		if op.Permits > 0 {
			limit = op.Permits
		}
		admits := s.held() == 0 || op.Shared && !s.Excl && s.held() < limit
		switch op.Outcome {
		case Granted:
			if admits && op.Token > s.Last {
				g := s.with(Ref{Session: op.Session, Token: op.Token})
				g.Excl, g.Last = !op.Shared, op.Token
				return []any{g}
			}
		case Locked:
			refusable := s.held() > 0
			if op.Permits > 0 {
				refusable = s.held() >= op.Permits
			}
			if refusable {
				return []any{s}
			}
		case Unknown:
			if admits { // granted to nobody who knows it, or not at all
				g := s
				g.Excl, g.Phantoms = !op.Shared, s.Phantoms+1
				return []any{s, g}
			}
			return []any{s}
		}
	case OpRelease:
		i := s.find(op.Session, op.Token)
		switch op.Outcome {
		case OK:
			if i >= 0 {
				return []any{s.without(i)}
			}
		case NotHeld:
			if i < 0 {
				return []any{s}
			}
		case Unknown:
			if i >= 0 {
				return []any{s, s.without(i)}
			}
			return []any{s}
		}
	case OpLose:
		if i := s.find(op.Session, op.Token); i >= 0 {
			return []any{s.without(i)}
		}
		return []any{s} // released already
	case OpKept:
		i := s.find(op.Session, op.Token)
		switch op.Outcome {
		case OK:
			if i >= 0 {
				return []any{s}
			}
		case NotHeld:
			if i < 0 {
				return []any{s}
			}
		case Unknown:
			return []any{s}
		}
	case OpRead:
		// The final read: it shows exactly the known grants. A phantom
		// still held fails it (its Lose can linearize before the read, and
		// must, since the final check also requires every grant the read
		// shows to be one a live client believes it holds).
		if s.Phantoms > 0 {
			return nil
		}
		if len(op.Holders) != len(s.Holders) || len(s.Holders) > 0 && op.Shared == s.Excl {
			return nil
		}
		for _, r := range op.Holders {
			if s.find(r.Session, r.Token) < 0 {
				return nil
			}
		}
		return []any{s}
	}
	return nil
}
