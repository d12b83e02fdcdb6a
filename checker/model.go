package checker

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// OpKind names an operation of the lock history.
type OpKind uint8

// The operations. Acquire, TryAcquire and Release are the clients' calls;
// Lose and Read are recorded by the checker:
//   - Lose is the group freeing a grant its holder never released (session
//     expired or closed, its replica crashed, or a grant whose outcome was
//     unknown withdrawn). It happens at an unknown point between the grant
//     and the next grant of the lock (or the final read), and is how a
//     history explains a lock freed without a Release.
//   - Read is the final linearizable read of the lock (Node.Inspect), after
//     healing: it shows that nothing acknowledged was lost.
//
// Election operations work on an election's state, in a namespace of their
// own (Op.Lock is electionKey(name)): Campaign is an Acquire with wait that
// also sets the leader's value and returns the term's epoch (its token),
// TryCampaign is a TryAcquire of the election, Resign is a Release,
// Proclaim replaces the value within the term, and Leader is a
// linearizable read of the leader, its epoch and its value, during the run
// or as the final read.
//
// Revoke is an operator's (Node.RevokeGrant, Node.Revoke,
// Node.RevokeLeadership): it frees the lock (election) if it is held with
// Token, or, with Token 0, held at all, and is NotHeld otherwise. Kept is a
// client's ResumeSession, seen from one lock it held: OK if the resumed
// session kept that grant (Token), NotHeld if not; it changes nothing.
const (
	OpAcquire OpKind = iota + 1
	OpTryAcquire
	OpRelease
	OpLose
	OpRead
	OpCampaign
	OpResign
	OpProclaim
	OpLeader
	OpTryCampaign
	OpRevoke
	OpKept
)

func (k OpKind) String() string {
	return [...]string{"?", "acquire", "try-acquire", "release", "lose", "read",
		"campaign", "resign", "proclaim", "leader", "try-campaign", "revoke", "kept"}[k]
}

// campaign reports whether k elects: Campaign or TryCampaign.
func (k OpKind) campaign() bool { return k == OpCampaign || k == OpTryCampaign }

// grants reports whether k may grant a lock or elect a leader.
func (k OpKind) grants() bool { return k == OpAcquire || k == OpTryAcquire || k.campaign() }

// Outcome is what an operation returned.
type Outcome uint8

// The outcomes.
const (
	Granted Outcome = iota + 1 // acquire: Token is the grant's
	Locked                     // try-acquire: held by someone else
	OK                         // release done; lose and read
	NotHeld                    // release: the grant was not current
	Unknown                    // timed out or failed: may or may not have happened
)

func (o Outcome) String() string {
	return [...]string{"?", "granted", "locked", "ok", "not-held", "unknown"}[o]
}

// Op is one operation of the history. Times are nanoseconds since the
// scenario started; an operation with an Unknown outcome returns "never"
// (porcupine's way: it may take effect at any point after its call).
type Op struct {
	Client  int
	Node    uint64 // the replica the client's session lives on
	Kind    OpKind
	Lock    string
	Session uint64
	Token   uint64 // acquire: granted token; release and lose: the grant
	Phantom int    // lose: the unknown acquire or campaign whose grant it frees; 0 otherwise
	ID      int    // unique in the history, for phantoms
	Outcome Outcome
	Held    bool  // read, leader: whether it is held (Session, Token, Value: by whom)
	Shared  bool  // acquire: a shared request (AcquireShared, or a semaphore's with Permits); read: held in shared mode
	Permits int   // acquire of a semaphore: its permit count; 0 for a lock
	Holders []Ref // read of a shared lock or semaphore: every current grant
	// read of a lock in a named group that does not know its holder's
	// session: a part opened before the group wrote log version 10 shows
	// SessionID 0 (its PartID names it in that group only), not the
	// Session.ID the clients record, so the read names its grant by Token
	// alone (unique in its group). Other reads name the holder's Session.ID
	// in every group, and must name the one the model holds.
	PartSession bool
	Value       string // campaign, proclaim: the leader's new value; leader: the value read
	// leader: the leader session's name and when it was elected, as the
	// read reported them (what every observer must end on too)
	LeaderName string
	ElectedAt  time.Time
	// leader: the leader's part in the election's group
	// (LeaderInfo.PartID), as Observe reports it too.
	LeaderPart uint64
	Call       int64
	Return     int64
	// Req is the numbered request the call made (testhook.WithRequests),
	// by which the group's applied log names it; zero if it made none.
	Req reqRef
	// Resolved marks a call that ended in an error whose outcome the
	// applied log told (resolve): its caller never learned it.
	Resolved bool
}

// never is the return time of an operation whose outcome is unknown.
const never = int64(1) << 62

// lockState is the model of one lock or election: who holds it (leads it),
// with which grant, the leader's value, and the highest token granted so
// far. A grant whose outcome its caller never learned (a phantom) is held
// with its acquire's (campaign's) ID and token 0 until a read shows its
// token.
type lockState struct {
	Session uint64 // 0 when free
	Token   uint64
	Phantom int
	Value   string // elections: the leader's value
	Last    uint64
}

// LockModel is the sequential specification of a named exclusive lock with
// fencing tokens: one holder at a time, every grant's token larger than
// every earlier one, Release only by the current grant, TryAcquire fails
// only when held. Partitioned by lock name. Unknown outcomes are
// nondeterministic: the operation happened or it did not.
var LockModel = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		byLock := map[string][]porcupine.Operation{}
		var names []string
		for _, op := range h {
			name := op.Input.(Op).Lock
			if _, ok := byLock[name]; !ok {
				names = append(names, name)
			}
			byLock[name] = append(byLock[name], op)
		}
		out := make([][]porcupine.Operation, 0, len(names))
		for _, n := range names {
			out = append(out, byLock[n])
		}
		return out
	},
	Init: func() []any { return []any{lockState{}} },
	Step: func(state, input, _ any) []any {
		return step(state.(lockState), input.(Op))
	},
	Equal: func(a, b any) bool { return a.(lockState) == b.(lockState) },
	DescribeOperation: func(input, _ any) string {
		op := input.(Op)
		return fmt.Sprintf("%v(s%d,t%d,p%d,%q)->%v", op.Kind, op.Session, op.Token, op.Phantom, op.Value, op.Outcome)
	},
	DescribeState: func(state any) string {
		s := state.(lockState)
		if s.Session == 0 {
			return fmt.Sprintf("free last=%d", s.Last)
		}
		return fmt.Sprintf("held s%d t%d p%d %q last=%d", s.Session, s.Token, s.Phantom, s.Value, s.Last)
	},
}

// step returns the states the lock (election) may be in after op; none if
// op could not have returned what it did.
func step(s lockState, op Op) []any {
	free := s.Session == 0
	mine := s.Session == op.Session && s.Token == op.Token && s.Phantom == 0
	switch op.Kind {
	case OpAcquire, OpTryAcquire, OpCampaign, OpTryCampaign:
		switch op.Outcome {
		case Granted:
			if free && op.Token > s.Last {
				return []any{lockState{Session: op.Session, Token: op.Token, Value: op.Value, Last: op.Token}}
			}
		case Locked:
			if !free {
				return []any{s}
			}
		case Unknown:
			if free { // granted to nobody who knows it, or not at all
				return []any{s, lockState{Session: op.Session, Phantom: op.ID, Value: op.Value, Last: s.Last}}
			}
			return []any{s}
		}
	case OpRelease, OpResign:
		switch op.Outcome {
		case OK:
			if mine {
				return []any{lockState{Last: s.Last}}
			}
		case NotHeld:
			if !mine {
				return []any{s}
			}
		case Unknown:
			if mine {
				return []any{s, lockState{Last: s.Last}}
			}
			return []any{s}
		}
	case OpProclaim:
		proclaimed := s
		proclaimed.Value = op.Value
		switch op.Outcome {
		case OK:
			if mine {
				return []any{proclaimed}
			}
		case NotHeld:
			if !mine {
				return []any{s}
			}
		case Unknown:
			if mine {
				return []any{s, proclaimed}
			}
			return []any{s}
		}
	case OpLose:
		if op.Phantom != 0 { // the withdrawal of a grant nobody learned of, if it happened
			if s.Phantom == op.Phantom {
				return []any{lockState{Last: s.Last}}
			}
			return []any{s}
		}
		if mine {
			return []any{lockState{Last: s.Last}}
		}
		return []any{s} // released already (by a release whose outcome was unknown)
	case OpRevoke:
		return revokeStep(s, op)
	case OpKept:
		switch op.Outcome {
		case OK:
			if mine {
				return []any{s}
			}
		case NotHeld:
			if !mine {
				return []any{s}
			}
		case Unknown:
			return []any{s}
		}
	case OpRead, OpLeader:
		return readStep(s, op)
	}
	return nil
}

// revokeStep frees the grant the operator named (Token), or any (Token 0).
// A phantom grant whose token no read has shown yet may be the one named,
// if the token is above every earlier one.
func revokeStep(s lockState, op Op) []any {
	freed := lockState{Last: max(s.Last, op.Token)}
	match := s.Session != 0 && (op.Token == 0 || s.Token == op.Token)
	maybe := s.Session != 0 && s.Phantom != 0 && s.Token == 0 && op.Token > s.Last
	switch op.Outcome {
	case OK:
		switch {
		case match:
			return []any{freed}
		case maybe:
			return []any{freed}
		}
	case NotHeld:
		if !match {
			return []any{s}
		}
	case Unknown:
		if match || maybe {
			return []any{s, freed}
		}
		return []any{s}
	}
	return nil
}

// readStep is a linearizable read of the lock (election): it must show the
// holder, token and value of the state. A phantom grant shows its token for
// the first time in a read; it stays a phantom (its caller never learned
// of it, so only its Lose frees it).
func readStep(s lockState, op Op) []any {
	if !op.Held {
		if s.Session == 0 {
			return []any{s}
		}
		return nil
	}
	if s.Session != op.Session && !op.PartSession || s.Value != op.Value {
		return nil
	}
	switch {
	case s.Phantom == 0 && s.Token == op.Token:
		return []any{s}
	case s.Phantom != 0 && (s.Token == op.Token || s.Token == 0 && op.Token > s.Last):
		s.Token, s.Last = op.Token, max(s.Last, op.Token)
		return []any{s}
	}
	return nil
}
