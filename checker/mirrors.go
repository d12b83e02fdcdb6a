package checker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// failoverBound is how soon a mirror must leave a voter cut off from its
// group, and a replica that reaches the group through it grant there
// again: a session's TTL is what a holder on that replica can afford
// (TestMirrorLeavesAVoterCutOffFromItsGroup requires the move within one),
// and the rest is slack for a loaded machine. A mirror that stays never
// meets it.
const failoverBound = 10 * time.Second

// answerSlack is how far past its deadline a call may return and still
// count as answered within its bound: twice the deadline, for a loaded
// machine (on the shared 2-core machine one drop-create run in five saw
// four calls of one moment answer 4.1-4.7s into their 2s, sessions
// expiring with them: the whole process stalled). A call that waits on
// something other than its deadline (a stream's 15s idle, a table read's
// own limit) still shows.
func answerSlack(e *env) time.Duration { return 2 * e.opTimeout }

// MirrorVoterCut cuts the voter that feeds a mirror off from the rest of
// its group while the mirror's host still reaches it (an asymmetric
// partition: the voter's pings keep the stream up, and only its answers,
// no quorum, or its want of a leader say it cannot reach the group). It
// needs PlaceOwnGroups, where replicas that do not vote in a group reach
// it through a mirror.
//
// It holds a lock in the group from a session on the mirror's host, moves
// the group's leadership off the voter (so the cut leaves it a follower
// without a leader, the case pings hide), and cuts the voter from the
// group's other voters both ways. Then it checks, naming each: every
// mirror of the group on that voter leaves it for another voter within
// failoverBound; each such host grants in the group within failoverBound;
// the held lock stays held with its token (the group kept its quorum);
// and every replica answers a call in every group, or fails it with a
// named error, within the call's deadline (answersWithin). After healing,
// every replica grants in every group within recoveryBound.
var MirrorVoterCut = Fault{"mirror-voter-cut", func(ctx context.Context, e *env) error {
	c := e.c
	group, server, hosts, err := mirrorTarget(ctx, e)
	if err != nil {
		return err
	}
	home := hosts[0]
	n := c.Node(home)
	if n == nil {
		return fmt.Errorf("mirror-voter-cut: replica %d is not running", home)
	}
	hctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	// A TTL that outlives failoverBound: the claim is that the mirror
	// moves, and the lock is what a slow move would cost.
	s, err := n.NewSession(hctx, fencelock.WithTTL(4*e.ttl))
	if err != nil {
		return fmt.Errorf("mirror-voter-cut: holder's session on replica %d: %w", home, err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	held, err := s.Acquire(hctx, atGroup("mirror/held", group))
	if err != nil {
		return fmt.Errorf("mirror-voter-cut: holder's lock in group %q on replica %d: %w", group, home, err)
	}
	if err := leadersAway(ctx, e, []string{group}, []uint64{server}); err != nil {
		return err
	}
	others := slices.DeleteFunc(slices.Clone(c.voters(group)), func(id uint64) bool { return id == server })
	for _, o := range others {
		c.Net.Cut(c.Addr(server), c.Addr(o))
		c.Net.Cut(c.Addr(o), c.Addr(server))
	}
	cut := time.Now()
	e.h.logf("mirror-voter-cut: voter %d of group %q, which feeds the mirrors on %v, cut off from %v (reachable from the rest)",
		server, group, hosts, others)

	var wg sync.WaitGroup
	for _, id := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mirrorLeaves(ctx, e, id, group, server, cut)
			if err := probeGroup(ctx, e, id, group, failoverBound); err != nil {
				e.h.violation("mirror-voter-cut: replica %d granted nothing in group %q within %v while voter %d, which fed its mirror, was cut off from %v: %v",
					id, group, failoverBound, server, others, err)
			}
		}()
	}
	wg.Wait()
	answersWithin(ctx, e, "mirror-voter-cut")
	if err := wait(ctx, time.Until(cut.Add(hold(e)))); err != nil {
		return err
	}
	answersWithin(ctx, e, "mirror-voter-cut")
	select {
	case <-held.Done():
		e.h.violation("mirror-voter-cut: %q lost by its holder on replica %d while group %q kept its quorum (voter %d cut off from %v): %v",
			held.Name(), home, group, server, others, held.Err())
	default:
		ictx, cancel := context.WithTimeout(ctx, recoveryBound)
		info, err := c.Node(others[0]).Inspect(ictx, held.Name())
		cancel()
		if err != nil || !info.Held || info.Token != held.Token() {
			e.h.violation("mirror-voter-cut: %q is not held with token %d while voter %d was cut off: %+v, %v",
				held.Name(), held.Token(), server, info, err)
		}
		rctx, cancel := context.WithTimeout(ctx, e.opTimeout)
		if err := held.Release(rctx); err != nil {
			e.h.logf("mirror-voter-cut: release of %q: %v", held.Name(), err)
		}
		cancel()
	}

	c.Net.Heal()
	for _, id := range c.IDs() {
		for _, g := range c.groupNames() {
			if err := probeGroup(ctx, e, id, g, recoveryBound); err != nil {
				e.h.violation("mirror-voter-cut: replica %d does not grant in group %q %v after healing: %v", id, g, recoveryBound, err)
			}
		}
	}
	return nil
}}

// mirrorTarget waits (at most recoveryBound) for a named group with at
// least three voters whose mirror, on some replica, a voter feeds, and
// returns the group, that voter and every running replica whose mirror of
// the group it feeds.
func mirrorTarget(ctx context.Context, e *env) (group string, server uint64, hosts []uint64, err error) {
	tctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	for {
		for _, id := range e.c.IDs() {
			n := e.c.Node(id)
			if n == nil {
				continue
			}
			for _, ms := range n.Status().Mirrors {
				if ms.Name == "" || ms.Mirror == 0 || len(e.c.voters(ms.Name)) < 3 {
					continue
				}
				if group == "" {
					group, server = ms.Name, ms.Mirror
				}
				if ms.Name == group && ms.Mirror == server {
					hosts = append(hosts, id)
				}
			}
		}
		if group != "" {
			return group, server, hosts, nil
		}
		if err := wait(tctx, 50*time.Millisecond); err != nil {
			return "", 0, nil, fmt.Errorf("mirror-voter-cut: no mirror of a group of 3 voters or more is fed within %v: run it with PlaceOwnGroups on 5 replicas", recoveryBound)
		}
	}
}

// mirrorServer returns the voter that feeds replica id's mirror of group, 0
// if none does (or id is not running, or keeps no such mirror).
func mirrorServer(e *env, id uint64, group string) uint64 {
	n := e.c.Node(id)
	if n == nil {
		return 0
	}
	for _, ms := range n.Status().Mirrors {
		if ms.Name == group {
			return ms.Mirror
		}
	}
	return 0
}

// mirrorLeaves checks that replica id's mirror of group leaves server
// (cut off from its group at cut) for another voter within failoverBound,
// and notes how long it took.
func mirrorLeaves(ctx context.Context, e *env, id uint64, group string, server uint64, cut time.Time) {
	for {
		if to := mirrorServer(e, id, group); to != 0 && to != server {
			e.h.logf("mirror-voter-cut: replica %d's mirror of group %q left voter %d for %d %v after the cut",
				id, group, server, to, time.Since(cut).Round(time.Millisecond))
			return
		}
		if time.Since(cut) > failoverBound {
			e.h.violation("mirror-voter-cut: replica %d's mirror of group %q stayed on voter %d, cut off from its group, for %v (it never failed over)",
				id, group, server, failoverBound)
			return
		}
		if wait(ctx, 20*time.Millisecond) != nil {
			return
		}
	}
}

// namedErrors are the errors a call may fail with and still have answered:
// each says why, and errors.Is finds it.
var namedErrors = []error{fencelock.ErrUnavailable, fencelock.ErrNoQuorum, fencelock.ErrGroupMoved,
	fencelock.ErrGroupDropped, fencelock.ErrUnknownGroup, fencelock.ErrClosed, fencelock.ErrRemoved,
	fencelock.ErrSessionExpired, fencelock.ErrSessionClosed, fencelock.ErrLocked, fencelock.ErrNotHeld,
	fencelock.ErrNotLeader, fencelock.ErrRevoked, fencelock.ErrElectionTaken, fencelock.ErrNoLeader}

// named reports whether err is nil or one of namedErrors.
func named(err error) bool {
	return err == nil || slices.ContainsFunc(namedErrors, func(n error) bool { return errors.Is(err, n) })
}

// answersWithin asks every running replica, in every group, for a
// linearizable read of a lock (Node.Inspect) with the clients' call
// deadline, all at once, and checks that each answers, or fails with a
// named error, within that deadline (and answerSlack): a replica that
// hangs past a caller's deadline, or fails with an error no caller can
// tell apart, is a violation (prefixed by fault).
func answersWithin(ctx context.Context, e *env, fault string) {
	var wg sync.WaitGroup
	for _, id := range e.c.IDs() {
		n := e.c.Node(id)
		if n == nil {
			continue
		}
		for _, g := range e.c.groupNames() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cctx, cancel := context.WithTimeout(ctx, e.opTimeout)
				defer cancel()
				began := time.Now()
				_, err := n.Inspect(cctx, atGroup("answers/x", g))
				took := time.Since(began)
				if ctx.Err() != nil {
					return
				}
				if took > e.opTimeout+answerSlack(e) {
					e.h.violation("%s: replica %d answered a call in group %q after %v, past its %v deadline: %v",
						fault, id, g, took.Round(time.Millisecond), e.opTimeout, err)
				}
				if !named(err) {
					e.h.violation("%s: replica %d failed a call in group %q with no named error: %v", fault, id, g, err)
				}
			}()
		}
	}
	wg.Wait()
}
