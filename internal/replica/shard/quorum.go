package shard

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// monitor refreshes the membership the handshake checks addresses against
// (and the voters a call's no-quorum error names), and, while r's group has
// no leader, logs at most once a minute how many of its voters this replica
// reaches: a group that cannot form a quorum says why, rather than waiting
// in silence.
func (r *Shard) monitor(stop <-chan struct{}) {
	const (
		every = time.Second
		quiet = time.Minute // between two warnings
	)
	t := time.NewTicker(every)
	defer t.Stop()
	var warned time.Time
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if voters := r.host.Voters(r); len(voters) > 0 {
			r.voterAddrs.Store(&voters)
		}
		q, ok := r.quorumLost(r.Patience())
		if !ok || time.Since(warned) < quiet {
			continue
		}
		warned = time.Now()
		r.Logger().Warn("fencelock: "+q.String(), "unreached", q.unreached)
	}
}

// quorumView is what this replica sees of its group's quorum while the
// group has no leader: the same words serve the log and a call's error.
type quorumView struct {
	group      string // "" for the default group
	leaderless time.Duration
	nonVoting  bool // this replica is not one of the voters
	// reached of the others voters were heard from lately; need of total
	// voters make a quorum.
	reached, others, need, total int
	unreached                    []string // "id=addr" of the voters not heard from
}

// lacking reports whether the voters this replica reaches, itself
// included, are fewer than a quorum.
func (q quorumView) lacking() bool {
	have := q.reached
	if !q.nonVoting {
		have++
	}
	return have < q.need
}

func (q quorumView) String() string {
	group := "the default group"
	if q.group != "" {
		group = fmt.Sprintf("group %q", q.group)
	}
	reach := fmt.Sprintf("this replica reaches %d of the other %s", q.reached, Plural(q.others, "voter"))
	if q.nonVoting {
		reach = fmt.Sprintf("this replica (not a voter) reaches %d of the %s", q.reached, Plural(q.others, "voter"))
	}
	if len(q.unreached) > 0 {
		reach += " (unreached: " + strings.Join(q.unreached, ", ") + ")"
	}
	return fmt.Sprintf("%s has had no raft leader for %v: %s; a quorum needs %d of %d",
		group, q.leaderless.Round(100*time.Millisecond), reach, q.need, q.total)
}

// Patience is how long a group may go without a leader before this replica
// calls it stuck: an election takes one to two election timeouts, so a
// group without a leader for many of them is not electing one.
func (r *Shard) Patience() time.Duration { return max(20*r.ElectionTimeout(), 2*time.Second) }

// reachWindow is how recently a voter must have been heard from to count
// as reached: a few election timeouts, at least 3 s (heartbeats are far
// more frequent).
func (r *Shard) reachWindow() time.Duration { return max(3*r.ElectionTimeout(), 3*time.Second) }

// quorumLost reports whether r's group has had no leader for at least
// atLeast and this replica does not reach a quorum of its voters, and what
// it sees.
func (r *Shard) quorumLost(atLeast time.Duration) (quorumView, bool) {
	since := r.leaderlessSince.Load()
	vp := r.voterAddrs.Load()
	if since == 0 || r.LeaderID.Load() != 0 || vp == nil || len(*vp) == 0 {
		return quorumView{}, false
	}
	d := time.Since(time.Unix(0, since))
	if d < atLeast {
		return quorumView{}, false
	}
	voters := *vp
	window := r.reachWindow()
	q := quorumView{group: r.Name(), leaderless: d, nonVoting: true, total: len(voters), need: len(voters)/2 + 1}
	for _, id := range slices.Sorted(maps.Keys(voters)) {
		if id == r.cfg.ReplicaID {
			q.nonVoting = false
			continue
		}
		q.others++
		if r.host.Reached(id, window) {
			q.reached++
		} else {
			q.unreached = append(q.unreached, fmt.Sprintf("%d=%s", id, voters[id]))
		}
	}
	return q, q.lacking()
}
