// Package metrics exports a fencelock replica's figures to Prometheus.
//
//	prometheus.MustRegister(metrics.NewCollector(node))
//
// The collector reads Node.Stats when scraped: the library counts with
// atomics on its own paths, and nothing of Prometheus runs, or allocates,
// between scrapes. Every metric carries the label replica, the replica's
// ID, so that the replicas of one process can share a registry, and the
// label group, the group it describes: empty for the default group (which
// Prometheus stores as no label, so a deployment without Config.Groups keeps
// its series), a Config.Groups name for the others. A replica reports every
// group it runs, voting or not; fencelock_role says which.
//
// What to alert on:
//   - fencelock_has_leader == 0 for longer than a few election timeouts: the
//     group (or this replica's link to it) has no quorum; calls fail with
//     ErrUnavailable.
//   - rate(fencelock_leader_changes_total) above a few per hour: an unstable
//     network or overloaded hosts.
//   - rate(fencelock_session_expiries_total) > 0 where holders should not
//     die: holders that pause or lose the group for a TTL.
//   - fencelock_proposal_duration_seconds p99 rising towards TTL − margin −
//     TTL/3 for the shortest session TTL: beyond it, holders give their
//     sessions up by their own clocks.
//   - fencelock_applied_index of a replica falling behind the leader's, or
//     fencelock_peer_connection_failures_total rising: a replica cut off.
//   - fencelock_role{role="voter"} summed over replicas below the voters
//     you run: a voter is down, one more failure loses the quorum.
//
// Contention, as this process's own calls saw it (Stats.Contention, per
// group, never per lock name, so the series stay few):
// fencelock_acquire_wait_seconds and fencelock_lock_hold_seconds
// (histograms), fencelock_acquire_grants_total,
// fencelock_acquire_timeouts_total and
// fencelock_acquire_cancellations_total; and fencelock_election_is_leader,
// 1 while one of this process's sessions leads the election named by the
// label election, 0 while it only campaigns (client-go's
// leader_election_master_status). What to alert on:
//   - histogram_quantile(0.99, rate(fencelock_acquire_wait_seconds_bucket))
//     near the callers' deadlines, or rate(fencelock_acquire_timeouts_total)
//     > 0: callers give up waiting; find the lock with the longest queue
//     and its holder (docs/operations.md).
//   - sum by (election) (fencelock_election_is_leader) over every process
//     that campaigns at 0 for longer than a TTL: nobody leads.
//
// fencelock_build_info is 1 with labels version, commit, codec and snapshot
// (the newest log and snapshot formats the replica reads): count by
// (version) shows which replicas an upgrade has reached.
// fencelock_log_format_written and fencelock_snapshot_format_written are
// the formats each group writes (its version gate): they rise once every
// replica of the group runs the new build (docs/operations.md,
// "Upgrading").
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencelock/fencelock"
)

// Collector is a prometheus.Collector of one replica's figures.
type Collector struct {
	node  *fencelock.Node
	descs descs
}

type descs struct {
	sessions, locks, waiters                 *prometheus.Desc
	grants, releases, expiries               *prometheus.Desc
	entries, keepAliveEntries, renewals      *prometheus.Desc
	leaderChanges, connFailures              *prometheus.Desc
	proposals                                *prometheus.Desc
	role, hasLeader, term, applied, snapshot *prometheus.Desc
	voters                                   *prometheus.Desc
	wait, hold                               *prometheus.Desc
	acquired, timeouts, cancellations        *prometheus.Desc
	isLeader                                 *prometheus.Desc
	buildInfo                                *prometheus.Desc
	writesCodec, writesSnapshot              *prometheus.Desc
}

// NewCollector returns the collector of node's figures.
func NewCollector(node *fencelock.Node) *Collector {
	labels := prometheus.Labels{"replica": strconv.FormatUint(node.Status().ReplicaID, 10)}
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc("fencelock_"+name, help, append([]string{"group"}, variable...), labels)
	}
	return &Collector{node: node, descs: descs{
		sessions:         d("sessions", "Open sessions in the group, as applied on this replica."),
		locks:            d("locks_held", "Locks held in the group, as applied on this replica."),
		waiters:          d("lock_waiters", "Requests queued behind lock holders, as applied on this replica."),
		grants:           d("grants_total", "Locks granted, counted as this replica applied them."),
		releases:         d("releases_total", "Locks released by their holders, counted as this replica applied them."),
		expiries:         d("session_expiries_total", "Sessions the group expired, counted as this replica applied them."),
		entries:          d("raft_entries_total", "Raft entries this replica applied."),
		keepAliveEntries: d("keep_alive_entries_total", "Raft entries carrying keep-alives that this replica applied."),
		renewals:         d("session_renewals_total", "Session renewals in the keep-alives this replica applied."),
		leaderChanges:    d("leader_changes_total", "Times this replica saw a new raft leader."),
		connFailures:     d("peer_connection_failures_total", "Failed attempts of this replica to connect to a peer; a peer back within 2 s of a broken connection (a restart) is not counted."),
		proposals:        d("proposal_duration_seconds", "Time calls on this replica waited for their commands to apply, retries included."),
		role:             d("role", "This replica's role: 1 for the current one of leader, voter (a voting follower), non_voting, removed.", "role"),
		hasLeader:        d("has_leader", "1 when this replica knows a raft leader."),
		term:             d("raft_term", "The raft term known to this replica."),
		applied:          d("applied_index", "The last raft log index applied on this replica."),
		snapshot:         d("snapshot_index", "The log index of this replica's latest snapshot."),
		voters:           d("voters", "Voting members, as last applied on this replica."),
		wait:             d("acquire_wait_seconds", "Time this process's granted lock calls waited, from the call to the grant."),
		hold:             d("lock_hold_seconds", "Time this process's lock grants were held, from the grant to their end."),
		acquired:         d("acquire_grants_total", "This process's lock calls granted."),
		timeouts:         d("acquire_timeouts_total", "This process's lock calls whose context's deadline passed before a grant."),
		cancellations:    d("acquire_cancellations_total", "This process's lock calls whose context was cancelled before a grant."),
		writesCodec:      d("log_format_written", "The log entry format version the group writes (its version gate), as applied on this replica."),
		writesSnapshot:   d("snapshot_format_written", "The snapshot format version the group writes (its version gate), as applied on this replica."),
		isLeader:         d("election_is_leader", "1 while a session of this process leads the election, 0 while it only campaigns in it.", "election"),
		// Per replica, not per group: every group of a process runs one build.
		buildInfo: prometheus.NewDesc("fencelock_build_info",
			"Always 1; the labels say what this replica runs: the fencelock version and commit, and the newest log (codec) and snapshot format versions it reads.",
			[]string{"version", "commit", "codec", "snapshot"}, labels),
	}}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	d := &c.descs
	for _, desc := range []*prometheus.Desc{d.sessions, d.locks, d.waiters, d.grants, d.releases,
		d.expiries, d.entries, d.keepAliveEntries, d.renewals, d.leaderChanges, d.connFailures, d.proposals, d.role, d.hasLeader, d.term,
		d.applied, d.snapshot, d.voters, d.wait, d.hold, d.acquired, d.timeouts, d.cancellations, d.isLeader, d.buildInfo,
		d.writesCodec, d.writesSnapshot} {
		ch <- desc
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.node.Stats()
	v := st.Version
	ch <- prometheus.MustNewConstMetric(c.descs.buildInfo, prometheus.GaugeValue, 1,
		v.Version, v.Commit, strconv.Itoa(v.Codec), strconv.Itoa(v.Snapshot))
	for _, g := range st.Groups {
		c.collect(ch, &g)
	}
	for _, e := range st.Elections {
		ch <- prometheus.MustNewConstMetric(c.descs.isLeader, prometheus.GaugeValue, b2f(e.Leader), e.Group, e.Name)
	}
}

// histogram sends h as a Prometheus histogram in seconds.
func histogram(ch chan<- prometheus.Metric, desc *prometheus.Desc, h fencelock.Histogram, group string) {
	buckets := make(map[float64]uint64, len(h.Buckets))
	for _, b := range h.Buckets {
		buckets[b.UpperBound.Seconds()] = b.Count
	}
	ch <- prometheus.MustNewConstHistogram(desc, h.Count, h.Sum.Seconds(), buckets, group)
}

// collect sends one group's figures.
func (c *Collector) collect(ch chan<- prometheus.Metric, st *fencelock.GroupStats) {
	d := &c.descs
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append([]string{st.Name}, labels...)...)
	}
	counter := func(desc *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), st.Name)
	}
	gauge(d.sessions, float64(st.Sessions))
	gauge(d.locks, float64(st.LocksHeld))
	gauge(d.waiters, float64(st.Waiters))
	counter(d.grants, st.Grants)
	counter(d.releases, st.Releases)
	counter(d.expiries, st.Expiries)
	counter(d.entries, st.Entries)
	counter(d.keepAliveEntries, st.KeepAliveEntries)
	counter(d.renewals, st.Renewals)
	counter(d.leaderChanges, st.LeaderChanges)
	if st.Name == "" {
		counter(d.connFailures, st.ConnectionFailures)
	}

	histogram(ch, d.proposals, st.ProposalLatency, st.Name)
	histogram(ch, d.wait, st.Contention.Wait, st.Name)
	histogram(ch, d.hold, st.Contention.Hold, st.Name)
	counter(d.acquired, st.Contention.Grants)
	counter(d.timeouts, st.Contention.Timeouts)
	counter(d.cancellations, st.Contention.Cancellations)

	role := "voter"
	switch {
	case st.Removed:
		role = "removed"
	case st.IsLeader:
		role = "leader"
	case st.NonVoting:
		role = "non_voting"
	}
	for _, r := range []string{"leader", "voter", "non_voting", "removed"} {
		gauge(d.role, b2f(r == role), r)
	}
	gauge(d.hasLeader, b2f(st.LeaderID != 0))
	gauge(d.term, float64(st.Term))
	gauge(d.applied, float64(st.AppliedIndex))
	gauge(d.snapshot, float64(st.LastSnapshotIndex))
	gauge(d.voters, float64(len(st.Voters)))
	gauge(d.writesCodec, float64(st.Writes.Codec))
	gauge(d.writesSnapshot, float64(st.Writes.Snapshot))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
