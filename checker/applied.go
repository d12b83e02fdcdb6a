package checker

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

// appliedLog is every group's log as the replicas applied it
// (testhook.ObserveApplied): the group's own record of what it decided,
// read by the checks for two things a client cannot know.
//
//   - Which calls of unknown outcome took effect (resolve): every request
//     carries its session's part and number, which the log names, so a
//     call that ended in an error is recorded as done (at the time its
//     entry was first applied, a moment after it took effect) or as never
//     applied, instead of staying open in the history for good.
//   - Which grants an operator ended (endedByOperator): a holder an
//     operator revokes may learn of it after the next holder was granted
//     (its replica lags), so it alone is exempt from "the holder stops
//     first"; a successor, even one the revocation itself granted, is not.
//
// An entry is kept once, with the time it was first applied anywhere: a
// restart replays what its snapshot does not cover, and every replica
// applies every entry.
type appliedLog struct {
	now func() int64 // the history's clock

	mu       sync.Mutex
	entries  map[string]map[uint64]*appliedEntry // group -> index
	revoked  map[grantKey]bool                   // grants an operator ended
	requests map[reqRef]reqRecord                // numbered requests, by group, part and number
}

type appliedEntry struct {
	at     int64
	cmds   []fsm.Command
	events []fsm.Event
}

// reqRef names one numbered request of a session's part in a group.
type reqRef struct {
	Group     string
	Part, Seq uint64
}

// reqRecord is what the log says of a request: the first entry that
// carried it, and the first that granted it (0: none).
type reqRecord struct {
	index, grantIndex uint64
	at, grantAt       int64
	token             uint64
}

func newAppliedLog(now func() int64) *appliedLog {
	return &appliedLog{now: now, entries: map[string]map[uint64]*appliedEntry{},
		revoked: map[grantKey]bool{}, requests: map[reqRef]reqRecord{}}
}

// record is the replicas' hook; it runs on their apply goroutines.
func (l *appliedLog) record(a testhook.Applied) {
	at := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.entries[a.Group]
	if g == nil {
		g = map[uint64]*appliedEntry{}
		l.entries[a.Group] = g
	}
	if g[a.Index] != nil {
		return
	}
	g[a.Index] = &appliedEntry{at: at, cmds: a.Cmds, events: a.Events}
	for _, c := range a.Cmds {
		if c.Seq == 0 || !numbered(c.Kind) {
			continue
		}
		ref := reqRef{a.Group, c.Session, c.Seq}
		if r, ok := l.requests[ref]; !ok || r.index == 0 {
			r.index, r.at = a.Index, at
			l.requests[ref] = r
		}
	}
	for _, e := range a.Events {
		switch e.Kind {
		case fsm.EventGranted, fsm.EventElected:
			ref := reqRef{a.Group, e.Session, e.Seq}
			if r := l.requests[ref]; r.grantIndex == 0 {
				r.grantIndex, r.grantAt, r.token = a.Index, at, e.Token
				l.requests[ref] = r
			}
		case fsm.EventFreed, fsm.EventDeposed:
			if e.Reason == fsm.ReasonRevoked {
				l.revoked[grantKey{a.Group, e.Token}] = true
			}
		}
	}
}

// numbered reports whether k is a session's numbered request, whose
// (session, number) names it in the log.
func numbered(k fsm.Kind) bool {
	switch k {
	case fsm.KindAcquire, fsm.KindAcquireShared, fsm.KindCampaign, fsm.KindRelease, fsm.KindResign, fsm.KindProclaim:
		return true
	}
	return false
}

// endedByOperator reports whether an operator's revocation or session end
// ended grant token of lock (election key) name, on some replica already.
func (l *appliedLog) endedByOperator(name string, token uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.revoked[grantKey{groupOf(name), token}]
}

// request returns what the log says of request r, and whether it was
// applied at all.
func (l *appliedLog) request(r reqRef) (reqRecord, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, ok := l.requests[r]
	return rec, ok && rec.index != 0
}

// effect reports whether the entry at index of group freed grant token
// because its holder released it (a Release, a Resign), or, with proclaim,
// set the value of the term token to value (a Proclaim).
func (l *appliedLog) effect(group string, index, token uint64, proclaim bool, value string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.entries[group][index]
	if e == nil {
		return false
	}
	for _, ev := range e.events {
		switch {
		case proclaim && ev.Kind == fsm.EventProclaimed && ev.Token == token && ev.Value == value:
			return true
		case !proclaim && (ev.Kind == fsm.EventFreed || ev.Kind == fsm.EventDeposed) &&
			ev.Token == token && ev.Reason == fsm.ReasonReleased:
			return true
		}
	}
	return false
}

// around describes the entries of group from the first to the last that
// concern one of the grants tokens, those that name lock (election)
// name or end a session: what a reader of a violation needs beside the
// history. Keep-alives are left out.
func (l *appliedLog) around(group, name string, tokens ...uint64) string {
	fsmName := strings.TrimPrefix(name, electionPrefix)
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.entries[group]
	idx := make([]uint64, 0, len(g))
	for i := range g {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	lo, hi := ^uint64(0), uint64(0)
	for _, i := range idx {
		for _, ev := range g[i].events {
			if ev.Token != 0 && ev.Name == fsmName && slices.Contains(tokens, ev.Token) {
				lo, hi = min(lo, i), max(hi, i)
			}
		}
	}
	if lo > hi {
		return fmt.Sprintf("group %q: no applied entry concerns %q tokens %v\n", group, name, tokens)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "group %q, entries %d..%d (%q, tokens %v), as first applied (@ history time):\n", group, lo, hi, name, tokens)
	for _, i := range idx {
		if i < lo || i > hi {
			continue
		}
		e := g[i]
		for _, c := range e.cmds {
			if c.Name != fsmName && c.Kind != fsm.KindEndSession && c.Kind != fsm.KindExpire &&
				c.Kind != fsm.KindCloseSession && c.Kind != fsm.KindResume && c.Kind != fsm.KindLeaderStart {
				continue
			}
			fmt.Fprintf(&b, "%d @%d %v session=%d seq=%d token=%d target=%d owner=%d name=%q value=%q\n",
				i, e.at, c.Kind, c.Session, c.Seq, c.Token, c.Target, c.Owner, c.Name, c.Value)
		}
		for _, ev := range e.events {
			if ev.Name != fsmName && ev.Kind != fsm.EventSessionEnded && ev.Kind != fsm.EventLeaderStarted {
				continue
			}
			fmt.Fprintf(&b, "%d   event %d reason=%v session=%d seq=%d token=%d name=%q value=%q\n",
				i, ev.Kind, ev.Reason, ev.Session, ev.Seq, ev.Token, ev.Name, ev.Value)
		}
	}
	return b.String()
}

// resolve replaces every call that ended in an error (Unknown) by what the
// group's applied log says became of it, so that no call stays open in the
// history for good (porcupine must otherwise try it at every point until
// the end, and a few of them make its search explode):
//
//   - an Acquire, TryAcquire, Campaign or TryCampaign (shared ones too)
//     that was granted is Granted with its token, returning when its grant
//     was first applied; its caller never learned of it, so loses gives it
//     a Lose (its withdrawal or its session's end freed it);
//   - a Release, Resign or Proclaim that was applied returns then, OK if
//     it took effect and NotHeld if not;
//   - a call whose request never took effect (never applied, applied but
//     not granted, or none was made) is left out: it changed nothing;
//   - a Kept of unknown outcome is left out: it changes nothing and
//     constrains nothing, and a dozen of them open until the final read
//     made porcupine's search of a shared lock's history run out of time.
//
// An operator's Revoke of unknown outcome, which has no request of its
// own, stays Unknown.
func resolve(l *appliedLog, ops []Op) []Op {
	out := ops[:0:0]
	for _, op := range ops {
		if op.Outcome == Unknown && op.Kind == OpKept {
			continue
		}
		if op.Outcome != Unknown || op.Kind == OpRevoke {
			out = append(out, op)
			continue
		}
		rec, applied := l.request(op.Req)
		if op.Req == (reqRef{}) || !applied {
			continue
		}
		switch op.Kind {
		case OpAcquire, OpTryAcquire, OpCampaign, OpTryCampaign:
			if rec.grantIndex == 0 {
				continue
			}
			op.Outcome, op.Token, op.Return, op.Resolved = Granted, rec.token, max(rec.grantAt, op.Call), true
		case OpRelease, OpResign, OpProclaim:
			op.Outcome, op.Return, op.Resolved = NotHeld, max(rec.at, op.Call), true
			if l.effect(op.Req.Group, rec.index, op.Token, op.Kind == OpProclaim, op.Value) {
				op.Outcome = OK
			}
		default:
			out = append(out, op)
			continue
		}
		out = append(out, op)
	}
	return out
}
