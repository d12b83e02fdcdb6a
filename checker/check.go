package checker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencelock/fencelock"
)

// settleBound is how long after the run every lock must be held only by a
// client that knows it: dead sessions expired (auto-release), grants whose
// outcome was unknown withdrawn.
const settleBound = 30 * time.Second

// settle waits, after healing, until no lock is held and no election led by
// anyone but a live client that believes it holds (leads) it, then reads
// every lock and election. The reads are the final operations of the
// history.
func settle(ctx context.Context, e *env) ([]Op, error) {
	lctx, cancel := context.WithTimeout(ctx, settleBound)
	defer cancel()
	id, err := e.c.Leader(lctx)
	if err != nil {
		return nil, err
	}
	n := e.c.Node(id)
	believed := func(name string, session, token uint64) bool {
		e.beliefs.mu.Lock()
		defer e.beliefs.mu.Unlock()
		for _, b := range e.beliefs.m[name] {
			if groupOf(name) != "" {
				session = b.session // the read shows the part's ID: the token names the grant
			}
			if b.token == token && e.live(session) && !closed(b.done) {
				return true
			}
		}
		return false
	}
	expected := func(op Op) bool {
		if !op.Held {
			return true
		}
		if isRecipe(op.Lock) { // every holder, not only the oldest
			for _, h := range op.Holders {
				if !believed(op.Lock, h.Session, h.Token) {
					return false
				}
			}
			return true
		}
		return believed(op.Lock, op.Session, op.Token)
	}
	readLock := func(name string) (Op, error) {
		call := e.h.now()
		info, err := n.Inspect(lctx, name)
		if err != nil {
			return Op{}, fmt.Errorf("final read of %q: %w", name, err)
		}
		op := Op{Client: -1, Kind: OpRead, Lock: name, Outcome: OK, Held: info.Held,
			Session: info.SessionID, Token: info.Token, Call: call, Return: e.h.now(), Shared: info.Shared,
			PartSession: groupOf(name) != "" && info.SessionID == 0}
		for _, h := range info.Holders {
			op.Holders = append(op.Holders, Ref{Session: h.SessionID, Token: h.Token})
		}
		return op, nil
	}
	readLeader := func(name string) (Op, error) {
		call := e.h.now()
		info, err := n.Leader(lctx, name)
		if err != nil && !errors.Is(err, fencelock.ErrNoLeader) {
			return Op{}, fmt.Errorf("final read of election %q: %w", name, err)
		}
		return leaderOp(-1, id, name, info, call, e.h.now()), nil
	}
	var reads []Op
	final := func(name string, read func(string) (Op, error)) error {
		for {
			r, err := read(name)
			if err != nil {
				return err
			}
			if expected(r) || lctx.Err() != nil {
				if !expected(r) {
					e.h.violation("%q still held by session %d token %d (holders %v), which nobody knows of, %v after healing",
						r.Lock, r.Session, r.Token, r.Holders, settleBound)
				}
				reads = append(reads, r)
				return nil
			}
			if err := wait(lctx, 50*time.Millisecond); err != nil {
				continue // the deadline: one more read, then report
			}
		}
	}
	for _, name := range e.locks {
		if err := final(name, readLock); err != nil {
			return nil, err
		}
	}
	for _, name := range e.recipes {
		if err := final(name, readLock); err != nil {
			return nil, err
		}
	}
	for _, name := range e.elections {
		if err := final(name, readLeader); err != nil {
			return nil, err
		}
	}
	return reads, nil
}

// check runs every check on the recorded history.
func check(e *env, reads []Op) Report {
	ops, writes, windows, violations := e.h.snapshot()
	r := Report{Ops: len(ops), Violations: violations}
	for _, op := range ops {
		if op.Outcome == Unknown {
			r.Unknown++
		}
	}
	ops = resolve(e.applied, ops)
	e.h.mu.Lock()
	r.Refused = e.h.refused
	e.h.mu.Unlock()
	for _, op := range ops {
		if op.Outcome == Granted {
			r.Grants++
			if op.Kind.campaign() {
				r.Terms++
			}
		}
	}
	for _, o := range e.observers {
		r.Observed += len(o.observations())
	}
	var end int64
	for _, rd := range reads {
		end = max(end, rd.Return)
	}
	// Shared locks and semaphores have a model of their own (SharedModel);
	// every other check runs on all operations.
	mutexOps, recipeOps := splitRecipes(ops)
	mutexReads, recipeReads := splitRecipes(reads)
	for _, op := range ops {
		if op.Outcome == Unknown && op.Kind != OpKept { // a Kept of unknown outcome changes nothing
			r.Open++
		}
	}
	history := append(append(append([]Op(nil), mutexOps...), loses(e, mutexOps, end)...), mutexReads...)
	// Each check is named for the report (report.go), by its number in doc.go.
	r.Checks = []CheckResult{{Name: "while running: 2, 10 the holder stops first; 4 grants after healing; 11 KeepAlive; the faults' own", Violations: violations}}
	checked := func(name string, v, timedOut []string) {
		r.Checks = append(r.Checks, CheckResult{Name: name, Violations: v, TimedOut: timedOut})
		r.Violations = append(r.Violations, v...)
		r.TimedOut = append(r.TimedOut, timedOut...)
	}
	for _, h := range [...]struct {
		name  string
		ops   []Op
		model porcupine.NondeterministicModel
	}{{"1 locks and elections linearizable", history, LockModel}, {"7 shared locks and semaphores linearizable", sharedHistory(recipeOps, recipeReads), SharedModel}} {
		v, timedOut := checkLinearizable(h.ops, h.model, e.dumps.history(h.model))
		checked(h.name, v, timedOut)
	}
	checked("8 sections", sections(recipeOps), nil)
	r.Recipes = recipeCounts(recipeOps)
	checked("9 fenced reads", readsFenced(recipeOps, e.h.readsSnapshot()), nil)
	checked("2 fencing", fencing(ops, writes), nil)
	checked("3 tokens unique and rising", tokensRise(ops), nil)
	checked("4 no grant on the cut-off side", minority(e.c, ops, windows), nil)
	checked("5 nothing lost", nothingLost(e, ops, reads), nil)
	checked("3 epochs rise", epochsRise(append(append([]Op(nil), ops...), reads...)), nil)
	checked("6 observers", observed(e, ops), nil)
	checked("12 lock-delays", lockDelays(e.applied, slowLock, e.delayedSessions(), lockDelay, e.c.rate(e.c.fastest())), nil)
	checked("13 operator commands apply once", operatorOnce(e.applied), nil)
	return r
}

// loses adds the group's frees that no client call made: for every grant
// (term) not released (resigned) with OK whose holder's session ended (or
// whose release failed, or whose caller never learned of it: resolve), a
// Lose between the grant's call and the next grant of the lock (election)
// or the end; for every acquire or campaign whose outcome is still
// unknown, a Lose of the phantom grant it may have made, at any time until
// the end.
//
// A Lose may take effect from the grant's call on, not only from its
// return: a grant can end (its session expired, an operator ended it)
// before the lagging replica that applied it told the caller, and the next
// grant can return before that caller's does. The model frees only a
// current grant, so a Lose taken before its grant frees nothing.
func loses(e *env, ops []Op, end int64) []Op {
	released := map[grantKey]Outcome{} // grant -> release outcome
	releasedAt := map[grantKey]int64{}
	for _, op := range ops {
		if op.Kind == OpRelease || op.Kind == OpResign {
			released[keyOf(op)] = op.Outcome
			releasedAt[keyOf(op)] = op.Return
		}
	}
	grants := map[string][]Op{}
	for _, op := range ops {
		if op.Outcome == Granted {
			grants[op.Lock] = append(grants[op.Lock], op)
		}
	}
	var out []Op
	for name, gs := range grants {
		sort.Slice(gs, func(i, j int) bool { return gs[i].Token < gs[j].Token })
		for i, g := range gs {
			out2, how := released[keyOf(g)]
			if how && out2 == OK {
				continue
			}
			if !how && !g.Resolved && e.live(g.Session) && !e.lost(g) && i == len(gs)-1 {
				continue // still held: the final read must show it
			}
			ret := end
			if i+1 < len(gs) {
				ret = min(ret, gs[i+1].Return)
			}
			if how && out2 == NotHeld {
				ret = min(ret, releasedAt[keyOf(g)])
			}
			out = append(out, Op{Client: g.Client, Kind: OpLose, Lock: name, Session: g.Session,
				Token: g.Token, Outcome: OK, Call: g.Call, Return: max(ret, g.Return)})
		}
	}
	for _, op := range ops {
		if op.Kind.grants() && op.Outcome == Unknown {
			out = append(out, Op{Client: op.Client, Kind: OpLose, Lock: op.Lock, Session: op.Session,
				Phantom: op.ID, Outcome: OK, Call: op.Call, Return: end})
		}
	}
	return out
}

// linearizable checks a history with porcupine against model, one
// partition (lock) at a time, so that a failure names its lock, and
// returns its violations and timed-out checks together (the unit tests'
// form of checkLinearizable).
func linearizable(history []Op, model porcupine.NondeterministicModel) []string {
	v, timedOut := checkLinearizable(history, model, nil)
	return append(v, timedOut...)
}

// linearizeBound is how long porcupine may search one partition. A search
// that runs out is reported as a timed-out check, neither a pass nor a
// violation.
const linearizeBound = 2 * time.Minute

// checkLinearizable checks history against model, one partition (lock) at
// a time, and returns the partitions that are not linearizable
// (violations) and those whose check timed out, apart. Each of them is
// handed to dump, if set, with porcupine's account of how far it got.
func checkLinearizable(history []Op, model porcupine.NondeterministicModel,
	dump func(name string, part []porcupine.Operation, info porcupine.LinearizationInfo)) (violations, timedOut []string) {
	ops := make([]porcupine.Operation, len(history))
	for i, op := range history {
		ops[i] = porcupine.Operation{ClientId: max(op.Client, 0), Input: op, Output: op.Outcome,
			Call: op.Call, Return: op.Return}
	}
	for _, part := range model.Partition(ops) {
		res, info := porcupine.CheckOperationsVerbose(model.ToModel(), part, linearizeBound)
		if res == porcupine.Ok {
			continue
		}
		name := part[0].Input.(Op).Lock
		if res == porcupine.Unknown {
			timedOut = append(timedOut, fmt.Sprintf("linearizability check of %q (%d operations) timed out after %v",
				name, len(part), linearizeBound))
		} else {
			violations = append(violations, fmt.Sprintf("history of %q (%d operations) is not linearizable", name, len(part)))
		}
		if dump != nil {
			dump(name, part, info)
		}
	}
	return violations, timedOut
}

// fencing checks the resource's log: per lock, the admitted tokens never go
// down (the Fencer never admits a lower token after a higher one), so no two
// critical sections interleave; and every write's token was granted to its
// writer.
func fencing(ops []Op, writes map[string][]Write) []string {
	var v []string
	grantedTo := map[grantKey]int{}
	for _, op := range ops {
		if op.Outcome == Granted {
			grantedTo[keyOf(op)] = op.Client
		}
	}
	for name, log := range writes {
		for i, w := range log {
			if c, ok := grantedTo[grantKey{groupOf(name), w.Token}]; !ok || c != w.Client {
				v = append(v, fmt.Sprintf("%q: write with token %d by client %d, which was not granted it", name, w.Token, w.Client))
			}
			if i > 0 && w.Token < log[i-1].Token {
				v = append(v, fmt.Sprintf("%q: token %d admitted after %d: critical sections interleave",
					name, w.Token, log[i-1].Token))
			}
		}
	}
	return v
}

// tokensRise checks that tokens are unique and rise with real time: a grant
// that returned before another was called has the smaller token, per lock
// and across the whole run, restarts included. Tokens come from their own
// group's log, so they are checked per group: a token orders only grants of
// its own group.
func tokensRise(ops []Op) []string {
	var v []string
	for group, ops := range byGroup(ops) {
		var gs []Op
		seen := map[uint64]bool{}
		for _, op := range ops {
			if op.Outcome != Granted {
				continue
			}
			if seen[op.Token] {
				v = append(v, fmt.Sprintf("group %q: token %d granted twice", group, op.Token))
			}
			seen[op.Token] = true
			gs = append(gs, op)
		}
		inRealTime(gs, func(g Op, highest uint64) {
			if g.Token <= highest {
				v = append(v, fmt.Sprintf("group %q: token %d granted after token %d had been returned", group, g.Token, highest))
			}
		})
	}
	return v
}

// inRealTime calls visit for each op in the order they were called, with the
// highest token among the ops that had returned before it was called: what
// a linearizable history says the op's token must exceed.
func inRealTime(ops []Op, visit func(op Op, highest uint64)) {
	byReturn := append([]Op(nil), ops...)
	sort.Slice(byReturn, func(i, j int) bool { return byReturn[i].Return < byReturn[j].Return })
	byCall := append([]Op(nil), ops...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].Call < byCall[j].Call })
	var highest uint64
	j := 0
	for _, op := range byCall {
		for j < len(byReturn) && byReturn[j].Return < op.Call {
			highest = max(highest, byReturn[j].Token)
			j++
		}
		visit(op, highest)
	}
}

// minority checks that no client on the cut-off side of a partition was
// granted a lock it asked for during the partition, unless that side held a
// quorum of the lock's own group (group a's voters 1,2,3 are a quorum of a
// on the minority side {1,2} of five replicas).
func minority(c *Cluster, ops []Op, windows []Window) []string {
	var v []string
	for _, w := range windows {
		for _, op := range ops {
			if op.Outcome == Granted && w.Minority[op.Node] && op.Call >= w.Start && op.Return <= w.End &&
				!c.hasQuorum(groupOf(op.Lock), w.Minority) {
				v = append(v, fmt.Sprintf("client %d on cut-off replica %d was granted %q token %d during a partition",
					op.Client, op.Node, op.Lock, op.Token))
			}
		}
	}
	return v
}

// nothingLost checks the final state against what clients were told: a
// lock (election) a live client holds (leads) is held by it with its token,
// and none is held with a token older than its latest acknowledged grant.
func nothingLost(e *env, ops []Op, reads []Op) []string {
	var v []string
	latest := map[string]uint64{}
	for _, op := range ops {
		if op.Outcome == Granted {
			latest[op.Lock] = max(latest[op.Lock], op.Token)
		}
	}
	final := map[string]Op{}
	for _, r := range reads {
		final[r.Lock] = r
		// Only an exclusive holder must be the latest grant: shared
		// grants made after the oldest one may hold with it.
		if r.Held && !r.Shared && r.Token < latest[r.Lock] {
			v = append(v, fmt.Sprintf("%q held with token %d after token %d was granted", r.Lock, r.Token, latest[r.Lock]))
		}
	}
	e.beliefs.mu.Lock()
	defer e.beliefs.mu.Unlock()
	for name, bs := range e.beliefs.m {
		for _, b := range bs {
			if !e.live(b.session) || b.releasing || closed(b.done) ||
				b.revoked && e.applied.endedByOperator(name, b.token) {
				continue
			}
			r := final[name]
			if isRecipe(name) {
				if !slices.ContainsFunc(r.Holders, func(h Ref) bool { return h.Token == b.token }) {
					v = append(v, fmt.Sprintf("%q: client %d holds token %d, but the group's holders are %v", name, b.c.id, b.token, r.Holders))
				}
				continue
			}
			if !r.Held || r.Token != b.token {
				v = append(v, fmt.Sprintf("%q: client %d holds token %d, but the group has %+v", name, b.c.id, b.token, r))
			}
		}
	}
	return v
}

// closed reports whether done is closed: a holder whose Done closed knows
// it no longer holds (its part in the lock's group ended, say), whether or
// not its session as a whole lives on.
func closed(done <-chan struct{}) bool {
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// lost reports whether the holder of grant g learned that it lost it: its
// belief in g has Done closed, or it dropped the belief on finding Done
// closed. A session lives on when only its part in g's group ended, and
// that frees g as an expiry would.
func (e *env) lost(g Op) bool {
	e.beliefs.mu.Lock()
	defer e.beliefs.mu.Unlock()
	if e.beliefs.gone[grantRef{g.Lock, g.Token}] {
		return true
	}
	for _, b := range e.beliefs.m[g.Lock] {
		if b.token == g.Token { // unique in its group, which the name fixes
			return closed(b.done)
		}
	}
	return false
}
