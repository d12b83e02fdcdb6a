package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	pprofile "github.com/google/pprof/profile"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/bench/lockbench"
	"github.com/fencelock/fencelock/internal/testhook"
)

// W13 is the placement workload (WORKLOADS.md): 9 replicas in this
// process on loopback TCP, 9 named groups g0..g8 of 3 voters each, group k
// voted by replicas k+1, k+2, k+3 (mod 9), so every replica votes in 3
// groups; W2's 64 workers, worker i's session on replica i%9+1 and its
// lock bench/W13/<i>@g<k> with k = (i%9 + 3 + i/9) mod 9, so that about
// two workers in three use a group their replica does not vote in. It
// runs once with every replica on PlaceEveryGroup (each runs all 9 groups,
// 6 of them non-voting) and once with PlaceOwnGroups (each runs its 3;
// the others through mirrors), for -duration after a 2 s warm-up.
//
// Per replica, in one process: CPU seconds over the measured window from a
// CPU profile whose samples carry the replica's label (pprof labels, which
// goroutines inherit: each replica is started, and its workers run, under
// its own label, so Dragonboat's goroutines, the transport's, the
// mirrors' and the sessions' count where they were started; the rest is
// "other"); raft entries applied per pair (the sum over the shards it runs
// of their applied index's advance, over the pairs of the whole run) and
// mirror entries applied per pair (the same over its mirrors). Memory is
// the process's (RSS and live heap), not a replica's: they share it.
func w13(ctx context.Context, f flags, dir string) ([]lockbench.Result, error) {
	var out []lockbench.Result
	for _, p := range []fencelock.Placement{fencelock.PlaceEveryGroup, fencelock.PlaceOwnGroups} {
		r, err := w13Run(ctx, f, filepath.Join(dir, p.String()), p)
		if err != nil {
			return out, fmt.Errorf("%v: %w", p, err)
		}
		fmt.Println(r.JSON())
		out = append(out, r)
	}
	return out, nil
}

const w13Hosts = 9

// w13Group is the name of group k and its voters.
func w13Group(k int) fencelock.GroupConfig {
	var voters []uint64
	for j := range 3 {
		voters = append(voters, uint64((k+j)%w13Hosts+1))
	}
	return fencelock.GroupConfig{Name: fmt.Sprintf("g%d", k), Voters: voters}
}

// w13Worker is worker i's replica index (0-based) and lock name.
func w13Worker(i int) (int, string) {
	h := i % w13Hosts
	k := (h + 3 + i/w13Hosts) % w13Hosts
	return h, fmt.Sprintf("bench/W13/%d@g%d", i, k)
}

func w13Label(i int) pprof.LabelSet { return pprof.Labels("replica", fmt.Sprint(i+1)) }

func w13Run(ctx context.Context, f flags, dir string, place fencelock.Placement) (lockbench.Result, error) {
	res := lockbench.Result{System: "fencelock", Workload: "W13"}
	members, err := freeMembers(w13Hosts)
	if err != nil {
		return res, err
	}
	var groups []fencelock.GroupConfig
	for k := range w13Hosts {
		groups = append(groups, w13Group(k))
	}
	c := &cluster{nodes: make([]*fencelock.Node, w13Hosts)}
	for i := range w13Hosts {
		c.cfgs = append(c.cfgs, fencelock.Config{ReplicaID: uint64(i + 1), Members: members,
			Dir: filepath.Join(dir, fmt.Sprint(i+1)), Logger: quiet, Groups: groups, Placement: place})
	}
	errs := make([]error, w13Hosts)
	var wg sync.WaitGroup
	for i := range w13Hosts {
		wg.Go(func() {
			pprof.Do(ctx, w13Label(i), func(ctx context.Context) {
				c.nodes[i], errs[i] = fencelock.Start(ctx, c.cfgs[i])
			})
		})
	}
	wg.Wait()
	defer c.Close()
	if err := errors.Join(errs...); err != nil {
		return res, err
	}
	perHost := 1 + w13Hosts
	if place == fencelock.PlaceOwnGroups {
		perHost = 1 + 3
	}
	if err := w13Ready(ctx, c, perHost); err != nil {
		return res, err
	}
	settled, err := settleLeaders(ctx, c, f.w10Settle)
	if err != nil {
		return res, err
	}

	workers := f.workers
	if workers <= 0 {
		workers = 64
	}
	sessions := make([]*fencelock.Session, workers)
	for i := range workers {
		h, _ := w13Worker(i)
		s, err := c.nodes[h].NewSession(ctx, fencelock.WithTTL(10*time.Second))
		if err != nil {
			return res, err
		}
		sessions[i] = s
	}
	defer func() {
		for _, s := range sessions {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.Close(cctx)
			cancel()
		}
	}()

	var (
		mu      sync.Mutex
		lat     []time.Duration
		pairs   int
		errCnt  int
		measure = make(chan struct{})
		stop    = make(chan struct{})
	)
	for i := range workers {
		h, name := w13Worker(i)
		wg.Go(func() {
			pprof.Do(ctx, w13Label(h), func(ctx context.Context) {
				var mine []time.Duration
				ok, bad, measuring := 0, 0, false
				for {
					select {
					case <-stop:
						mu.Lock()
						lat, pairs, errCnt = append(lat, mine...), pairs+ok, errCnt+bad
						mu.Unlock()
						return
					case <-measure:
						measuring = true
					default:
					}
					t0 := time.Now()
					l, err := sessions[i].Acquire(ctx, name)
					if err != nil {
						bad++
						continue
					}
					d := time.Since(t0)
					if err := l.Release(ctx); err != nil {
						bad++
						continue
					}
					if measuring {
						mine = append(mine, d)
						ok++
					}
				}
			})
		})
	}
	time.Sleep(2 * time.Second) // warm-up: sessions' parts and mirrors start
	raft0, mirror0 := w13Applied(c)
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		close(stop)
		wg.Wait()
		return res, err
	}
	cpu0, t0 := cpuTime(), time.Now()
	close(measure)
	time.Sleep(f.duration)
	close(stop)
	elapsed := time.Since(t0)
	pprof.StopCPUProfile()
	cpu := cpuTime() - cpu0
	raft1, mirror1 := w13Applied(c)
	wg.Wait()
	rss, heap := rssMB(), heapMB()

	byHost, other, err := w13CPU(prof.Bytes())
	if err != nil {
		return res, err
	}
	slices.Sort(lat)
	pct := func(q float64) float64 {
		if len(lat) == 0 {
			return 0
		}
		return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) / 1000
	}
	res.Workers, res.DurationS, res.Ops, res.Errors = workers, f.duration.Seconds(), pairs, errCnt
	res.OpsPerS = float64(int(float64(pairs)/elapsed.Seconds()*10)) / 10
	res.P50, res.P99, res.P999, res.Max = pct(.5), pct(.99), pct(.999), pct(1)
	notes := []string{"placement=" + place.String(), kv("replicas", w13Hosts), kv("groups", w13Hosts),
		kv3("process_cpu_s", cpu.Seconds()), kv3("other_cpu_s", other),
		kv("process_rss_mb", rss), kv("process_heap_mb", heap), kv("balanced", b2i(settled.ok)),
		kv("leaders_stable", b2i(settled.stable)), kv("max_leaders", settled.maxLeaders()), kv("leader_bound", settled.maxBound())}
	var raftSum, mirrorSum uint64
	for i := range w13Hosts {
		id := i + 1
		raft, mirror := raft1[i]-raft0[i], mirror1[i]-mirror0[i]
		raftSum += raft
		mirrorSum += mirror
		notes = append(notes, kv3(fmt.Sprintf("cpu_s_r%d", id), byHost[fmt.Sprint(id)]),
			kv3(fmt.Sprintf("raft_entries_per_pair_r%d", id), perPair(raft, pairs)),
			kv3(fmt.Sprintf("mirror_entries_per_pair_r%d", id), perPair(mirror, pairs)))
	}
	notes = append(notes, kv3("raft_entries_per_pair_all", perPair(raftSum, pairs)), kv3("mirror_entries_per_pair_all", perPair(mirrorSum, pairs)),
		"cpu_by_pprof_labels_per_replica names=bench/W13/i@g((i%9+3+i/9)%9) worker_i_on_replica_i%9+1 group_k_voters_k+1..k+3_mod_9 memory_is_the_process")
	res.Notes = strings.Join(notes, " ")
	return res, nil
}

// kv3 is kv with three decimals.
func kv3(k string, v float64) string { return k + "=" + strconv.FormatFloat(v, 'f', 3, 64) }

func perPair(n uint64, pairs int) float64 {
	if pairs == 0 {
		return 0
	}
	return float64(n) / float64(pairs)
}

// w13Ready waits until every replica runs perHost groups, each with a
// leader.
func w13Ready(ctx context.Context, c *cluster, perHost int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready := true
		for _, n := range c.nodes {
			st := n.Status()
			ready = ready && len(st.Groups) == perHost
			for _, g := range st.Groups {
				ready = ready && g.LeaderID != 0
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the groups did not start with leaders within 2m")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// w13Applied returns, per replica, the sum of the applied indexes of the
// shards it runs and of its mirrors.
func w13Applied(c *cluster) (raft, mirror []uint64) {
	raft, mirror = make([]uint64, w13Hosts), make([]uint64, w13Hosts)
	for i, n := range c.nodes {
		for _, g := range n.Status().Groups {
			if g.Name != "" {
				raft[i] += g.AppliedIndex
			}
		}
		for _, idx := range testhook.MirrorsApplied(n) {
			mirror[i] += idx
		}
	}
	return raft, mirror
}

// w13CPU sums a CPU profile's samples by replica label, in seconds; other
// is the CPU of samples without one.
func w13CPU(b []byte) (map[string]float64, float64, error) {
	p, err := pprofile.Parse(bytes.NewReader(b))
	if err != nil {
		return nil, 0, fmt.Errorf("CPU profile: %w", err)
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return nil, 0, errors.New("CPU profile without cpu samples")
	}
	out := map[string]float64{}
	other := 0.0
	for _, s := range p.Sample {
		v := float64(s.Value[idx]) / 1e9
		if l := s.Label["replica"]; len(l) > 0 {
			out[l[0]] += v
		} else {
			other += v
		}
	}
	return out, other, nil
}
