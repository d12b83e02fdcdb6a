package groupcore

import (
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/fsm"
)

// Ops is what a group records here for its operators: whether this
// replica was removed, its latest snapshot, and counters. Everything is
// atomic: the apply and proposal paths update it without locks or
// allocations.
type Ops struct {
	Removed       atomic.Bool
	SnapshotIndex atomic.Uint64

	entries, commands, keepAlives atomic.Uint64
	keepAliveEntries, renewals    atomic.Uint64
	grants, releases, expiries    atomic.Uint64
	LeaderChanges, ConnFailures   atomic.Uint64
	Proposals                     Latency
}

// CountEntry records one applied entry and its commands.
func (o *Ops) CountEntry(cmds []fsm.Command) {
	o.entries.Add(1)
	o.commands.Add(uint64(len(cmds)))
	var ka, renewed uint64
	for i := range cmds {
		switch cmds[i].Kind {
		case fsm.KindKeepAlive:
			ka++
			renewed++
		case fsm.KindKeepAliveBatch:
			ka++
			renewed += uint64(len(cmds[i].Renew))
		}
	}
	if ka != 0 {
		o.keepAlives.Add(ka)
		o.keepAliveEntries.Add(1)
		o.renewals.Add(renewed)
	}
}

// Count records one applied event.
func (o *Ops) Count(e *fsm.Event) {
	switch e.Kind {
	case fsm.EventGranted:
		o.grants.Add(1)
	case fsm.EventFreed:
		if e.Reason == fsm.ReasonReleased {
			o.releases.Add(1)
		}
	case fsm.EventSessionEnded:
		if e.Reason == fsm.ReasonExpired {
			o.expiries.Add(1)
		}
	}
}

// Counters returns the counters, with the state's counts read by
// staleRead: the shard's copy of the state, or the mirror's.
func (o *Ops) Counters(staleRead func(fsm.Query) (any, error)) Counters {
	c := Counters{
		Entries:            o.entries.Load(),
		Commands:           o.commands.Load(),
		KeepAlives:         o.keepAlives.Load(),
		KeepAliveEntries:   o.keepAliveEntries.Load(),
		Renewals:           o.renewals.Load(),
		Grants:             o.grants.Load(),
		Releases:           o.releases.Load(),
		Expiries:           o.expiries.Load(),
		LeaderChanges:      o.LeaderChanges.Load(),
		ConnectionFailures: o.ConnFailures.Load(),
		ProposalLatency:    o.Proposals.snapshot(),
	}
	type counts struct{ sessions, locks, waiting int }
	v, err := staleRead(fsm.Query(func(s *fsm.State) any {
		var n counts
		n.sessions, n.locks, n.waiting = s.Counts()
		return n
	}))
	if n, ok := v.(counts); ok && err == nil {
		c.Sessions, c.LocksHeld, c.Waiters = n.sessions, n.locks, n.waiting
	}
	return c
}

// latencyBounds are the upper bounds of the proposal latency buckets: from
// one fsync on a fast disk to a proposal that waited out elections.
var latencyBounds = [...]time.Duration{
	250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// Latency is a fixed-bucket histogram updated with atomics: observing costs
// a clock read and three atomic adds.
type Latency struct {
	buckets [len(latencyBounds) + 1]atomic.Uint64 // the last counts the rest
	sum     atomic.Int64                          // nanoseconds
}

// Since observes the time since start.
func (h *Latency) Since(start time.Time) { h.observe(time.Since(start)) }

func (h *Latency) observe(d time.Duration) {
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sum.Add(int64(d))
}

// snapshot returns the histogram with cumulative bucket counts.
func (h *Latency) snapshot() Histogram {
	out := Histogram{Buckets: make([]Bucket, len(latencyBounds))}
	var total uint64
	for i, b := range latencyBounds {
		total += h.buckets[i].Load()
		out.Buckets[i] = Bucket{UpperBound: b, Count: total}
	}
	out.Count = total + h.buckets[len(latencyBounds)].Load()
	out.Sum = time.Duration(h.sum.Load())
	return out
}

// Histogram is a latency histogram with cumulative buckets (the root's
// Histogram documents it).
type Histogram struct {
	Count   uint64
	Sum     time.Duration
	Buckets []Bucket
}

// Bucket counts the observations up to UpperBound.
type Bucket struct {
	UpperBound time.Duration
	Count      uint64
}

// Counters are what Stats reports of a group's work here.
type Counters struct {
	Entries, Commands, KeepAlives, KeepAliveEntries, Renewals     uint64
	Grants, Releases, Expiries, LeaderChanges, ConnectionFailures uint64
	ProposalLatency                                               Histogram
	Sessions, LocksHeld, Waiters                                  int // from this replica's copy of the state
}
