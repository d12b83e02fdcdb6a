package checker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
)

func testEnv() *env {
	h := newHistory()
	return &env{h: h, applied: newAppliedLog(h.now), beliefs: beliefs{m: map[string]map[int]*belief{}}}
}

// A grant that ends (an operator ended its session) before its lagging
// replica tells the caller, while the next grant returns first: the Lose
// loses() adds may take effect from the grant's call, so the history
// linearizes. A Lose from the grant's return, as before, is rejected.
func TestLaggingReplicaHistoryLinearizes(t *testing.T) {
	e := testEnv() // no session lives: session 1 ended
	ops := []Op{
		grant(0, 1, 10, 0, 100), // its replica lags: told at 100
		grant(1, 2, 20, 30, 50), // granted once session 1 ended, told at 50
	}
	history := append(append([]Op(nil), ops...), loses(e, ops, 200)...)
	history = ids(append(history, read(true, 2, 20, 200)))
	require.Empty(t, linearizable(history, LockModel))

	fromReturn := ids([]Op{ops[0], ops[1],
		{Client: 0, Kind: OpLose, Lock: "L", Session: 1, Token: 10, Outcome: OK, Call: 100, Return: 100},
		read(true, 2, 20, 200)})
	require.NotEmpty(t, linearizable(fromReturn, LockModel))
}

// A revocation exempts from "the holder stops first" only the grant the
// group's log shows it ended: the successor it granted, marked while the
// revocation was in flight, is checked in full.
func TestRevocationSparesOnlyTheRevokedGrant(t *testing.T) {
	e := testEnv()
	open := func() chan struct{} { return make(chan struct{}) }
	c0, c1, c2 := &client{id: 0, e: e}, &client{id: 1, e: e}, &client{id: 2, e: e}
	e.granted(c0, &belief{name: "L", token: 10, done: open()})

	done := e.revoking(func(b *belief) bool { return b.name == "L" })
	// The revocation applies: it ends 10 and grants 20 in the same entry.
	e.applied.record(testhook.Applied{Group: "", Index: 20 >> 0, Events: []fsm.Event{
		{Kind: fsm.EventFreed, Reason: fsm.ReasonRevoked, Name: "L", Token: 10},
		{Kind: fsm.EventGranted, Name: "L", Token: 20, Session: 2, Seq: 1},
	}})
	successor := e.granted(c1, &belief{name: "L", token: 20, done: open()})
	require.True(t, successor.revoked, "granted while the revocation was in flight")
	done()
	_, _, _, v := e.h.snapshot()
	require.Empty(t, v, "the revoked holder may learn late")

	// Granted again while the successor still believes it holds: a
	// violation, although the revocation's mark covered the successor.
	e.granted(c2, &belief{name: "L", token: 30, done: open()})
	_, _, _, v = e.h.snapshot()
	require.Len(t, v, 1)
	require.Contains(t, v[0], "token 20")
	require.Len(t, e.h.suspectsSnapshot(), 1)
}

// A holder whose replica lags tells its client of a grant after an
// operator's revocation of it already applied and returned (clock-jump,
// 6 December): the revocation's mark is gone by then, but the log shows
// the grant ended, so the next grant before the holder learns is no
// violation. A grant the log shows no operator ended is still checked.
func TestRevokedBeforeItsHolderHeardOfIt(t *testing.T) {
	e := testEnv()
	open := func() chan struct{} { return make(chan struct{}) }
	c0, c1, c2 := &client{id: 0, e: e}, &client{id: 1, e: e}, &client{id: 2, e: e}
	done := e.revoking(func(b *belief) bool { return b.name == "L" })
	e.applied.record(testhook.Applied{Group: "", Index: 20, Events: []fsm.Event{
		{Kind: fsm.EventFreed, Reason: fsm.ReasonRevoked, Name: "L", Token: 10}}})
	done() // the operator's call returned
	late := e.granted(c0, &belief{name: "L", token: 10, done: open()})
	require.True(t, late.revoked, "the log shows an operator ended it")
	e.granted(c1, &belief{name: "L", token: 30, done: open()})
	_, _, _, v := e.h.snapshot()
	require.Empty(t, v, "the revoked holder may learn late")

	e.granted(c2, &belief{name: "L", token: 40, done: open()})
	_, _, _, v = e.h.snapshot()
	require.Len(t, v, 1, "token 30 was not revoked")
	require.Contains(t, v[0], "token 30")
}

// resolve tells each call that ended in an error from the applied log:
// granted (with its token, returning when first applied), released or
// not, or left out when it never took effect.
func TestResolveUnknownOutcomes(t *testing.T) {
	e := testEnv()
	at := int64(0)
	e.applied.now = func() int64 { at += 10; return at }
	req := func(seq uint64) reqRef { return reqRef{Group: "a", Part: 7, Seq: seq} }
	e.applied.record(testhook.Applied{Group: "a", Index: 5,
		Cmds:   []fsm.Command{{Kind: fsm.KindAcquire, Session: 7, Seq: 1, Name: "L@a"}},
		Events: []fsm.Event{{Kind: fsm.EventQueued, Session: 7, Seq: 1, Name: "L@a"}}})
	e.applied.record(testhook.Applied{Group: "a", Index: 6, // queued, granted later
		Cmds:   []fsm.Command{{Kind: fsm.KindRelease, Session: 3, Seq: 9, Name: "L@a", Token: 4 << 16}},
		Events: []fsm.Event{{Kind: fsm.EventFreed, Reason: fsm.ReasonReleased, Token: 4 << 16, Name: "L@a"}, {Kind: fsm.EventGranted, Session: 7, Seq: 1, Token: 6 << 16, Name: "L@a"}}})
	e.applied.record(testhook.Applied{Group: "a", Index: 7, // applied, not granted
		Cmds: []fsm.Command{{Kind: fsm.KindAcquire, Session: 7, Seq: 2, Name: "L@a"}}})
	e.applied.record(testhook.Applied{Group: "a", Index: 6}) // a replay changes nothing
	e.applied.record(testhook.Applied{Group: "a", Index: 8,
		Cmds: []fsm.Command{{Kind: fsm.KindRelease, Session: 7, Seq: 3, Name: "L@a", Token: 6 << 16},
			{Kind: fsm.KindRelease, Session: 7, Seq: 4, Name: "L@a", Token: 1 << 16}},
		Events: []fsm.Event{{Kind: fsm.EventFreed, Reason: fsm.ReasonReleased, Token: 6 << 16, Name: "L@a"}}})

	unknown := func(kind OpKind, seq, token uint64) Op {
		op := Op{Kind: kind, Lock: "L@a", Token: token, Outcome: Unknown, Call: 1, Return: never}
		if seq != 0 {
			op.Req = req(seq)
		}
		return op
	}
	got := resolve(e.applied, []Op{
		unknown(OpAcquire, 1, 0),
		unknown(OpAcquire, 2, 0),      // applied, never granted: left out
		unknown(OpTryAcquire, 0, 0),   // made no request: left out
		unknown(OpAcquire, 99, 0),     // never applied: left out
		unknown(OpRelease, 3, 6<<16),  // took effect
		unknown(OpRelease, 4, 1<<16),  // applied, found another grant
		unknown(OpRevoke, 0, 0),       // the log cannot tell: stays open
		unknown(OpKept, 0, 0),         // changes nothing: left out
		grant(0, 1, 10<<16, 100, 110), // known outcomes stay as they are
	})
	require.Len(t, got, 5)
	require.Equal(t, Op{Kind: OpAcquire, Lock: "L@a", Token: 6 << 16, Outcome: Granted, Call: 1, Return: 20, Req: req(1), Resolved: true}, got[0])
	require.Equal(t, OK, got[1].Outcome)
	require.Equal(t, int64(50), got[1].Return) // the replay of 6 took a tick, not an entry
	require.Equal(t, NotHeld, got[2].Outcome)
	require.Equal(t, Unknown, got[3].Outcome)
	require.Equal(t, Granted, got[4].Outcome)

	// A resolved grant is not believed by its caller: it always gets a Lose.
	require.Len(t, loses(e, got[:1], 500), 1)

	require.True(t, strings.Contains(e.applied.around("a", "L@a", 6<<16), "release"))
}
