package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/bench/lockbench"
)

// W10 is the many-groups workload (WORKLOADS.md), in two parts.
//
// (a) W10a: at each G of -w10-groups, a fresh cluster of 3 replicas runs G
// raft groups, every one voted by all 3: the default group and G-1 named
// ones, g1..g(G-1) (so G=1 is the default group alone, and G counts every
// group that runs). W2's workers (64) are spread over them: worker i's lock
// is bench/W10/<i> in the default group when i%G is 0, else
// bench/W10/<i>@g<i%G>. Before measuring, the point waits for the leader
// balancer to settle (every group has a leader all replicas agree on and no
// replica leads more than ⌈G/H⌉ of the groups it votes in), then measures
// the process's CPU over -w10-idle with no session open (the groups' idle
// cost: heartbeats, the balancer, the non-voting bookkeeping) and its live
// heap, then runs W2 for -duration after W2's 2 s warm-up. The replicas
// share this process, so memory is the Go heap after a collection (the
// cluster's, less the process's before it started), not RSS per replica;
// RSS is noted for the process as a whole.
//
// (b) W10b: 5 replicas, group a voted by 1,2,3 and b by 3,4,5 (the default
// group by all 5). One worker runs W1 (-iterations pairs) on bench/W10/0@b
// from replica 4: first alone (W10b-alone), then with replicas 1 and 2
// stopped, so that a has no quorum (W10b-a-down). Between the two, the run
// checks the fault is real: a session on replica 3 must fail to take a lock
// in a within 2 s, and replica 3 must still see no leader of a when the
// second run ends.
//
// A last line (w10Check) holds the targets: aggregate pairs/s at the
// largest G ≥ 1.0× at G=1, leaders per replica within the bound at every
// point, and b's p99 with a down ≤ 1.5× its p99 alone.
func w10(ctx context.Context, f flags, dir string) ([]lockbench.Result, w10Check, error) {
	gs, err := lockbench.ParsePoints(f.w10Groups)
	if err != nil {
		return nil, w10Check{}, fmt.Errorf("-w10-groups: %w", err)
	}
	var out []lockbench.Result
	for _, g := range gs {
		r, err := w10a(ctx, f, filepath.Join(dir, fmt.Sprintf("a-%d", g)), g)
		if err != nil {
			return out, w10Check{}, fmt.Errorf("W10a at %d groups: %w", g, err)
		}
		fmt.Println(r.JSON())
		out = append(out, r)
	}
	alone, down, err := w10b(ctx, f, filepath.Join(dir, "b"))
	if err != nil {
		return out, w10Check{}, fmt.Errorf("W10b: %w", err)
	}
	fmt.Println(alone.JSON())
	fmt.Println(down.JSON())
	out = append(out, alone, down)
	return out, w10Checks(out), nil
}

// w10GroupName is the name of the k-th group of a W10a point; 0 is the
// default group.
func w10GroupName(k int) string {
	if k == 0 {
		return ""
	}
	return fmt.Sprintf("g%d", k)
}

// w10Name is worker i's lock name when groups groups run.
func w10Name(i, groups int) string {
	if g := w10GroupName(i % groups); g != "" {
		return fmt.Sprintf("bench/W10/%d@%s", i, g)
	}
	return fmt.Sprintf("bench/W10/%d", i)
}

// w10a runs one point of W10 (a): groups groups over 3 replicas.
func w10a(ctx context.Context, f flags, dir string, groups int) (lockbench.Result, error) {
	res := lockbench.Result{System: "fencelock", Workload: "W10a"}
	const replicas = 3
	heap0 := heapMB()
	c, err := startCluster(ctx, dir, replicas, func(cfg *fencelock.Config) {
		for k := 1; k < groups; k++ {
			cfg.Groups = append(cfg.Groups, fencelock.GroupConfig{Name: w10GroupName(k), Voters: []uint64{1, 2, 3}})
		}
	})
	if err != nil {
		return res, err
	}
	defer c.Close()
	if _, err := c.Leader(ctx); err != nil {
		return res, err
	}
	t0 := time.Now()
	settled, err := settleLeaders(ctx, c, f.w10Settle)
	if err != nil {
		return res, err
	}
	settleTime := time.Since(t0)

	// Idle: no session, no call; what G groups cost by themselves.
	cpu0, i0 := cpuTime(), time.Now()
	select {
	case <-ctx.Done():
		return res, ctx.Err()
	case <-time.After(f.w10Idle):
	}
	idleCPU := (cpuTime() - cpu0).Seconds() / time.Since(i0).Seconds() * 100
	heap1, rss1 := heapMB(), rssMB()

	workers := f.workers
	if workers <= 0 {
		workers = 64
	}
	cpu0, l0 := cpuTime(), time.Now()
	applied0 := appliedEntries(c)
	r, err := lockbench.Throughput(ctx, c, workers, f.duration, func(i int) string { return w10Name(i, groups) })
	if err != nil {
		return res, err
	}
	// The process's CPU under load (warm-up included, as its pairs are not
	// counted, the rate is taken over the whole call): on a shared box the
	// pairs/s follow the CPU the process gets, and CPU per pair says what
	// a pair costs whatever the box's load.
	loadCPU := cpuTime() - cpu0
	// Raft entries per pair (warm-up included on both sides of the ratio
	// only as far as the rate covers it): how well each group's proposer
	// packs its commands. Every group's log takes the entries of its own
	// workers only, so spreading the workers over G groups leaves each
	// proposer fewer commands to share an entry.
	entries := appliedEntries(c) - applied0
	entriesPerPair := 0.0
	if pairs := r.OpsPerS * time.Since(l0).Seconds(); pairs > 0 {
		entriesPerPair = float64(entries) / pairs
	}
	loadCPUPct := loadCPU.Seconds() / time.Since(l0).Seconds() * 100
	cpuPerPair := 0.0
	if r.OpsPerS > 0 {
		cpuPerPair = loadCPUPct / 100 / r.OpsPerS * 1e6 // µs of CPU per measured pair, at the call's mean rate
	}
	end, _ := leaderView(c) // after the load, without waiting: did they stay spread?
	r.System, r.Workload = res.System, res.Workload
	clusterHeap := heap1 - heap0
	notes := []string{
		kv("groups", groups), kv("named_groups", groups-1), kv("replicas", replicas),
		kv("leader_bound", settled.maxBound()), kv("balanced", b2i(settled.ok)), kv("settle_ms", float64(settleTime.Milliseconds())),
		kv("max_leaders", settled.maxLeaders()), kv("max_leaders_after_load", end.maxLeaders()),
		kv("balanced_after_load", b2i(end.ok)),
	}
	for id := uint64(1); id <= replicas; id++ {
		notes = append(notes, kv(fmt.Sprintf("leaders_r%d", id), settled.leads[id]))
	}
	notes = append(notes,
		kv("idle_cpu_pct", idleCPU), kv("idle_cpu_pct_per_group", idleCPU/float64(groups)),
		kv("idle_s", f.w10Idle.Seconds()),
		kv("load_cpu_pct", loadCPUPct), kv("cpu_us_per_pair", cpuPerPair),
		kv("entries_per_pair", entriesPerPair),
		kv("cluster_heap_mb", clusterHeap), kv("heap_mb_per_group", clusterHeap/float64(groups)),
		kv("process_rss_mb", rss1), kv("settle_wait_s", f.w10Settle.Seconds()),
		"names=bench/W10/i@g(i%G)_default_group_when_i%G=0 cpu_and_heap_are_the_process_3_replicas_idle_no_sessions")
	r.Notes = strings.Join(notes, " ")
	if !settled.ok {
		r.Errors++ // the balancer did not get the leaders within the bound in time
	}
	return r, nil
}

// appliedEntries is the sum over the groups of the raft index the first
// running replica applied: the entries every group's log took, heartbeats'
// no-ops and membership included.
func appliedEntries(c *cluster) uint64 {
	for i := range c.Replicas() {
		if n := c.node(i); n != nil {
			var sum uint64
			for _, g := range n.Status().Groups {
				sum += g.AppliedIndex
			}
			return sum
		}
	}
	return 0
}

// leaders is who leads what, as the running replicas see it.
type leaders struct {
	ok bool // every group has one leader all agree on, and each replica leads at most its bound
	// stable: every group has one leader all agree on, and no replica over
	// its bound leads a group with a running voter below its own bound, so
	// the balancer can move nothing more. It differs from ok where the
	// bounds cannot all be met: 10 groups whose voters all vote in the
	// default group, over 9 replicas (W13), give every replica a bound of 1.
	stable bool
	leads  map[uint64]int    // groups led, by replica ID
	bound  map[uint64]int    // ⌈G/H⌉ of each voter: G groups it votes in, H replicas voting in them
	leader map[string]uint64 // by group name ("" default); 0 where they disagree or none is known
}

func (l leaders) maxLeaders() int {
	m := 0
	for _, n := range l.leads {
		m = max(m, n)
	}
	return m
}

func (l leaders) maxBound() int {
	m := 0
	for _, n := range l.bound {
		m = max(m, n)
	}
	return m
}

// leaderView reads every running replica's Status().Groups. A group's
// leader counts only where every running replica names the same one and it
// runs; the bound of each voter is the rule: a replica voting in G
// groups, with H replicas voting in them all together, leads at most ⌈G/H⌉.
func leaderView(c *cluster) (leaders, error) {
	l := leaders{ok: true, leads: map[uint64]int{}, bound: map[uint64]int{}, leader: map[string]uint64{}}
	voters := map[string][]uint64{}
	seen := map[string]bool{}
	running := map[uint64]bool{}
	for i := range c.Replicas() {
		n := c.node(i)
		if n == nil {
			continue
		}
		running[uint64(i+1)] = true
		for _, g := range n.Status().Groups {
			if !seen[g.Name] {
				seen[g.Name] = true
				l.leader[g.Name] = g.LeaderID
				for id := range g.Voters {
					voters[g.Name] = append(voters[g.Name], id)
				}
			} else if l.leader[g.Name] != g.LeaderID {
				l.leader[g.Name] = 0
			}
		}
	}
	if len(running) == 0 {
		return l, errors.New("no replica runs")
	}
	for name, id := range l.leader {
		if id == 0 || !running[id] {
			l.leader[name] = 0
			l.ok = false
			continue
		}
		l.leads[id]++
	}
	for id := range running {
		var g int
		hosts := map[uint64]bool{}
		for _, vs := range voters {
			if slices.Contains(vs, id) {
				g++
				for _, v := range vs {
					hosts[v] = true
				}
			}
		}
		if g > 0 {
			l.bound[id] = int(math.Ceil(float64(g) / float64(len(hosts))))
		}
		if l.leads[id] > l.bound[id] {
			l.ok = false
		}
	}
	l.stable = true
	for name, id := range l.leader {
		if id == 0 {
			l.stable = false
			continue
		}
		if l.leads[id] <= l.bound[id] {
			continue
		}
		for _, v := range voters[name] {
			if v != id && running[v] && l.leads[v] < l.bound[v] {
				l.stable = false // the balancer would give this group to v
			}
		}
	}
	return l, nil
}

// settleLeaders waits, up to within, until the leaders are spread as far as
// the balancer can (see leaders.stable), polling the replicas' local views
// (no event says "the balancer is done"). Not settling in time is a figure,
// not an error: the last view is returned with stable false.
func settleLeaders(ctx context.Context, c *cluster, within time.Duration) (leaders, error) {
	deadline := time.Now().Add(within)
	for {
		l, err := leaderView(c)
		if err != nil || l.stable || time.Now().After(deadline) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return l, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// w10b is W10 (b): group b's W1 alone, then while group a has no quorum.
func w10b(ctx context.Context, f flags, dir string) (alone, down lockbench.Result, err error) {
	c, err := startCluster(ctx, dir, 5, func(cfg *fencelock.Config) {
		cfg.Groups = []fencelock.GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}, {Name: "b", Voters: []uint64{3, 4, 5}}}
	})
	if err != nil {
		return alone, down, err
	}
	defer c.Close()
	if _, err := c.Leader(ctx); err != nil {
		return alone, down, err
	}
	settled, err := settleLeaders(ctx, c, f.w10Settle)
	if err != nil {
		return alone, down, err
	}
	const workerReplica, name = 3, "bench/W10/0@b" // replica 4: votes in b, not in a
	cl, err := c.NewClient(ctx, workerReplica, 10*time.Second)
	if err != nil {
		return alone, down, err
	}
	defer cl.Close(ctx)
	n := f.iterations
	if n <= 0 {
		n = 2000
	}
	if alone, err = lockbench.Uncontended(ctx, cl, name, n); err != nil {
		return alone, down, fmt.Errorf("alone: %w", err)
	}
	before, _ := leaderView(c)

	// Take a's quorum: stop two of its three voters (replica 3, which
	// votes in both a and b, stays up).
	t0 := time.Now()
	for _, i := range []int{0, 1} {
		if err := c.Stop(i); err != nil {
			return alone, down, err
		}
	}
	stopTime := time.Since(t0)
	// The default group (voted by all 5) keeps its quorum; wait for its
	// leader if it was on 1 or 2, so the run measures a down, not the
	// default group's election.
	if _, err := c.Leader(ctx); err != nil {
		return alone, down, err
	}
	if err := w10ProbeNoQuorum(ctx, c.node(2), "bench/W10/probe@a"); err != nil {
		return alone, down, err
	}
	if down, err = lockbench.Uncontended(ctx, cl, name, n); err != nil {
		return alone, down, fmt.Errorf("with a down: %w", err)
	}
	var aLeaderAtEnd uint64
	for _, g := range c.node(2).Status().Groups {
		if g.Name == "a" {
			aLeaderAtEnd = g.LeaderID
		}
	}
	after, _ := leaderView(c)
	if aLeaderAtEnd != 0 {
		return alone, down, fmt.Errorf("replica 3 sees replica %d lead a with 1 and 2 stopped: the fault was not in place", aLeaderAtEnd)
	}

	common := []string{kv("replicas", 5), "groups=default:1-5,a:1-3,b:3-5", kv("worker_replica", workerReplica+1),
		kv("balanced", b2i(settled.ok)), kv("max_leaders", settled.maxLeaders())}
	alone.System, alone.Workload = "fencelock", "W10b-alone"
	alone.Notes = strings.Join(append(slices.Clone(common),
		kv("b_leader", before.leader["b"]), kv("a_leader", before.leader["a"]), kv("default_leader", before.leader[""]),
		alone.Notes), " ")
	down.System, down.Workload = "fencelock", "W10b-a-down"
	down.Notes = strings.Join(append(slices.Clone(common),
		kv("b_leader", after.leader["b"]), kv("a_leader_seen_by_r3_at_end", aLeaderAtEnd), kv("default_leader", after.leader[""]),
		kv("default_leader_before_stop", before.leader[""]), kv("stop_ms", float64(stopTime.Milliseconds())),
		fmt.Sprintf("p50_over_alone=%.2f p99_over_alone=%.2f", ratio(down.P50, alone.P50), ratio(down.P99, alone.P99)),
		"stopped=1,2 a_has_no_quorum_checked_by_a_failed_acquire_on_r3", down.Notes), " ")
	return alone, down, nil
}

// w10ProbeNoQuorum checks the fault is in place: a session on n must not
// get a lock in a group without quorum within 2 s.
func w10ProbeNoQuorum(ctx context.Context, n *fencelock.Node, name string) error {
	s, err := n.NewSession(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := s.Acquire(pctx, name); err == nil {
		return fmt.Errorf("%s was granted with its group's voters 1 and 2 stopped: the fault was not in place", name)
	}
	return nil
}

func ratio(x, base float64) float64 {
	if base == 0 {
		return 0
	}
	return x / base
}

// w10Check is the line that says whether W10 met its targets.
type w10Check struct {
	Check  string `json:"check"`
	Target string `json:"target"`
	// AggregateRatio is pairs/s at the largest G over pairs/s at G=1.
	AggregateRatio float64 `json:"aggregate_ratio"`
	AggregateAt    int     `json:"aggregate_at_groups"`
	// LeadersWithinBound: at every W10a point and in W10b the balancer
	// settled in time.
	LeadersWithinBound bool `json:"leaders_within_bound"`
	// BP99Ratio is b's p99 with a down over its p99 alone.
	BP99Ratio float64 `json:"b_p99_ratio"`
	Pass      bool    `json:"pass"`
	Why       string  `json:"why,omitempty"`
}

// w10Checks reads the targets off W10's lines.
func w10Checks(rs []lockbench.Result) w10Check {
	c := w10Check{Check: "W10", Target: "aggregate_ratio >= 1.0 and leaders_within_bound and b_p99_ratio <= 1.5", LeadersWithinBound: true}
	var g1, gMax float64
	var why []string
	var alone, down *lockbench.Result
	for i, r := range rs {
		switch r.Workload {
		case "W10a":
			g, _ := r.Note("groups")
			if g == 1 {
				g1 = r.OpsPerS
			}
			if int(g) >= c.AggregateAt {
				c.AggregateAt, gMax = int(g), r.OpsPerS
			}
			if ok, _ := r.Note("balanced"); ok != 1 {
				c.LeadersWithinBound = false
				why = append(why, fmt.Sprintf("at %d groups the leaders were not spread within ⌈G/H⌉ in time", int(g)))
			}
		case "W10b-alone":
			alone = &rs[i]
			if ok, _ := r.Note("balanced"); ok != 1 {
				c.LeadersWithinBound = false
				why = append(why, "in W10b the leaders were not spread within ⌈G/H⌉ in time")
			}
		case "W10b-a-down":
			down = &rs[i]
		}
	}
	c.AggregateRatio = round2(ratio(gMax, g1))
	if alone != nil && down != nil {
		c.BP99Ratio = round2(ratio(down.P99, alone.P99))
	}
	if g1 == 0 {
		why = append(why, "no point at 1 group")
	} else if c.AggregateRatio < 1.0 {
		why = append(why, fmt.Sprintf("%d groups gave %.2fx the pairs/s of one", c.AggregateAt, c.AggregateRatio))
	}
	if alone == nil || down == nil {
		why = append(why, "no W10b lines")
	} else if c.BP99Ratio > 1.5 {
		why = append(why, fmt.Sprintf("b's p99 with a down was %.2fx its p99 alone", c.BP99Ratio))
	}
	c.Pass = len(why) == 0
	c.Why = strings.Join(why, "; ")
	return c
}

func (c w10Check) JSON() string {
	var b strings.Builder
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	_ = e.Encode(c)
	return strings.TrimSpace(b.String())
}

// sweepW10 runs W10 (a) at each G of -w10-groups, for its chart: the
// same points as -workload W10 prints, measured for -duration each.
func sweepW10(ctx context.Context, f flags, root string) (sweepFile, error) {
	sw, gs, err := newSweep("W10", "groups", "-w10-groups", f.w10Groups,
		fmt.Sprintf("W10 (a): G groups over 3 replicas, all voted by all 3 (the default group and G-1 named), 64 workers spread over them; %v measured per point after W2's 2s warm-up, once the leaders are spread; idle CPU over %v with no session; a fresh cluster per point", f.duration, f.w10Idle))
	if err != nil {
		return sw, err
	}
	return sweepAlone(f, root, sw, gs, "W10a", func(g int, dir string) (lockbench.Result, error) { return w10a(ctx, f, dir, g) })
}
