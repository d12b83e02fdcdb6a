package checker

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/transport"
)

// Fault is one thing the nemesis does to the cluster: it injects the fault,
// holds it, and heals it before returning.
type Fault struct {
	Name  string
	Apply func(ctx context.Context, e *env) error
}

// recoveryBound is how soon after healing a partition every replica's side
// must grant again.
const recoveryBound = 20 * time.Second

// hold is how long most faults last: longer than an election and than a
// client's session TTL, so that sessions expire and leaders change.
func hold(e *env) time.Duration { return 2 * e.ttl }

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func leader(ctx context.Context, e *env) (uint64, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return e.c.Leader(lctx)
}

func follower(e *env, leader uint64) uint64 {
	ids := e.c.IDs()
	for {
		id := ids[e.rng.IntN(len(ids))]
		if id != leader {
			return id
		}
	}
}

// LeaderCrash crashes the leader's replica (Cluster.Crash: the commit index
// its log store defers is lost) and restarts it on its dir.
var LeaderCrash = Fault{"leader-crash", func(ctx context.Context, e *env) error {
	l, err := leader(ctx, e)
	if err != nil {
		return err
	}
	return crash(ctx, e, l)
}}

// FollowerCrash crashes a follower's replica and restarts it on its dir.
var FollowerCrash = Fault{"follower-crash", func(ctx context.Context, e *env) error {
	l, err := leader(ctx, e)
	if err != nil {
		return err
	}
	return crash(ctx, e, follower(e, l))
}}

func crash(ctx context.Context, e *env, id uint64) error {
	e.c.Crash(id)
	if err := wait(ctx, hold(e)); err != nil {
		return err
	}
	return e.c.Start(id)
}

// MisconfiguredReplica crashes a follower and starts, in its place, a replica
// with the wrong Members (one peer's address off) and an empty Dir, as an
// operator's typo and a wiped disk would. Alone it would bootstrap a group
// of its own; its peers must refuse it, so it grants nothing and crashes
// nobody, while the rest of the group goes on. Then it is restarted right,
// on its own Dir.
var MisconfiguredReplica = Fault{"misconfigured-replica", func(ctx context.Context, e *env) error {
	l, err := leader(ctx, e)
	if err != nil {
		return err
	}
	id := follower(e, l)
	e.c.Crash(id)
	err = e.c.StartWith(id, func(cfg *fencelock.Config) {
		cfg.Members = maps.Clone(cfg.Members)
		cfg.Members[l] = e.c.Net.Addr(100 + l)
		cfg.Dir += "-misconfigured"
	})
	if err != nil {
		return err
	}
	if err := wait(ctx, hold(e)); err != nil {
		return err
	}
	e.c.Crash(id)
	return e.c.Start(id)
}}

// FullRestart crashes every replica at once, as a power loss would, then
// starts them all on their dirs: every one of them may have lost the
// commit index of entries it had applied and acknowledged.
var FullRestart = Fault{"full-restart", func(ctx context.Context, e *env) error {
	e.c.CrashAll()
	if err := wait(ctx, e.ttl/2); err != nil {
		return err
	}
	return e.c.StartAll()
}}

// LeaderIsolated cuts the leader off from everyone.
var LeaderIsolated = Fault{"leader-isolated", func(ctx context.Context, e *env) error {
	l, err := leader(ctx, e)
	if err != nil {
		return err
	}
	e.c.Net.Isolate(e.c.Addr(l))
	return partitioned(ctx, e, []uint64{l})
}}

// HolderIsolated cuts off the replica of a client that was just granted the
// slow lock (the first time, and every other time) or elected leader (the
// second), in the middle of its critical section (term): the group expires
// its session and grants the lock (elects the next candidate), and the
// holder must have stopped (Done closed, by its own clock) before that
// grant.
var HolderIsolated = Fault{"holder-isolated", func(ctx context.Context, e *env) error {
	// A leader's term is short: cut it off at its start, so that it is
	// still acting (not resigning) when the group elects its successor.
	keys, recent := []string{slowLock}, e.ttl/5
	if e.holderIsolations%2 == 1 {
		keys, recent = nil, e.ttl/20
		for _, name := range e.elections {
			keys = append(keys, electionKey(name))
		}
	}
	e.holderIsolations++
	for {
		var holders []*belief
		e.beliefs.mu.Lock()
		for _, k := range keys {
			for _, b := range e.beliefs.m[k] {
				if !b.releasing && !b.paused && time.Since(b.at) < recent {
					holders = append(holders, b)
				}
			}
		}
		e.beliefs.mu.Unlock()
		if len(holders) > 0 {
			b := holders[e.rng.IntN(len(holders))]
			// It stays where it is, for the group to expire its session.
			defer b.c.pin()()
			// A restart moves b.node under the beliefs' lock (resume.go),
			// and none is under way once pin returns.
			e.beliefs.mu.Lock()
			node := b.node
			e.beliefs.mu.Unlock()
			e.c.Net.Isolate(e.c.Addr(node))
			return partitioned(ctx, e, []uint64{node})
		}
		if err := wait(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}}

// PartitionLeaderInMinority splits the replicas with the leader on the
// smaller side; PartitionLeaderInMajority keeps it on the larger one.
var (
	PartitionLeaderInMinority = Fault{"partition-leader-minority", func(ctx context.Context, e *env) error {
		return partition(ctx, e, true)
	}}
	PartitionLeaderInMajority = Fault{"partition-leader-majority", func(ctx context.Context, e *env) error {
		return partition(ctx, e, false)
	}}
)

func partition(ctx context.Context, e *env, leaderInMinority bool) error {
	l, err := leader(ctx, e)
	if err != nil {
		return err
	}
	ids := e.c.IDs()
	size := (len(ids) - 1) / 2
	var minority, majority []uint64
	if leaderInMinority {
		minority = append(minority, l)
	}
	for _, id := range e.rng.Perm(len(ids)) {
		r := ids[id]
		switch {
		case r == l && leaderInMinority:
		case r == l:
			majority = append(majority, r)
		case len(minority) < size:
			minority = append(minority, r)
		default:
			majority = append(majority, r)
		}
	}
	addrs := func(ids []uint64) []string {
		var out []string
		for _, id := range ids {
			out = append(out, e.c.Addr(id))
		}
		return out
	}
	e.c.Net.Partition(addrs(minority), addrs(majority))
	return partitioned(ctx, e, minority)
}

// partitioned holds a partition just made, heals it, records the window
// (from after the cut to before the heal), and checks that every replica of
// the cut-off side grants again soon.
func partitioned(ctx context.Context, e *env, minority []uint64) error {
	start := e.h.now()
	err := wait(ctx, hold(e))
	w := Window{Start: start, End: e.h.now(), Minority: map[uint64]bool{}}
	e.c.Net.Heal()
	for _, id := range minority {
		w.Minority[id] = true
	}
	e.h.window(w)
	if err != nil {
		return err
	}
	healed := time.Now()
	for _, id := range minority {
		for _, g := range e.c.groupNames() {
			if err := probeGroup(ctx, e, id, g, recoveryBound); err != nil {
				e.h.violation("replica %d does not grant in group %q %v after healing: %v", id, g, recoveryBound, err)
			}
		}
	}
	if took := time.Since(healed); took > recoveryBound {
		e.h.violation("grants resumed %v after healing, over %v", took, recoveryBound)
	}
	return nil
}

// LossyLinks loses 5% of messages on every link; SlowLinks delays them by
// 20-40ms.
var (
	LossyLinks = Fault{"lossy-links", func(ctx context.Context, e *env) error {
		return links(ctx, e, transport.LinkFault{Drop: 0.05})
	}}
	SlowLinks = Fault{"slow-links", func(ctx context.Context, e *env) error {
		return links(ctx, e, transport.LinkFault{Delay: 20 * time.Millisecond, Jitter: 20 * time.Millisecond})
	}}
)

func links(ctx context.Context, e *env, f transport.LinkFault) error {
	e.c.Net.SetAll(f)
	err := wait(ctx, 2*hold(e))
	e.c.Net.Heal()
	return err
}

// ClientFreeze pauses a client holding a lock, in its critical section,
// for 2.5 TTLs: its whole process, timers and all (testhook.Pause).
var ClientFreeze = Fault{"client-freeze", func(ctx context.Context, e *env) error {
	for ctx.Err() == nil {
		for _, i := range e.rng.Perm(len(e.clients)) {
			p := &pauseRequest{d: 5 * e.ttl / 2, done: make(chan struct{})}
			if e.clients[i].requestPause(ctx, p, e.ttl/2) {
				return wait(ctx, p.d+e.ttl)
			}
		}
	}
	return ctx.Err()
}}

// ClockJump steps the wall clock of every replica and client forwards by
// an hour, then back by two: the monotonic clock flows on, and nothing may
// expire early or live longer.
var ClockJump = Fault{"clock-jump", func(ctx context.Context, e *env) error {
	if err := e.c.Clock.Jump(time.Hour); err != nil {
		return err
	}
	if err := wait(ctx, hold(e)); err != nil {
		return err
	}
	if err := e.c.Clock.Jump(-2 * time.Hour); err != nil {
		return err
	}
	return wait(ctx, hold(e))
}}

// SnapshotCatchUp crashes a follower and keeps it down until the log is compacted past it (the
// scenario must snapshot often), restarts it, and checks that it caught up
// from a snapshot the network carried.
var SnapshotCatchUp = Fault{"snapshot-catch-up", func(ctx context.Context, e *env) error {
	l, err := leader(ctx, e)
	if err != nil {
		return err
	}
	f := follower(e, l)
	chunks := e.c.Net.Stats(e.c.Addr(f)).Chunks
	e.c.Crash(f)
	from := appliedOn(e, l)
	deadline := time.Now().Add(60 * time.Second)
	for appliedOn(e, l) < from+snapshotEntries+compactionOverhead+50 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the log did not grow enough to be compacted")
		}
		if err := wait(ctx, 50*time.Millisecond); err != nil {
			return err
		}
		if n := e.c.Node(l); n == nil || !n.Status().IsLeader {
			if l, err = leader(ctx, e); err != nil {
				return err
			}
		}
	}
	if err := e.c.Start(f); err != nil {
		return err
	}
	target := appliedOn(e, l)
	for appliedOn(e, f) < target {
		if time.Now().After(deadline) {
			e.h.violation("replica %d did not catch up after restart", f)
			return nil
		}
		if err := wait(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	if e.c.Net.Stats(e.c.Addr(f)).Chunks == chunks {
		e.h.violation("replica %d caught up without a snapshot", f)
	}
	return nil
}}

const snapshotEntries, compactionOverhead = 100, 20

func appliedOn(e *env, id uint64) uint64 {
	if n := e.c.Node(id); n != nil {
		return n.Status().AppliedIndex
	}
	return 0
}
