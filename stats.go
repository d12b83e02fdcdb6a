package fencelock

import (
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Stats are a replica's figures for monitoring; the metrics package exports
// them to Prometheus.
type Stats struct {
	Status

	// The group's state as applied on this replica (it may lag the leader
	// by the entries in flight).
	Sessions  int // open sessions
	LocksHeld int // locks held
	Waiters   int // requests queued behind holders

	// Totals of the entries this replica applied since it started: every
	// replica applies the same entries, so they agree up to lag. Entries a
	// snapshot skipped (a replica catching up) are not counted.
	Grants   uint64 // locks granted, at acquire or passed to a queue head
	Releases uint64 // locks released by their holder
	Expiries uint64 // sessions the group expired

	LeaderChanges      uint64 // times this replica saw a new raft leader
	ConnectionFailures uint64 // failed attempts to connect to a peer
	// ProposalLatency is how long calls on this replica waited for their
	// commands to apply, retries included, failures too.
	ProposalLatency Histogram
}

// Histogram is a latency distribution with cumulative buckets.
type Histogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets []Bucket // increasing UpperBound; Count includes the rest above the last
}

// Bucket counts the observations up to UpperBound.
type Bucket struct {
	UpperBound time.Duration
	Count      uint64
}

type counts struct{ sessions, locks, waiting int }

// Stats returns this replica's figures. It does no I/O: the state counts are
// read from this replica's copy of the state.
func (n *Node) Stats() Stats {
	st := Stats{
		Status:             n.Status(),
		Grants:             n.ops.grants.Load(),
		Releases:           n.ops.releases.Load(),
		Expiries:           n.ops.expiries.Load(),
		LeaderChanges:      n.ops.leaderChanges.Load(),
		ConnectionFailures: n.ops.connFailures.Load(),
		ProposalLatency:    n.ops.proposals.snapshot(),
	}
	select {
	case <-n.closed:
		return st
	default:
	}
	v, err := n.nh.StaleRead(shardID, fsm.Query(func(s *fsm.State) any {
		var c counts
		c.sessions, c.locks, c.waiting = s.Counts()
		return c
	}))
	if c, ok := v.(counts); ok && err == nil {
		st.Sessions, st.LocksHeld, st.Waiters = c.sessions, c.locks, c.waiting
	}
	return st
}
