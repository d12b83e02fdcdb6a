package checker

import (
	"testing"

	"github.com/stretchr/testify/require"
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
	require.Empty(t, linearizable(h))
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
			require.NotEmpty(t, linearizable(ids(h)))
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
	w := []Window{{Start: 100, End: 200, Minority: map[uint64]bool{3: true}}}
	on := func(node uint64, call, ret int64) Op { g := grant(0, 1, 10, call, ret); g.Node = node; return g }
	require.Empty(t, minority([]Op{on(3, 50, 150), on(1, 120, 150), on(3, 150, 250)}, w))
	require.NotEmpty(t, minority([]Op{on(3, 120, 150)}, w))
}
