package fencelock

import (
	"time"

	"github.com/fencelock/fencelock/internal/replica"
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
	Entries          uint64 // raft entries
	Commands         uint64 // commands in them (the proposer packs many to an entry)
	KeepAlives       uint64 // keep-alive commands among them (a replica's batch renews many sessions)
	KeepAliveEntries uint64 // entries that carried keep-alive commands
	Renewals         uint64 // session renewals those commands asked for
	Grants           uint64 // locks granted, at acquire or passed to a queue head
	Releases         uint64 // locks released by their holder
	Expiries         uint64 // sessions the group expired

	LeaderChanges      uint64 // times this replica saw a new raft leader
	ConnectionFailures uint64 // failed attempts to connect to a peer
	// ProposalLatency is how long calls on this replica waited for their
	// commands to apply, retries included, failures too.
	ProposalLatency Histogram

	// Contention are the default group's figures of this process's own
	// lock calls on this node.
	Contention Contention

	// Groups are the figures of every group this replica runs, the default
	// group (Name "") first, then Config.Groups in order; the fields above
	// are the default group's. ConnectionFailures is counted on the default
	// group only: a connection carries every group's traffic.
	Groups []GroupStats

	// Elections are the elections this node's sessions have campaigned in
	// since it started, by group and name, and whether one of them leads
	// each now. An election stays listed after its campaign ends, so that
	// its gauge reads 0 rather than vanishing; the list is bounded by the
	// elections this process campaigns in.
	Elections []ElectionLeading
}

// Contention are the figures of the lock calls (Acquire, TryAcquire, every
// mode) made by this node's sessions in one group, counted by the caller:
// unlike Grants and Releases, which every replica counts as it applies
// them, they describe this process's own waits and holds. Campaigns are
// not counted here (see Stats.Elections).
type Contention struct {
	// Wait is how long granted calls waited: from the call to its grant,
	// by this process's clock (a TryAcquire granted at once counts too).
	Wait Histogram
	// Hold is how long grants were held, from the grant to their end for
	// the holder (released, expired, maximum hold, session over).
	Hold Histogram
	// Grants counts the calls granted; Timeouts those whose context's
	// deadline passed first, Cancellations those whose context was
	// cancelled first (ErrUnavailable joined to them included). A Try
	// refused with ErrLocked, or a call ended by its session, is none of
	// them.
	Grants, Timeouts, Cancellations uint64
}

// ElectionLeading is one election this node's sessions campaign in.
type ElectionLeading struct {
	Group string // "" for the default group
	Name  string // as the group stores it
	// Leader reports whether one of this node's sessions leads it now, as
	// the holder knows it (a leadership whose session lapsed is over).
	Leader bool
}

// GroupStats are one group's figures on this replica; the fields mean what
// Stats' fields of the same names mean, for that group.
type GroupStats struct {
	GroupStatus

	Sessions, LocksHeld, Waiters int

	Entries, Commands, KeepAlives, KeepAliveEntries, Renewals uint64
	Grants, Releases, Expiries                                uint64
	LeaderChanges, ConnectionFailures                         uint64
	ProposalLatency                                           Histogram
	Contention                                                Contention
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

// Stats returns this replica's figures. It does no I/O: the state counts are
// read from this replica's copy of the state.
func (n *Node) Stats() Stats {
	st := n.Status()
	out := Stats{Status: st}
	for i, gs := range st.Groups {
		r := n.host.Group(gs.Name)
		if r == nil {
			continue // dropped since Status read it
		}
		c := r.Counters()
		cont := n.h.Contention(gs.Name)
		g := GroupStats{
			GroupStatus: gs,
			Sessions:    c.Sessions, LocksHeld: c.LocksHeld, Waiters: c.Waiters,
			Entries: c.Entries, Commands: c.Commands, KeepAlives: c.KeepAlives,
			KeepAliveEntries: c.KeepAliveEntries, Renewals: c.Renewals,
			Grants: c.Grants, Releases: c.Releases, Expiries: c.Expiries,
			LeaderChanges: c.LeaderChanges, ConnectionFailures: c.ConnectionFailures,
			ProposalLatency: histogram(c.ProposalLatency),
			Contention: Contention{Wait: histogram(cont.Wait), Hold: histogram(cont.Hold),
				Grants: cont.Grants, Timeouts: cont.Timeouts, Cancellations: cont.Cancellations},
		}
		out.Groups = append(out.Groups, g)
		if i == 0 {
			out.Sessions, out.LocksHeld, out.Waiters = g.Sessions, g.LocksHeld, g.Waiters
			out.Entries, out.Commands, out.KeepAlives = g.Entries, g.Commands, g.KeepAlives
			out.KeepAliveEntries, out.Renewals = g.KeepAliveEntries, g.Renewals
			out.Grants, out.Releases, out.Expiries = g.Grants, g.Releases, g.Expiries
			out.LeaderChanges, out.ConnectionFailures = g.LeaderChanges, g.ConnectionFailures
			out.ProposalLatency, out.Contention = g.ProposalLatency, g.Contention
		}
	}
	for _, l := range n.h.Leading() {
		out.Elections = append(out.Elections, ElectionLeading(l))
	}
	return out
}

func histogram(h replica.Histogram) Histogram {
	out := Histogram{Count: h.Count, Sum: h.Sum, Buckets: make([]Bucket, len(h.Buckets))}
	for i, b := range h.Buckets {
		out.Buckets[i] = Bucket(b)
	}
	return out
}
