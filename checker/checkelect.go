package checker

import (
	"fmt"
)

// epochsRise checks, per election, that epochs rise with real time across
// the whole run, restarts included: a term granted after another term was
// returned, or after a read returned it, has a larger epoch; and a Leader
// read never shows an epoch older than one returned before it began.
func epochsRise(ops []Op) []string {
	byElection := map[string][]Op{}
	for _, op := range ops {
		if op.Kind.campaign() && op.Outcome == Granted || op.Kind == OpLeader && op.Held {
			byElection[op.Lock] = append(byElection[op.Lock], op)
		}
	}
	var v []string
	for key, es := range byElection {
		inRealTime(es, func(op Op, highest uint64) {
			switch {
			case op.Kind.campaign() && op.Token <= highest:
				v = append(v, fmt.Sprintf("%s: client %d elected with epoch %d after epoch %d had been returned",
					key, op.Client, op.Token, highest))
			case op.Kind == OpLeader && op.Token < highest:
				v = append(v, fmt.Sprintf("%s: a Leader read returned epoch %d after epoch %d had been returned",
					key, op.Token, highest))
			}
		})
	}
	return v
}

// observedInOrder checks one observer's deliveries, across its
// re-subscriptions: epochs never go back, a term that ended (a delivery
// without a leader came after it) never comes back, and within a term the
// values arrive in the order the leader proclaimed them.
func observedInOrder(who string, seen []Observation) []string {
	var v []string
	var top uint64 // the highest epoch delivered
	topN := -1     // the number of its latest value
	ended := false // a delivery without a leader came after epoch top
	for i, ob := range seen {
		t := ob.Info.Token
		_, n, _ := valueOrder(ob.Info.Value)
		where := fmt.Sprintf("delivery %d (stream %d, replica %d)", i, ob.Stream, ob.Node)
		switch {
		case t == 0:
			ended = true
		case t < top:
			v = append(v, fmt.Sprintf("%s: %s has epoch %d after epoch %d", who, where, t, top))
		case t == top && ended:
			v = append(v, fmt.Sprintf("%s: %s has epoch %d again after it ended", who, where, t))
		case t == top && n < topN:
			v = append(v, fmt.Sprintf("%s: %s has value %q of epoch %d after a later one", who, where, ob.Info.Value, t))
		default:
			top, topN, ended = t, n, false
		}
	}
	return v
}

// observedOrigin checks that every leader an observer of election key was
// delivered was a term the group granted to that session (or a campaign of
// that session whose outcome its caller never learned), with a value that
// session campaigned or proclaimed with in that election: observers are
// told nothing nobody did.
func observedOrigin(who, key string, ops []Op, seen []Observation) []string {
	terms := map[uint64]uint64{}           // granted: epoch -> session
	unknown := map[uint64]bool{}           // sessions with a campaign of unknown outcome
	values := map[uint64]map[string]bool{} // session -> values it campaigned or proclaimed with
	for _, op := range ops {
		if op.Lock != key || !op.Kind.campaign() && op.Kind != OpProclaim {
			continue
		}
		if values[op.Session] == nil {
			values[op.Session] = map[string]bool{}
		}
		values[op.Session][op.Value] = true
		if op.Kind.campaign() {
			switch op.Outcome {
			case Granted:
				terms[op.Token] = op.Session
			case Unknown:
				unknown[op.Session] = true
			}
		}
	}
	var v []string
	for i, ob := range seen {
		info := ob.Info
		if info.Token == 0 {
			continue
		}
		if s, ok := terms[info.Token]; ok && s != info.SessionID || !ok && !unknown[info.SessionID] {
			v = append(v, fmt.Sprintf("%s: delivery %d shows epoch %d of session %d, which the group never granted it",
				who, i, info.Token, info.SessionID))
		}
		if !values[info.SessionID][info.Value] {
			v = append(v, fmt.Sprintf("%s: delivery %d shows value %q, which session %d never campaigned or proclaimed with",
				who, i, info.Value, info.SessionID))
		}
	}
	return v
}

// observed runs the observer checks on every observer's deliveries.
func observed(e *env, ops []Op) []string {
	var v []string
	for _, o := range e.observers {
		who := fmt.Sprintf("observer %d of %q", o.id, o.name)
		seen := o.observations()
		v = append(v, observedInOrder(who, seen)...)
		v = append(v, observedOrigin(who, electionKey(o.name), ops, seen)...)
	}
	return v
}
