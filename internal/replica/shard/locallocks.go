package shard

import (
	"fmt"
	"time"

	"github.com/lni/dragonboat/v4"

	"github.com/fencelock/fencelock/internal/fsm"
)

// LocalLocks counts the locks held in this replica's copy of the group,
// after it applied every entry its log knows to be committed (no quorum is
// needed: a group whose voters are all being restarted without it must
// still be checkable).
func (r *Shard) LocalLocks(limit time.Duration) (int, error) {
	lr, err := r.nh.GetLogReader(r.ShardID())
	if err != nil {
		return 0, err
	}
	st, _ := lr.NodeState()
	deadline := time.Now().Add(limit)
	for {
		applied := r.AppliedIndex.Load()
		if applied >= st.Commit || !proposalsAfter(lr, applied, st.Commit) {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("applied %d of %d committed entries within %v", applied, st.Commit, limit)
		}
		time.Sleep(10 * time.Millisecond) // the replay has no completion signal
	}
	v, err := r.nh.StaleRead(r.ShardID(), fsm.Query(func(s *fsm.State) any {
		_, locks, _ := s.Counts()
		return locks
	}))
	if err != nil {
		return 0, err
	}
	return v.(int), nil
}

// proposalsAfter reports whether any entry in (from, to] carries commands:
// the others (elections' empty entries, membership changes) never reach the
// state machine, so the applied index does not move past them. An entry it
// cannot read counts as one.
func proposalsAfter(lr dragonboat.ReadonlyLogReader, from, to uint64) bool {
	es, err := lr.Entries(from+1, to+1, 64<<20)
	if err != nil || len(es) == 0 {
		return true
	}
	for i := range es {
		if es[i].IsProposal() && !es[i].IsEmpty() {
			return true
		}
	}
	return es[len(es)-1].Index < to
}
