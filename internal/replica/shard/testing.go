package shard

import (
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
)

// TestingHoldGateRaise makes each raise of the group's gate that this
// replica makes as its leader call hold once it has read the membership
// and found that every member reads more, just before it proposes the
// raise: a test adds a member in that gap. nil ends it. Production code
// never calls it.
func (r *Shard) TestingHoldGateRaise(hold func()) {
	if hold == nil {
		r.holdRaise.Store(nil)
		return
	}
	r.holdRaise.Store(&hold)
}

// TestingLoseReplies makes the next n proposals of kind that Propose sees
// committed on this replica report a leader change instead of their
// result, as a leader change that fails an entry in flight after it
// committed does: Propose then proposes the same command again, and the
// state machine applies both. It is for tests of what a retried command
// does; n 0 ends it. Production code never calls it.
func (r *Shard) TestingLoseReplies(kind fsm.Kind, n int) {
	l := r.lostReplies.Load()
	if l == nil {
		r.lostReplies.CompareAndSwap(nil, &lostReplies{kinds: map[fsm.Kind]int{}})
		l = r.lostReplies.Load()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kinds[kind] = n
}

// TestingLostReplies returns how many replies of kind TestingLoseReplies
// has yet to lose on this replica.
func (r *Shard) TestingLostReplies(kind fsm.Kind) int {
	l := r.lostReplies.Load()
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.kinds[kind]
}

// lostReplies is what TestingLoseReplies set: how many more committed
// proposals of each kind are reported lost.
type lostReplies struct {
	mu    sync.Mutex
	kinds map[fsm.Kind]int
}

// loseReply reports whether Propose reports the committed proposal of a
// command of kind as lost (TestingLoseReplies), counting it. Without the
// hook, as in production, it is one atomic load.
func (r *Shard) loseReply(kind fsm.Kind) bool {
	l := r.lostReplies.Load()
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kinds[kind] <= 0 {
		return false
	}
	l.kinds[kind]--
	return true
}

// TestingGateNudged reports whether the leader's loop that raises the gate
// was woken (NudgeGate) since it last looked, and takes the wake-up from
// it. Production code never calls it.
func (r *Shard) TestingGateNudged() bool {
	select {
	case <-r.gateNudge:
		return true
	default:
		return false
	}
}
