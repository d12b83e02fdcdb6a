package checker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// The checks must catch what they claim to: each history below breaks one
// property, and the check for it reports it.

func grant(client int, session, token uint64, call, ret int64) Op {
	return Op{Client: client, Kind: OpAcquire, Lock: "L", Session: session, Token: token, Outcome: Granted, Call: call, Return: ret}
}

func release(client int, session, token uint64, out Outcome, call, ret int64) Op {
	return Op{Client: client, Kind: OpRelease, Lock: "L", Session: session, Token: token, Outcome: out, Call: call, Return: ret}
}

func read(held bool, session, token uint64, at int64) Op {
	return Op{Client: -1, Kind: OpRead, Lock: "L", Held: held, Session: session, Token: token, Outcome: OK, Call: at, Return: at}
}

func ids(ops []Op) []Op {
	for i := range ops {
		ops[i].ID = i + 1
	}
	return ops
}

func TestModelAcceptsALegalHistory(t *testing.T) {
	h := ids([]Op{
		grant(0, 1, 10, 0, 10),
		{Client: 1, Kind: OpTryAcquire, Lock: "L", Session: 2, Outcome: Locked, Call: 5, Return: 12},
		grant(1, 2, 20, 6, 40), // queued behind 10
		release(0, 1, 10, OK, 20, 30),
		{Client: 2, Kind: OpAcquire, Lock: "L", Session: 3, Outcome: Unknown, Call: 35, Return: never},
		release(1, 2, 20, OK, 50, 60),
		grant(0, 1, 30, 70, 80), // the unknown acquire's grant may have come and gone
		{Client: 0, Kind: OpLose, Lock: "L", Session: 1, Token: 30, Outcome: OK, Call: 80, Return: 200}, // session expired
		{Client: 2, Kind: OpLose, Lock: "L", Session: 3, Phantom: 5, Outcome: OK, Call: 35, Return: 200},
		read(false, 0, 0, 300),
	})
	require.Empty(t, linearizable(h, LockModel))
}

func TestModelRejects(t *testing.T) {
	for name, h := range map[string][]Op{
		"two grants at once": {
			grant(0, 1, 10, 0, 10), grant(1, 2, 20, 20, 30), read(true, 2, 20, 40),
		},
		"a lower token after a higher one": {
			grant(0, 1, 20, 0, 10), release(0, 1, 20, OK, 11, 12), grant(1, 2, 10, 20, 30),
		},
		"a release after the lock passed on": {
			grant(0, 1, 10, 0, 10),
			{Client: 0, Kind: OpLose, Lock: "L", Session: 1, Token: 10, Outcome: OK, Call: 10, Return: 40},
			grant(1, 2, 20, 20, 40), release(0, 1, 10, OK, 50, 60),
		},
		"locked while free": {
			{Client: 1, Kind: OpTryAcquire, Lock: "L", Session: 2, Outcome: Locked, Call: 0, Return: 10},
		},
		"a held lock forgotten": {
			grant(0, 1, 10, 0, 10), read(false, 0, 0, 20),
		},
		"a released lock still held": {
			grant(0, 1, 10, 0, 10), release(0, 1, 10, OK, 11, 12), read(true, 1, 10, 20),
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.NotEmpty(t, linearizable(ids(h), LockModel))
		})
	}
}

func TestFencingCheckCatchesInterleaving(t *testing.T) {
	ops := []Op{grant(0, 1, 10, 0, 1), grant(1, 2, 20, 2, 3)}
	ok := map[string][]Write{"L": {{Client: 0, Token: 10}, {Client: 0, Token: 10}, {Client: 1, Token: 20}}}
	require.Empty(t, fencing(ops, ok))
	bad := map[string][]Write{"L": {{Client: 0, Token: 10}, {Client: 1, Token: 20}, {Client: 0, Token: 10}}}
	require.Len(t, fencing(ops, bad), 1)
	forged := map[string][]Write{"L": {{Client: 1, Token: 10}}}
	require.Len(t, fencing(ops, forged), 1)
}

func TestTokensRiseCheck(t *testing.T) {
	require.Empty(t, tokensRise([]Op{grant(0, 1, 10, 0, 10), grant(1, 2, 20, 11, 12), grant(2, 3, 15, 5, 30)}),
		"concurrent grants may come in either order")
	require.NotEmpty(t, tokensRise([]Op{grant(0, 1, 20, 0, 10), grant(1, 2, 15, 11, 12)}))
	require.NotEmpty(t, tokensRise([]Op{grant(0, 1, 20, 0, 10), grant(1, 2, 20, 0, 12)}))
}

func TestMinorityCheck(t *testing.T) {
	c := &Cluster{members: map[uint64]string{1: "", 2: "", 3: ""}, groups: groupsFor(3)}
	w := []Window{{Start: 100, End: 200, Minority: map[uint64]bool{3: true}}}
	on := func(node uint64, call, ret int64) Op { g := grant(0, 1, 10, call, ret); g.Node = node; return g }
	require.Empty(t, minority(c, []Op{on(3, 50, 150), on(1, 120, 150), on(3, 150, 250)}, w))
	require.NotEmpty(t, minority(c, []Op{on(3, 120, 150)}, w))
}

// On five replicas, the minority side {1,2} holds a quorum of group a
// (voters 1,2,3) and of no other group: a grant there in a is no violation.
func TestMinorityCheckPerGroup(t *testing.T) {
	c := &Cluster{members: map[uint64]string{1: "", 2: "", 3: "", 4: "", 5: ""}, groups: groupsFor(5)}
	w := []Window{{Start: 100, End: 200, Minority: map[uint64]bool{1: true, 2: true}}}
	on := func(name string) Op { g := grant(0, 1, 10, 120, 150); g.Node, g.Lock = 1, name; return g }
	require.Empty(t, minority(c, []Op{on("x@a")}, w))
	require.Len(t, minority(c, []Op{on("x"), on("x@b"), on("x@a")}, w), 2)
}

// Tokens come from their own group's log: the same token in two groups is
// no duplicate, and a lower token in another group is no regression; within
// a group both are still caught.
func TestTokensRisePerGroup(t *testing.T) {
	in := func(op Op, name string) Op { op.Lock = name; return op }
	require.Empty(t, tokensRise([]Op{in(grant(0, 1, 20, 0, 10), "L"), in(grant(1, 2, 20, 11, 12), "L@a"),
		in(grant(2, 3, 5, 13, 14), "L@b")}))
	require.Len(t, tokensRise([]Op{in(grant(0, 1, 20, 0, 10), "L@a"), in(grant(1, 2, 15, 11, 12), "M@a")}), 1)
	require.Len(t, tokensRise([]Op{in(grant(0, 1, 20, 0, 10), "L@b"), in(grant(1, 2, 20, 11, 12), "M@b")}), 2)
}

// A write is checked against the grants of its own lock's group: a token
// granted in another group does not vouch for it.
func TestFencingCheckPerGroup(t *testing.T) {
	a := grant(0, 1, 10, 0, 1)
	a.Lock = "L@a"
	b := grant(1, 2, 10, 0, 1)
	b.Lock = "L@b"
	require.Empty(t, fencing([]Op{a, b}, map[string][]Write{"L@a": {{Client: 0, Token: 10}}, "L@b": {{Client: 1, Token: 10}}}))
	require.Len(t, fencing([]Op{a}, map[string][]Write{"L@b": {{Client: 0, Token: 10}}}), 1)
}

// Election histories: an election is a lock whose holder has a value.

func campaignOp(client int, session, token uint64, value string, call, ret int64) Op {
	return Op{Client: client, Kind: OpCampaign, Lock: "E", Session: session, Token: token, Value: value, Outcome: Granted, Call: call, Return: ret}
}

func proclaimOp(client int, session, token uint64, value string, out Outcome, call, ret int64) Op {
	if out == Unknown {
		ret = never
	}
	return Op{Client: client, Kind: OpProclaim, Lock: "E", Session: session, Token: token, Value: value, Outcome: out, Call: call, Return: ret}
}

func resignOp(client int, session, token uint64, out Outcome, call, ret int64) Op {
	return Op{Client: client, Kind: OpResign, Lock: "E", Session: session, Token: token, Outcome: out, Call: call, Return: ret}
}

func leaderRead(held bool, session, token uint64, value string, call, ret int64) Op {
	return Op{Client: -1, Kind: OpLeader, Lock: "E", Held: held, Session: session, Token: token, Value: value, Outcome: OK, Call: call, Return: ret}
}

func TestModelAcceptsALegalElection(t *testing.T) {
	h := ids([]Op{
		campaignOp(0, 1, 10, "c0/1", 0, 10),
		campaignOp(1, 2, 20, "c1/1", 5, 60), // queued behind 10
		proclaimOp(0, 1, 10, "c0/2", OK, 11, 20),
		leaderRead(true, 1, 10, "c0/2", 21, 25),
		proclaimOp(0, 1, 10, "c0/3", Unknown, 26, 0),
		leaderRead(true, 1, 10, "c0/3", 30, 35), // the unknown proclamation happened
		resignOp(0, 1, 10, OK, 40, 50),
		proclaimOp(0, 1, 10, "c0/4", NotHeld, 51, 52),
		leaderRead(true, 2, 20, "c1/1", 61, 62),
		{Client: 2, Kind: OpCampaign, Lock: "E", Session: 3, Value: "c2/1", Outcome: Unknown, Call: 63, Return: never},
		{Client: 1, Kind: OpLose, Lock: "E", Session: 2, Token: 20, Outcome: OK, Call: 60, Return: 300}, // expired
		leaderRead(true, 3, 30, "c2/1", 70, 80), // the unknown campaign won, after the expiry
		leaderRead(true, 3, 30, "c2/1", 81, 82),
		{Client: 2, Kind: OpLose, Lock: "E", Session: 3, Phantom: 10, Outcome: OK, Call: 63, Return: 300}, // withdrawn
		leaderRead(false, 0, 0, "", 400, 410),
	})
	require.Empty(t, linearizable(h, LockModel))
}

func TestModelRejectsElections(t *testing.T) {
	for name, h := range map[string][]Op{
		"two leaders at once": {
			campaignOp(0, 1, 10, "a", 0, 10), campaignOp(1, 2, 20, "b", 20, 30), leaderRead(true, 2, 20, "b", 40, 41),
		},
		"an epoch going down": {
			campaignOp(0, 1, 20, "a", 0, 10), resignOp(0, 1, 20, OK, 11, 12), campaignOp(1, 2, 10, "b", 20, 30),
		},
		"a proclamation lost": {
			campaignOp(0, 1, 10, "a", 0, 10), proclaimOp(0, 1, 10, "a2", OK, 11, 12), leaderRead(true, 1, 10, "a", 20, 21),
		},
		"a value going back": {
			campaignOp(0, 1, 10, "a", 0, 10), proclaimOp(0, 1, 10, "a2", OK, 11, 12), proclaimOp(0, 1, 10, "a3", OK, 13, 14),
			leaderRead(true, 1, 10, "a3", 20, 21), leaderRead(true, 1, 10, "a2", 22, 23),
		},
		"a proclamation refused to the leader": {
			campaignOp(0, 1, 10, "a", 0, 10), proclaimOp(0, 1, 10, "a2", NotHeld, 11, 12),
		},
		"a proclamation after the term passed on": {
			campaignOp(0, 1, 10, "a", 0, 10), resignOp(0, 1, 10, OK, 11, 12), campaignOp(1, 2, 20, "b", 13, 14),
			proclaimOp(0, 1, 10, "a2", OK, 15, 16),
		},
		"a resigned leader still read": {
			campaignOp(0, 1, 10, "a", 0, 10), resignOp(0, 1, 10, OK, 11, 12), leaderRead(true, 1, 10, "a", 20, 21),
		},
		"a phantom read with two epochs": {
			{Client: 0, Kind: OpCampaign, Lock: "E", Session: 1, Value: "a", Outcome: Unknown, Call: 0, Return: never},
			leaderRead(true, 1, 10, "a", 5, 6), leaderRead(true, 1, 11, "a", 7, 8),
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.NotEmpty(t, linearizable(ids(h), LockModel))
		})
	}
}

func TestEpochsRiseCheck(t *testing.T) {
	ok := []Op{campaignOp(0, 1, 10, "a", 0, 10), leaderRead(true, 1, 10, "a", 11, 12), campaignOp(1, 2, 20, "b", 5, 30),
		leaderRead(true, 1, 10, "a", 13, 31)} // concurrent with the grant of 20
	require.Empty(t, epochsRise(ok))
	require.NotEmpty(t, epochsRise([]Op{campaignOp(0, 1, 20, "a", 0, 10), campaignOp(1, 2, 15, "b", 11, 12)}))
	require.NotEmpty(t, epochsRise([]Op{campaignOp(0, 1, 20, "a", 0, 10), leaderRead(true, 2, 15, "b", 11, 12)}))
	require.NotEmpty(t, epochsRise([]Op{leaderRead(true, 2, 20, "b", 0, 1), campaignOp(1, 2, 20, "b", 5, 12)}),
		"an epoch granted again")
}

func TestObserverChecks(t *testing.T) {
	ob := func(token, session uint64, value string) Observation {
		return Observation{Info: fencelock.LeaderInfo{Election: "E", Token: token, SessionID: session, Value: value}}
	}
	none := Observation{Info: fencelock.LeaderInfo{Election: "E"}}
	good := []Observation{none, ob(10, 1, "c0/1"), ob(10, 1, "c0/3"), ob(10, 1, "c0/3"), none, ob(20, 2, "c1/1"), ob(30, 3, "c2/4")}
	require.Empty(t, observedInOrder("o", good))
	for name, seen := range map[string][]Observation{
		"an older epoch":              {ob(20, 2, "c1/1"), ob(10, 1, "c0/1")},
		"an ended term again":         {ob(10, 1, "c0/1"), none, ob(10, 1, "c0/1")},
		"a value of a term goes back": {ob(10, 1, "c0/3"), ob(10, 1, "c0/2")},
	} {
		require.Len(t, observedInOrder("o", seen), 1, name)
	}

	ops := []Op{campaignOp(0, 1, 10, "c0/1", 0, 1), proclaimOp(0, 1, 10, "c0/2", Unknown, 2, 0),
		{Client: 2, Kind: OpCampaign, Lock: "E", Session: 3, Value: "c2/1", Outcome: Unknown, Call: 3, Return: never}}
	require.Empty(t, observedOrigin("o", "E", ops, []Observation{none, ob(10, 1, "c0/1"), ob(10, 1, "c0/2"), ob(30, 3, "c2/1")}))
	require.Len(t, observedOrigin("o", "E", ops, []Observation{ob(10, 2, "c0/1")}), 2, "another session's epoch and value")
	require.Len(t, observedOrigin("o", "E", ops, []Observation{ob(11, 1, "c0/1")}), 1, "an epoch never granted")
	require.Len(t, observedOrigin("o", "E", ops, []Observation{ob(10, 1, "c0/9")}), 1, "a value never proclaimed")
}

func revoke(token uint64, out Outcome, call, ret int64) Op {
	return Op{Client: -2, Kind: OpRevoke, Lock: "L", Token: token, Outcome: out, Call: call, Return: ret}
}

func kept(client int, session, token uint64, out Outcome, call, ret int64) Op {
	return Op{Client: client, Kind: OpKept, Lock: "L", Session: session, Token: token, Outcome: out, Call: call, Return: ret}
}

// An operator's revocation frees the named grant; the queue head is granted
// next; the revoked holder's late release is NotHeld; a resumed session
// keeps its grant; a try-campaign is refused only while the election is led.
func TestModelAcceptsRevokeResumeAndTryCampaign(t *testing.T) {
	h := ids([]Op{
		grant(0, 1, 10, 0, 10),
		kept(0, 1, 10, OK, 11, 15),
		kept(1, 2, 10, NotHeld, 11, 15),
		revoke(10, OK, 20, 30),
		grant(1, 2, 20, 5, 35), // queued, granted by the revocation
		release(0, 1, 10, NotHeld, 40, 45),
		revoke(10, NotHeld, 46, 47), // that grant is gone
		revoke(0, OK, 50, 55),       // whatever grant is current
		{Client: 1, Kind: OpLose, Lock: "L", Session: 2, Token: 20, Outcome: OK, Call: 35, Return: 200},
		revoke(0, NotHeld, 60, 65),
		{Client: 2, Kind: OpAcquire, Lock: "L", Session: 3, Outcome: Unknown, Call: 70, Return: never},
		read(true, 3, 40, 80),  // the phantom grant shows its token
		revoke(40, OK, 90, 95), // and is revoked by it
		{Client: 2, Kind: OpLose, Lock: "L", Session: 3, Phantom: 11, Outcome: OK, Call: 70, Return: 200},
		read(false, 0, 0, 300),
	})
	require.Empty(t, linearizable(h, LockModel))

	e := ids([]Op{
		campaignOp(0, 1, 10, "a", 0, 10),
		{Client: 1, Kind: OpTryCampaign, Lock: "E", Session: 2, Value: "b", Outcome: Locked, Call: 11, Return: 12},
		{Client: 0, Kind: OpResign, Lock: "E", Session: 1, Token: 10, Outcome: OK, Call: 13, Return: 14},
		{Client: 1, Kind: OpTryCampaign, Lock: "E", Session: 2, Value: "b", Token: 20, Outcome: Granted, Call: 15, Return: 16},
		{Client: -1, Kind: OpLeader, Lock: "E", Held: true, Session: 2, Token: 20, Value: "b", Outcome: OK, Call: 17, Return: 18},
	})
	require.Empty(t, linearizable(e, LockModel))
}

func TestModelRejectsWrongRevokesAndResumes(t *testing.T) {
	for name, h := range map[string][]Op{
		"a revoked grant still held": {
			grant(0, 1, 10, 0, 10), revoke(10, OK, 20, 30), read(true, 1, 10, 40),
		},
		"a revoke of a free lock that succeeded": {
			grant(0, 1, 10, 0, 10), release(0, 1, 10, OK, 11, 12), revoke(0, OK, 20, 30),
		},
		"a revoke of the current grant refused": {
			grant(0, 1, 10, 0, 10), revoke(10, NotHeld, 20, 30), read(true, 1, 10, 40),
		},
		"a resume that kept a grant already passed on": {
			grant(0, 1, 10, 0, 10), revoke(10, OK, 11, 12), kept(0, 1, 10, OK, 20, 30),
		},
		"a resume that lost a grant the session held": {
			grant(0, 1, 10, 0, 10), kept(0, 1, 10, NotHeld, 20, 30), read(true, 1, 10, 40),
		},
		"a try-campaign refused while nobody led": {
			{Client: 1, Kind: OpTryCampaign, Lock: "E", Session: 2, Value: "b", Outcome: Locked, Call: 1, Return: 2},
			{Client: -1, Kind: OpLeader, Lock: "E", Outcome: OK, Call: 3, Return: 4},
		},
	} {
		require.NotEmpty(t, linearizable(ids(h), LockModel), name)
	}
}

// A read of a lock in a named group shows its holder's part there (its own
// ID in that group): it names the grant by token, so a read of the right
// token passes whatever its session, and a read of a wrong one still fails.
func TestReadOfPartSession(t *testing.T) {
	part := func(op Op) Op { op.PartSession = true; return op }
	require.Empty(t, linearizable(ids([]Op{grant(0, 1, 10, 0, 1), part(read(true, 77, 10, 2))}), LockModel))
	require.NotEmpty(t, linearizable(ids([]Op{grant(0, 1, 10, 0, 1), part(read(true, 77, 9, 2))}), LockModel))
	require.NotEmpty(t, linearizable(ids([]Op{grant(0, 1, 10, 0, 1), read(true, 77, 10, 2)}), LockModel),
		"a default group's read still names the session")
}
