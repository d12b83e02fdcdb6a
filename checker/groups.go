package checker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fencelock/fencelock"
)

// groupsFor returns the named groups every scenario runs beside the default
// one: on 5 replicas, "a" voted by 1,2,3 and "b" by 3,4,5, so that each has
// a voter set of its own and a quorum loss of one leaves the other (and the
// default group) with theirs; on 3, both voted by all three, since any
// smaller voter set of 3 replicas is one replica.
func groupsFor(size int) []fencelock.GroupConfig {
	if size >= 5 {
		return []fencelock.GroupConfig{{Name: "a", Voters: []uint64{1, 2, 3}}, {Name: "b", Voters: []uint64{3, 4, 5}}}
	}
	all := make([]uint64, size)
	for i := range all {
		all[i] = uint64(i + 1)
	}
	return []fencelock.GroupConfig{{Name: "a", Voters: all}, {Name: "b", Voters: slices.Clone(all)}}
}

// groupOf returns the group a lock's name (or election key) lives in
// (fencelock.SplitName): "" for the default group.
func groupOf(name string) string {
	_, group, _ := fencelock.SplitName(name)
	return group
}

// groupNames returns "" (the default group) and every named group.
func (c *Cluster) groupNames() []string {
	names := []string{""}
	for _, g := range c.groups {
		names = append(names, g.Name)
	}
	return names
}

// voters returns the voters of group ("" is the default: every replica).
func (c *Cluster) voters(group string) []uint64 {
	for _, g := range c.groups {
		if g.Name == group {
			return g.Voters
		}
	}
	return c.IDs()
}

// hasQuorum reports whether the replicas in side include a majority of
// group's voters.
func (c *Cluster) hasQuorum(group string, side map[uint64]bool) bool {
	vs := c.voters(group)
	n := 0
	for _, v := range vs {
		if side[v] {
			n++
		}
	}
	return 2*n > len(vs)
}

// grantKey identifies a grant: tokens come from their own group's log, so a
// token orders (and names) only grants of its own group.
type grantKey struct {
	group string
	token uint64
}

func keyOf(op Op) grantKey { return grantKey{groupOf(op.Lock), op.Token} }

// byGroup splits ops by the group of their lock.
func byGroup(ops []Op) map[string][]Op {
	out := map[string][]Op{}
	for _, op := range ops {
		g := groupOf(op.Lock)
		out[g] = append(out[g], op)
	}
	return out
}

// oneGroupBound is how soon after a group loses its quorum every other
// group whose quorum survives must grant: generous (an election timeout is
// far shorter) so that a loaded machine does not fail it; the count of
// grants, not their speed, is what is asserted.
const oneGroupBound = 20 * time.Second

// OneGroupQuorum stops exactly the voters one named group needs (the
// fewest of its voters that take its quorum, chosen among those that vote
// in the fewest other groups) and checks that the failure stays inside that
// group: every group whose quorum survives grants a fresh lock, from a
// surviving replica, within oneGroupBound; locks held there before the
// fault by a session on a surviving replica stay held (Done open, the
// group's read shows the same token) throughout; the lost group grants
// nothing meanwhile, and the same session's lock in it closes its Done by
// the holder's clock (within TTL plus slack) while its locks elsewhere stay.
// Then the stopped replicas restart on their dirs and the lost group grants
// again. It needs a cluster where some group survives (5 replicas).
var OneGroupQuorum = Fault{"one-group-quorum", func(ctx context.Context, e *env) error {
	c := e.c
	target, stop, survivors := quorumLossPlan(c)
	if target == "" {
		return errors.New("no named group can lose its quorum while another keeps its own: run it on 5 replicas")
	}
	var home uint64 // a surviving replica, for the session that holds
	for _, id := range c.IDs() {
		if !slices.Contains(stop, id) {
			home = id
			break
		}
	}
	n := c.Node(home)
	if n == nil {
		return fmt.Errorf("replica %d is not running", home)
	}
	// Hold a lock in every group, the target's included, on one session.
	hctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	s, err := n.NewSession(hctx, fencelock.WithTTL(e.ttl))
	if err != nil {
		return fmt.Errorf("holder's session on replica %d: %w", home, err)
	}
	defer s.Close(context.WithoutCancel(ctx))
	held := map[string]*fencelock.Lock{}
	for _, g := range append([]string{target}, survivors...) {
		l, err := s.Acquire(hctx, atGroup("quorum/held", g))
		if err != nil {
			return fmt.Errorf("holder's lock in group %q: %w", g, err)
		}
		held[g] = l
	}
	// A second holder renews its session only by KeepAlive, as a client in
	// another process does through its replica (WithExternalKeepAlive):
	// once the target group cannot renew its part there, KeepAlive must
	// fail, not answer nil while that part runs out (keeper).
	xs, err := n.NewSession(hctx, fencelock.WithTTL(e.ttl), fencelock.WithExternalKeepAlive())
	if err != nil {
		return fmt.Errorf("external holder's session on replica %d: %w", home, err)
	}
	defer xs.Close(context.WithoutCancel(ctx))
	keep := startKeeper(e, xs, home)
	kept := false
	defer func() {
		if !kept {
			keep.close()
		}
	}()
	xlost, err := xs.Acquire(hctx, atGroup("quorum/external", target))
	if err != nil {
		return fmt.Errorf("external holder's lock in group %q: %w", target, err)
	}
	keep.watch(xlost)

	// The fault is the target group's alone: a surviving group whose leader
	// runs on a replica about to stop hands its leadership over first (a
	// leader crash is another scenario's fault, with its own election).
	if err := leadersAway(ctx, e, survivors, stop); err != nil {
		return err
	}
	for _, id := range stop {
		c.Stop(id)
	}
	e.h.logf("stopped %v, group %q has no quorum; groups %q keep theirs", stop, target, survivors)
	cut := e.h.now()

	// Every surviving group grants, from a surviving replica.
	for _, g := range survivors {
		if err := probeGroup(ctx, e, home, g, oneGroupBound); err != nil {
			e.h.violation("one-group-quorum: group %q (quorum intact) granted nothing within %v of group %q losing its quorum: %v",
				g, oneGroupBound, target, err)
		}
	}
	// The lost group's part of the holder's session ends by its own clock;
	// the others' locks stay held.
	ended := func(l *fencelock.Lock, holder string) error {
		select {
		case <-l.Done():
		case <-time.After(e.ttl + 10*time.Second):
			e.h.violation("one-group-quorum: %q (group %q without quorum) still held by its %s %v after the fault",
				l.Name(), target, holder, e.ttl+10*time.Second)
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	if err := ended(held[target], "holder"); err != nil {
		return err
	}
	if err := ended(xlost, "external holder"); err != nil {
		return err
	}
	kept = true
	for _, v := range keep.close() {
		e.h.violation("one-group-quorum: %s", v)
	}
	// The lost group must grant nothing: a try on a voter that runs.
	var voter uint64
	for _, v := range c.voters(target) {
		if !slices.Contains(stop, v) {
			voter = v
		}
	}
	if err := probeGroup(ctx, e, voter, target, e.ttl); err == nil {
		e.h.violation("one-group-quorum: group %q granted a lock with %v stopped", target, stop)
	}
	if err := wait(ctx, hold(e)); err != nil {
		return err
	}
	for _, g := range survivors {
		l := held[g]
		select {
		case <-l.Done():
			e.h.violation("one-group-quorum: %q in group %q (quorum intact) lost by its holder on replica %d: %v",
				l.Name(), g, home, l.Err())
			continue
		default:
		}
		rctx, cancel := context.WithTimeout(ctx, recoveryBound)
		info, err := n.Inspect(rctx, l.Name())
		cancel()
		if err != nil || !info.Held || info.Token != l.Token() {
			e.h.violation("one-group-quorum: %q in group %q (quorum intact) is not held with token %d: %+v, %v",
				l.Name(), g, l.Token(), info, err)
		}
	}
	grants := e.h.grantsSince(cut)
	e.h.logf("while group %q had no quorum, the workload was granted %v (by group)", target, grants)
	// No client asked group target for a lock and got it while its voters
	// were stopped (a call that began before the fault may have been
	// granted before it).
	if n := e.h.grantedWithin(target, cut, e.h.now()); n > 0 {
		e.h.violation("one-group-quorum: group %q granted %d locks to calls made while %v were stopped", target, n, stop)
	}

	// Released while the fault lasts: the claim is about the fault, and the
	// return of two replicas (their start, catch-up and the balancer moving
	// leaders back) is a fault of its own.
	for _, g := range survivors {
		l := held[g]
		rctx, cancel := context.WithTimeout(ctx, e.opTimeout)
		if err := l.Release(rctx); err != nil {
			e.h.violation("one-group-quorum: release of %q held across the fault: %v", l.Name(), err)
		}
		cancel()
	}
	for _, id := range stop {
		if err := c.Start(id); err != nil {
			return err
		}
	}
	if err := probeGroup(ctx, e, stop[0], target, recoveryBound); err != nil {
		e.h.violation("one-group-quorum: group %q does not grant %v after its voters %v returned: %v", target, recoveryBound, stop, err)
	}
	// Not asserted (see above), noted for a reader: whether the holder's
	// session outlived the replicas' return too.
	leaders := map[string]uint64{}
	for _, g := range c.groupNames() {
		leaders[g] = groupLeader(n, g)
	}
	e.h.logf("after %v returned, the holder's session on replica %d: err=%v; leaders by group now %v", stop, home, s.Err(), leaders)
	return nil
}}

// leadersAway transfers the leadership of each group in groups whose leader
// is in stop to one of its voters that is not, and waits until every such
// group has a leader outside stop.
func leadersAway(ctx context.Context, e *env, groups []string, stop []uint64) error {
	tctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	for _, g := range groups {
		var to uint64
		for _, v := range e.c.voters(g) {
			if !slices.Contains(stop, v) && e.c.Node(v) != nil {
				to = v
				break
			}
		}
		if to == 0 {
			return fmt.Errorf("group %q has no running voter outside %v", g, stop)
		}
		for {
			ld := groupLeader(e.c.Node(to), g)
			if ld != 0 && !slices.Contains(stop, ld) {
				break
			}
			if ld != 0 {
				if err := e.c.Node(to).TransferLeadership(tctx, g, to); err != nil {
					return fmt.Errorf("moving group %q's leadership from %d to %d: %w", g, ld, to, err)
				}
				e.h.logf("group %q's leadership moved from replica %d to %d before the fault", g, ld, to)
			}
			if err := wait(tctx, 10*time.Millisecond); err != nil {
				return fmt.Errorf("group %q has no leader outside %v: %w", g, stop, err)
			}
		}
	}
	return nil
}

// groupStatus returns n's view of group (zero if n has no such group).
func groupStatus(n *fencelock.Node, group string) fencelock.GroupStatus {
	for _, gs := range n.Status().Groups {
		if gs.Name == group {
			return gs
		}
	}
	return fencelock.GroupStatus{}
}

// groupLeader returns the leader of group that n knows of, 0 if none.
func groupLeader(n *fencelock.Node, group string) uint64 { return groupStatus(n, group).LeaderID }

// atGroup returns base in group ("" is the default group).
func atGroup(base, group string) string {
	if group == "" {
		return base
	}
	return base + "@" + group
}

// quorumLossPlan picks the named group to take down and the fewest of its
// voters that take its quorum, preferring voters of the fewest other
// groups, so that the most groups survive; survivors are the groups whose
// quorum is left, the default group's among them. target is "" when no
// group can fall alone.
func quorumLossPlan(c *Cluster) (target string, stop []uint64, survivors []string) {
	votesIn := func(id uint64) int {
		n := 0
		for _, g := range c.groupNames() {
			if slices.Contains(c.voters(g), id) {
				n++
			}
		}
		return n
	}
	for _, g := range c.groups {
		vs := slices.Clone(g.Voters)
		slices.SortStableFunc(vs, func(x, y uint64) int { return votesIn(x) - votesIn(y) })
		take := vs[:len(vs)-len(vs)/2] // the quorum is lost when a majority is gone
		left := map[uint64]bool{}
		for _, id := range c.IDs() {
			if !slices.Contains(take, id) {
				left[id] = true
			}
		}
		var alive []string
		for _, o := range c.groupNames() {
			if o != g.Name && c.hasQuorum(o, left) {
				alive = append(alive, o)
			}
		}
		// The default group must be among them: every session lives there
		// (a group whose voters are every replica, after group-voters,
		// falls only with it).
		if slices.Contains(alive, "") && len(alive) > 1 {
			slices.Sort(take)
			return g.Name, take, alive
		}
	}
	return "", nil, nil
}

// probeGroup opens a session on replica id and takes and releases a lock
// of its own in group, within bound, trying again (on a new session if its
// session ended: a replica that just returned may still be catching up)
// until the bound.
func probeGroup(ctx context.Context, e *env, id uint64, group string, bound time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	if bound >= recoveryBound {
		// Halfway to its bound, a probe that has not granted records what
		// every goroutine of the process waits on, while it waits.
		began := time.Now()
		defer time.AfterFunc(bound/2, func() { e.dumps.stacks(id, group, began, groupViews(e, group)) }).Stop()
	}
	name := atGroup(fmt.Sprintf("probe/%d", id), group)
	var s *fencelock.Session
	defer func() {
		if s != nil {
			s.Close(context.WithoutCancel(pctx))
		}
	}()
	for {
		n := e.c.Node(id)
		if n == nil {
			return fmt.Errorf("replica %d is not running", id)
		}
		err := func() error {
			if s == nil || s.Err() != nil {
				if s != nil {
					s.Close(context.WithoutCancel(pctx))
				}
				var err error
				if s, err = n.NewSession(pctx, fencelock.WithTTL(e.ttl)); err != nil {
					s = nil
					return err
				}
			}
			l, err := s.TryAcquire(pctx, name)
			if err != nil {
				return err
			}
			return l.Release(pctx)
		}()
		if err == nil {
			return nil
		}
		if wait(pctx, 50*time.Millisecond) != nil {
			return fmt.Errorf("%w; the group as each replica sees it: %s", err, groupViews(e, group))
		}
	}
}

// groupViews is how every running replica sees group: its leader, term,
// applied index and the voters it has not heard from, so that a probe that
// fails says where the group stands (a replica that hears no leader, one
// behind, a leader that does not reach it).
func groupViews(e *env, group string) string {
	var b strings.Builder
	for _, id := range e.c.IDs() {
		n := e.c.Node(id)
		if n == nil {
			fmt.Fprintf(&b, "[%d: not running] ", id)
			continue
		}
		groups := n.Status().Groups
		i := slices.IndexFunc(groups, func(g fencelock.GroupStatus) bool { return g.Name == group })
		if i < 0 {
			fmt.Fprintf(&b, "[%d: does not run it] ", id)
			continue
		}
		g := groups[i]
		fmt.Fprintf(&b, "[%d: leader %d, term %d, applied %d, snapshot %d, unreached %v] ",
			id, g.LeaderID, g.Term, g.AppliedIndex, g.LastSnapshotIndex, g.Unreached)
	}
	return strings.TrimSpace(b.String())
}
