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

// The group table's changes under load (table.go): a named group's voters
// moved onto and off replicas that run only their own groups (a mirror
// becomes a shard and a shard a mirror) while one of them is down, and a
// group dropped and created again under the same name. Contenders, on
// every replica, take a lock and campaign in an election of the group and
// write to a Fencer of their own under their grant's fence, so that
// waiters and candidates queue behind holders through every change.

// contention is a fault's contenders and what they saw.
type contention struct {
	e      *env
	fault  string
	fencer *fencelock.Fencer

	mu       sync.Mutex
	top      map[string]fencelock.Fence // the highest fence each resource admitted
	firstOf  map[uint64]time.Time       // when each group's first write was admitted
	grants   map[fencelock.Fence]int    // grants by fence, over every contender
	last     map[int]fencelock.Fence    // each contender's latest grant
	count    int                        // grants
	admitted int                        // writes admitted
	refused  map[string]int             // writes refused, by why
	sealed   map[uint64]time.Time       // groups dropped (their drop returned)
	byGroup  map[uint64][]fencelock.Fence
	holding  map[int]holding // each contender's grant until its release returned
	// event is the fault's last change of the table, and when it was
	// made, for a reader of a violation.
	event   string
	eventAt time.Time
	// otherGroups: a group ID may change under the contenders (a drop and
	// a create), so a write refused as another group's is expected.
	otherGroups bool
}

// holding is a contender's grant, with its Done.
type holding struct {
	fence fencelock.Fence
	done  <-chan struct{}
	err   func() error
}

func newContention(e *env, fault string) *contention {
	return &contention{e: e, fault: fault, fencer: fencelock.NewFencer(), top: map[string]fencelock.Fence{},
		firstOf: map[uint64]time.Time{}, grants: map[fencelock.Fence]int{}, last: map[int]fencelock.Fence{},
		refused: map[string]int{}, sealed: map[uint64]time.Time{}, byGroup: map[uint64][]fencelock.Fence{}, holding: map[int]holding{}}
}

// resourceOf is the Fencer's resource a lock or election writes to.
func resourceOf(name string) string { return "fenced/" + name }

// contend runs contender i on replica id until ctx ends: a session there
// (a new one when it ends), and in a loop a grant of name (a Campaign when
// elect), two fenced writes under its fence, checking Done before each,
// and its release. Every call is checked to answer, or fail with a named
// error, within its deadline (answered); every grant's token must be above
// every fence of its group the resource admitted before the call began
// (tokens rise across every move), and no fence is granted twice (a fence
// is the group's ID with the token, so a group created again under an
// old name that reused an old ID would reissue fences).
func (ct *contention) contend(ctx context.Context, i int, id uint64, name string, elect bool) {
	e := ct.e
	res := resourceOf(name)
	var s *fencelock.Session
	defer func() {
		if s != nil {
			s.Close(context.WithoutCancel(ctx))
		}
	}()
	pause := func() bool { return wait(ctx, time.Duration(20+10*i)*time.Millisecond) == nil }
	for ctx.Err() == nil {
		n := e.c.Node(id)
		if n == nil {
			if !pause() {
				return
			}
			continue
		}
		if s == nil || s.Err() != nil {
			if s != nil {
				s.Close(context.WithoutCancel(ctx))
				s = nil
			}
			sctx, cancel := context.WithTimeout(ctx, e.opTimeout)
			began := time.Now()
			ns, err := n.NewSession(sctx, fencelock.WithTTL(e.ttl))
			cancel()
			ct.answered(ctx, id, "NewSession", "", began, err)
			if err != nil {
				if !pause() {
					return
				}
				continue
			}
			s = ns
		}
		ct.mu.Lock()
		floor := ct.top[res]
		ct.mu.Unlock()
		actx, cancel := context.WithTimeout(ctx, e.opTimeout)
		began := time.Now()
		var (
			fence   fencelock.Fence
			done    <-chan struct{}
			release func(context.Context) error
			why     func() error
			err     error
		)
		if elect {
			var ld *fencelock.Leadership
			if ld, err = s.Campaign(actx, name, fmt.Sprintf("c%d", i)); err == nil {
				fence, done, release, why = ld.Fence(), ld.Done(), ld.Resign, ld.Err
			}
		} else {
			var l *fencelock.Lock
			if l, err = s.Acquire(actx, name); err == nil {
				fence, done, release, why = l.Fence(), l.Done(), l.Release, l.Err
			}
		}
		cancel()
		ct.answered(ctx, id, "grant", name, began, err)
		if err != nil {
			if !pause() {
				return
			}
			continue
		}
		ct.granted(i, id, name, fence, floor, began, holding{fence, done, why})
		for range 2 {
			select {
			case <-done:
			default:
				ct.write(res, fence)
				if wait(ctx, e.ttl/30) != nil {
					break
				}
				continue
			}
			break
		}
		rctx, cancel := context.WithTimeout(ctx, e.opTimeout)
		began = time.Now()
		err = release(rctx)
		cancel()
		ct.answered(ctx, id, "release", name, began, err)
		ct.mu.Lock()
		delete(ct.holding, i)
		ct.mu.Unlock()
	}
}

// answered checks that a call begun at began answered within its deadline
// (and answerSlack), and with nil or a named error; a grant's call may
// also reach its deadline waiting (context.DeadlineExceeded: a waiter or
// candidate still queued).
func (ct *contention) answered(ctx context.Context, id uint64, call, name string, began time.Time, err error) {
	if ctx.Err() != nil {
		return
	}
	took := time.Since(began)
	if took > ct.e.opTimeout+answerSlack(ct.e) {
		ct.mu.Lock()
		event, at := ct.event, ct.eventAt
		ct.mu.Unlock()
		ct.e.h.violation("%s: replica %d answered %s %q after %v, past its %v deadline (begun %v after %s): %v",
			ct.fault, id, call, name, took.Round(time.Millisecond), ct.e.opTimeout, began.Sub(at).Round(time.Millisecond), event, err)
	}
	if !named(err) && !(call == "grant" && errors.Is(err, context.DeadlineExceeded)) {
		ct.e.h.violation("%s: replica %d failed %s %q with no named error: %v", ct.fault, id, call, name, err)
	}
}

// granted records contender i's grant of name with fence, by a call begun
// at began when the resource's highest admitted fence was floor.
func (ct *contention) granted(i int, id uint64, name string, fence, floor fencelock.Fence, began time.Time, h holding) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.count++
	ct.holding[i] = h
	ct.byGroup[fence.Group] = append(ct.byGroup[fence.Group], fence)
	ct.last[i] = fence
	ct.grants[fence]++
	if ct.grants[fence] == 2 {
		ct.e.h.violation("%s: fence %v of %q granted twice (the second to contender %d on replica %d)", ct.fault, fence, name, i, id)
	}
	if floor.Group == fence.Group && fence.Token <= floor.Token {
		ct.e.h.violation("%s: contender %d on replica %d granted %q with fence %v, not above %v, which the resource admitted before its call began",
			ct.fault, i, id, name, fence, floor)
	}
	if at, ok := ct.sealed[fence.Group]; ok && began.After(at) {
		ct.e.h.violation("%s: contender %d on replica %d granted %q with fence %v of a group dropped before its call began",
			ct.fault, i, id, name, fence)
	}
}

// write is a fenced write to res under fence: admitted, it raises the
// resource's top; refused, it is counted by why. A write refused as
// another group's is a violation unless otherGroups (a group dropped and
// created again: the resource is keyed to the old incarnation until
// Rekey).
func (ct *contention) write(res string, fence fencelock.Fence) {
	err := ct.fencer.DoFence(res, fence, func() error {
		ct.mu.Lock()
		defer ct.mu.Unlock()
		ct.admitted++
		ct.top[res] = fence
		if _, ok := ct.firstOf[fence.Group]; !ok {
			ct.firstOf[fence.Group] = time.Now()
		}
		return nil
	})
	if err == nil {
		return
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	switch {
	case errors.Is(err, fencelock.ErrStaleToken):
		ct.refused["stale"]++
	case errors.Is(err, fencelock.ErrOtherGroup):
		ct.refused["other group"]++
		if !ct.otherGroups {
			ct.e.h.violation("%s: the resource %q refused fence %v as another group's: the group's ID changed under its holders", ct.fault, res, fence)
		}
	default:
		ct.refused[err.Error()]++
	}
}

// grantsSoFar returns how many grants the contenders had.
func (ct *contention) grantsSoFar() int {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return ct.count
}

// start runs a contender for lock and one for election on each replica in
// ids (candidates on the replicas of electing alone), until the returned
// stop is called; stop waits for them.
func (ct *contention) start(ctx context.Context, ids, electing []uint64, lock, election string) (stop func()) {
	cctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	i := 0
	for _, id := range ids {
		k := i
		wg.Go(func() { ct.contend(cctx, k, id, lock, false) })
		i++
	}
	for _, id := range electing {
		k := i
		wg.Go(func() { ct.contend(cctx, k, id, election, true) })
		i++
	}
	return func() { cancel(); wg.Wait() }
}

// until waits, at most recoveryBound, for the contenders to have granted
// more than n; false if they did not.
func (ct *contention) until(ctx context.Context, n int) bool {
	tctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	for ct.grantsSoFar() <= n {
		if wait(tctx, 20*time.Millisecond) != nil {
			return false
		}
	}
	return true
}

// happened records a change of the table the fault made (at its call).
func (ct *contention) happened(event string, at time.Time) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	ct.event, ct.eventAt = event, at
}

func (ct *contention) summary() string {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	return fmt.Sprintf("%d grants, %d writes admitted, refused %v", ct.count, ct.admitted, ct.refused)
}

// setVoters moves group's voters to voters from replica from (within
// votersBound) and the cluster's view of them after it.
func setVoters(ctx context.Context, e *env, from uint64, group string, voters []uint64) error {
	n := e.c.Node(from)
	if n == nil {
		return fmt.Errorf("replica %d is not running", from)
	}
	sctx, cancel := context.WithTimeout(ctx, votersBound)
	defer cancel()
	if err := n.SetVoters(sctx, group, voters); err != nil {
		return fmt.Errorf("SetVoters(%q, %v): %w", group, voters, err)
	}
	for i := range e.c.groups {
		if e.c.groups[i].Name == group {
			e.c.groups[i].Voters = slices.Clone(voters)
		}
	}
	return nil
}

// GroupMoves moves a named group of three voters onto and off replicas
// under PlaceOwnGroups while contenders on every replica hold, wait for
// and campaign in it: one of its voters crashes, and SetVoters replaces it
// with a replica that reached the group through a mirror (the mirror
// hands over to a shard) while it is down; it restarts and must learn
// that it was removed (it stops running the group, and reaches it through
// a mirror of its own, granting there within recoveryBound); then the
// voter that came on is moved off again for another (its shard hands back
// to a mirror). The contenders check, throughout, that every grant's
// token rises above every fence the resource admitted before its call
// (tokens rise across every move), that no fence is granted twice, that
// the group's ID never changes under its holders, and that every call
// answers or fails with a named error within its deadline; after each
// move every replica answers in every group (answersWithin) and grants in
// the group. It needs 5 replicas (a group of 3 voters and 2 more). Under
// PlaceOwnGroups the replicas taken off reach the group through mirrors
// and must grant there; under PlaceEveryGroup they must answer
// ErrGroupMoved (the removed-while-down scenario: no old rule covers a
// replica removed while down there, so only a voter's word ends its run).
var GroupMoves = Fault{"group-moves", func(ctx context.Context, e *env) error {
	c := e.c
	ids := c.IDs()
	i := slices.IndexFunc(c.groups, func(g fencelock.GroupConfig) bool { return len(g.Voters) == 3 })
	if len(ids) < 5 || i < 0 {
		return errors.New("group-moves: no named group of 3 voters among 5 replicas or more")
	}
	group := c.groups[i].Name
	voters := slices.Clone(c.groups[i].Voters)
	var outside []uint64
	for _, id := range ids {
		if !slices.Contains(voters, id) {
			outside = append(outside, id)
		}
	}
	if len(outside) < 2 {
		return fmt.Errorf("group-moves: group %q votes on all but %v", group, outside)
	}
	ct := newContention(e, "group-moves")
	ct.happened("the fault began", time.Now())
	lock, election := atGroup("moves/x", group), atGroup("moves/p", group)
	stop := ct.start(ctx, ids, ids[len(ids)-3:], lock, election)
	defer stop()
	if !ct.until(ctx, 2*len(ids)) {
		e.h.violation("group-moves: the contenders in group %q granted %s within %v before any move", group, ct.summary(), recoveryBound)
	}

	// A voter crashes, and the group moves off it and onto a replica that
	// reached it through a mirror.
	down := voters[len(voters)-1]
	onto, later := outside[0], outside[1]
	keep := slices.DeleteFunc(slices.Clone(voters), func(id uint64) bool { return id == down })
	c.Crash(down)
	e.h.logf("group-moves: voter %d of group %q crashed; moving the group from %v to %v", down, group, voters, append(slices.Clone(keep), onto))
	began := time.Now()
	ct.happened("SetVoters 1's call", began)
	if err := setVoters(ctx, e, keep[0], group, append(slices.Clone(keep), onto)); err != nil {
		return fmt.Errorf("group-moves: %w", err)
	}
	e.h.logf("group-moves: group %q moved onto %d and off %d (down) in %v; contenders: %s",
		group, onto, down, time.Since(began).Round(time.Millisecond), ct.summary())
	for _, id := range ids {
		if id != down {
			if err := probeGroup(ctx, e, id, group, recoveryBound); err != nil {
				e.h.violation("group-moves: replica %d does not grant in group %q %v after it moved onto %d: %v", id, group, recoveryBound, onto, err)
			}
		}
	}
	answersWithin(ctx, e, "group-moves")

	if err := c.Start(down); err != nil {
		return err
	}
	restarted := time.Now()
	for {
		n := c.Node(down)
		if n != nil && !slices.ContainsFunc(n.Status().Groups, func(gs fencelock.GroupStatus) bool { return gs.Name == group && !gs.Removed }) {
			e.h.logf("group-moves: replica %d, removed from group %q while down, stopped running it %v after its restart",
				down, group, time.Since(restarted).Round(time.Millisecond))
			break
		}
		if time.Since(restarted) > recoveryBound {
			e.h.violation("group-moves: replica %d, removed from group %q while down, still runs it %v after its restart", down, group, recoveryBound)
			break
		}
		if err := wait(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	if e.placement == fencelock.PlaceOwnGroups {
		if err := probeGroup(ctx, e, down, group, recoveryBound); err != nil {
			e.h.violation("group-moves: replica %d, removed from group %q while down, does not grant there %v after its restart: %v",
				down, group, recoveryBound, err)
		}
	} else {
		movedOff(ctx, e, down, group)
	}

	// Off the replica it was moved onto (its shard hands back to a
	// mirror) and onto the other one outside.
	n := ct.grantsSoFar()
	began = time.Now()
	ct.happened("SetVoters 2's call", began)
	moved := sorted(append(slices.Clone(keep), later))
	if err := setVoters(ctx, e, keep[0], group, sorted(moved)); err != nil {
		return fmt.Errorf("group-moves: %w", err)
	}
	e.h.logf("group-moves: group %q moved off %d and onto %d in %v; contenders: %s",
		group, onto, later, time.Since(began).Round(time.Millisecond), ct.summary())
	for _, id := range ids {
		if e.placement != fencelock.PlaceOwnGroups && (id == down || id == onto) {
			movedOff(ctx, e, id, group)
			continue
		}
		if err := probeGroup(ctx, e, id, group, recoveryBound); err != nil {
			e.h.violation("group-moves: replica %d does not grant in group %q %v after it moved off %d: %v", id, group, recoveryBound, onto, err)
		}
	}
	answersWithin(ctx, e, "group-moves")
	if !ct.until(ctx, n+len(ids)) {
		e.h.violation("group-moves: the contenders in group %q granted nothing more within %v of the moves: %s", group, recoveryBound, ct.summary())
	}
	stop()
	e.h.logf("group-moves: contenders: %s", ct.summary())
	if e.placement != fencelock.PlaceOwnGroups {
		// The final reads are made on the default group's leader, which
		// must run every group: down and onto no longer run this one.
		return leadersAway(ctx, e, []string{""}, []uint64{down, onto})
	}
	return nil
}}

// movedOff checks that a call naming group on replica id, which SetVoters
// took off the group under a placement that reaches no group a replica
// does not run, fails with ErrGroupMoved within its deadline (and
// answerSlack).
func movedOff(ctx context.Context, e *env, id uint64, group string) {
	n := e.c.Node(id)
	if n == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, e.opTimeout)
	defer cancel()
	began := time.Now()
	_, err := n.Inspect(cctx, atGroup("moves/x", group))
	if took := time.Since(began); !errors.Is(err, fencelock.ErrGroupMoved) || took > e.opTimeout+answerSlack(e) {
		e.h.violation("group-moves: replica %d, taken off group %q, answered a call there after %v with %v, not ErrGroupMoved",
			id, group, took.Round(time.Millisecond), err)
	}
}

func sorted(ids []uint64) []uint64 { s := slices.Clone(ids); slices.Sort(s); return s }

// dropBound is how soon after a group's drop returned every holder of
// its grants must find Done closed: the drop seals the group, and a
// holder whose replica has not heard stops by its own clock within a TTL.
func dropBound(e *env) time.Duration { return e.ttl + 5*time.Second }

// DropCreate creates a group ("t"), and drops it (ForceDrop) and creates
// it again under the same name while contenders on every replica hold,
// wait for and campaign in it, writing through a Fencer, twice: three
// incarnations, the non-voters' calls through mirrors under
// PlaceOwnGroups. Each incarnation is a new group: its ID differs, so the
// fences (group ID, token) it grants are none an earlier one granted,
// whatever its bare tokens (docs/design.md: a token means something only
// within its group; architecture.md: tokens rise across every
// incarnation). Checked, naming each: every holder of a dropped
// incarnation finds Done closed within dropBound of the drop; no grant of
// it is answered to a call begun after the drop returned; no fence is
// granted twice, over the incarnations; the new incarnation's group ID is
// new; once every old holder stopped, the operator re-keys the resources
// to the new group (Fencer.Rekey, what ErrOtherGroup asks of it) and,
// after a new holder wrote, every fence the old incarnations granted is
// refused there; and every call answers or fails with a named error
// within its deadline. The bare tokens are noted, not checked.
var DropCreate = Fault{"drop-create", func(ctx context.Context, e *env) error {
	const group = "t"
	c := e.c
	ids := c.IDs()
	voters := sorted(ids[:3])
	ct := newContention(e, "drop-create")
	ct.happened("the fault began", time.Now())
	ct.otherGroups = true
	lock, election := atGroup("drop/x", group), atGroup("drop/p", group)
	admin := func() (*fencelock.Node, error) {
		for _, id := range voters {
			if n := c.Node(id); n != nil {
				return n, nil
			}
		}
		return nil, errors.New("drop-create: no voter of the group runs")
	}
	stop := ct.start(ctx, ids, ids[len(ids)-2:], lock, election)
	defer stop()
	var gids []uint64
	for inc := range 3 {
		n, err := admin()
		if err != nil {
			return err
		}
		ct.happened(fmt.Sprintf("CreateGroup %d's call", inc+1), time.Now())
		cctx, cancel := context.WithTimeout(ctx, recoveryBound)
		err = n.CreateGroup(cctx, fencelock.GroupConfig{Name: group, Voters: voters})
		cancel()
		if err != nil {
			return fmt.Errorf("drop-create: CreateGroup(%q), incarnation %d: %w", group, inc+1, err)
		}
		gid, err := groupID(ctx, e, voters[0], group)
		if err != nil {
			return err
		}
		if slices.Contains(gids, gid) {
			e.h.violation("drop-create: incarnation %d of group %q has the ID %016x of an earlier one: its fences are the earlier's", inc+1, group, gid)
		}
		before := ct.grantsSoFar()
		if !ct.until(ctx, before+len(ids)) {
			e.h.violation("drop-create: the contenders in incarnation %d of group %q granted nothing within %v: %s", inc+1, group, recoveryBound, ct.summary())
		}
		if inc > 0 {
			ct.rekeyed(ctx, gids, gid, lock, election)
		}
		gids = append(gids, gid)
		if inc == 2 {
			break
		}
		if err := wait(ctx, hold(e)); err != nil {
			return err
		}
		ct.happened(fmt.Sprintf("DropGroup %d's call", inc+1), time.Now())
		dctx, cancel := context.WithTimeout(ctx, recoveryBound)
		err = n.DropGroup(dctx, group, fencelock.ForceDrop())
		cancel()
		if err != nil {
			return fmt.Errorf("drop-create: DropGroup(%q), incarnation %d: %w", group, inc+1, err)
		}
		ct.dropped(ctx, gid)
		answersWithin(ctx, e, "drop-create")
	}
	stop()
	ct.mu.Lock()
	var notes []string
	for k, gid := range gids {
		fs := ct.byGroup[gid]
		if len(fs) == 0 {
			continue
		}
		lo, hi := fs[0].Token, fs[0].Token
		for _, f := range fs {
			lo, hi = min(lo, f.Token), max(hi, f.Token)
		}
		notes = append(notes, fmt.Sprintf("incarnation %d (group %016x): %d grants, tokens %d..%d", k+1, gid, len(fs), lo, hi))
	}
	ct.mu.Unlock()
	e.h.logf("drop-create: %s; bare tokens by incarnation: %v", ct.summary(), notes)
	return nil
}}

// groupID waits (at most recoveryBound) for replica id to have applied
// group's ID.
func groupID(ctx context.Context, e *env, id uint64, group string) (uint64, error) {
	tctx, cancel := context.WithTimeout(ctx, recoveryBound)
	defer cancel()
	for {
		if n := e.c.Node(id); n != nil {
			if gid := groupStatus(n, group).GroupID; gid != 0 {
				return gid, nil
			}
		}
		if err := wait(tctx, 20*time.Millisecond); err != nil {
			return 0, fmt.Errorf("replica %d applied no ID of group %q within %v", id, group, recoveryBound)
		}
	}
}

// dropped records that group gid's drop returned and checks that every
// contender holding one of its grants finds Done closed within dropBound.
func (ct *contention) dropped(ctx context.Context, gid uint64) {
	ct.mu.Lock()
	ct.sealed[gid] = time.Now()
	var held []holding
	for _, h := range ct.holding {
		if h.fence.Group == gid {
			held = append(held, h)
		}
	}
	ct.mu.Unlock()
	bound := time.After(dropBound(ct.e))
	for _, h := range held {
		select {
		case <-h.done:
			if err := h.err(); err != nil && !named(err) {
				ct.e.h.violation("%s: the holder of %v ended with no named error when its group was dropped: %v", ct.fault, h.fence, err)
			}
		case <-bound:
			ct.e.h.violation("%s: the holder of %v still holds %v after its group was dropped", ct.fault, h.fence, dropBound(ct.e))
			return
		case <-ctx.Done():
			return
		}
	}
}

// rekeyed re-keys the resources of lock and election to gid, as the
// operator does once the old incarnations' holders stopped (dropped
// checked that they did), waits until a holder of gid wrote to each, and
// checks that every fence the old incarnations (olds) granted is refused
// there.
func (ct *contention) rekeyed(ctx context.Context, olds []uint64, gid uint64, names ...string) {
	for _, name := range names {
		res := resourceOf(name)
		if err := ct.fencer.Rekey(res, gid); err != nil {
			ct.e.h.violation("%s: Rekey(%q, %016x): %v", ct.fault, res, gid, err)
			continue
		}
		tctx, cancel := context.WithTimeout(ctx, recoveryBound)
		for {
			ct.mu.Lock()
			top := ct.top[res]
			ct.mu.Unlock()
			if top.Group == gid {
				break
			}
			if wait(tctx, 20*time.Millisecond) != nil {
				ct.e.h.violation("%s: no holder of group %016x wrote to %q within %v of its re-key", ct.fault, gid, res, recoveryBound)
				break
			}
		}
		cancel()
		ct.mu.Lock()
		var late []fencelock.Fence
		for _, old := range olds {
			late = append(late, ct.byGroup[old]...)
		}
		ct.mu.Unlock()
		for _, f := range late {
			if err := ct.fencer.DoFence(res, f, func() error { return nil }); err == nil {
				ct.e.h.violation("%s: %q admitted fence %v of a dropped incarnation after a holder of the new one (%016x) wrote", ct.fault, res, f, gid)
			}
		}
	}
}
