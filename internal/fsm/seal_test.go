package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// sealedGroup is a group at gate 11 whose every way of passing a lock on
// has a request queued behind it when the seal applies: lock "rel" (to be
// released), "can" (its grant cancelled), "exp" (its holder's session
// expired), "rev" (revoked), "del" (under a lock-delay, to be undelayed),
// "max" (a grant with a maximum hold, to run out), "end" (its holder's
// session ended by an operator), "cls" (its holder's session closed) and
// election "e" (its leader to resign). Session w waits for all of them.
type sealedGroup struct {
	h                *harness
	mark             uint64 // the leader mark
	a, c, d, e, f, w uint64 // sessions: a holds most; c, d, e, f one each; w waits
	cKeepAlive       uint64
	tokens           map[string]uint64
	waits            map[string]uint64 // w's request number for each lock ("e": its candidacy)
}

func newSealedGroup(t *testing.T) *sealedGroup {
	h := newHarness(t)
	g := &sealedGroup{h: h, tokens: map[string]uint64{}, waits: map[string]uint64{}}
	h.one(Command{Kind: KindLeaderStart, Owner: 1, Term: 1, Nonce: 7})
	g.mark = h.idx
	r, _ := h.one(Command{Kind: KindGate, Gate: Gate{Codec: 11, Snapshot: 9}})
	require.Equal(t, OK, r.Status)
	g.a = h.open(1)
	g.c = h.open(3)
	g.cKeepAlive = h.idx
	r, _ = h.one(Command{Kind: KindOpenSession, Nonce: 4, TTL: 1e9, Owner: 1, Delay: 5e9})
	g.d = r.Value
	g.e, g.f, g.w = h.open(5), h.open(6), h.open(7)
	grant := func(s, seq uint64, name string, maxHold uint64) {
		c := acqCmd(s, seq, name, false)
		c.MaxHold = maxHold
		r, _ := h.one(c)
		require.Equal(t, Granted, r.Status, name)
		g.tokens[name] = r.Value
	}
	grant(g.a, 1, "rel", 0)
	grant(g.a, 2, "can", 0)
	grant(g.c, 1, "exp", 0)
	grant(g.a, 3, "rev", 0)
	grant(g.d, 1, "del", 0)
	grant(g.a, 4, "max", 1e9)
	grant(g.e, 1, "end", 0)
	grant(g.f, 1, "cls", 0)
	r, _ = h.one(Command{Kind: KindCampaign, Session: g.a, Seq: 5, Name: "e", Value: "a"})
	require.Equal(t, Granted, r.Status)
	g.tokens["e"] = r.Value
	for i, name := range []string{"rel", "can", "exp", "rev", "del", "max", "end", "cls"} {
		seq := uint64(i + 1)
		r, _ := h.one(acqCmd(g.w, seq, name, true))
		require.Equal(t, Queued, r.Status, name)
		g.waits[name] = seq
	}
	r, _ = h.one(Command{Kind: KindCampaign, Session: g.w, Seq: 9, Name: "e", Value: "w", Wait: true})
	require.Equal(t, Queued, r.Status)
	g.waits["e"] = 9
	// An operator ends d: its lock is delayed, and w waits on behind it.
	r, evs := h.one(Command{Kind: KindEndSession, Session: g.d})
	require.Equal(t, OK, r.Status)
	require.True(t, h.st.Lock("del").Delayed)
	requireNoGrant(t, evs)
	return g
}

func requireNoGrant(t *testing.T, evs []Event) {
	t.Helper()
	for _, e := range evs {
		require.NotContains(t, []EventKind{EventGranted, EventElected}, e.Kind, "granted in a sealed group: %+v", e)
	}
}

// A seal withdraws every queued request and candidacy, each reported
// dropped, and answers their retries Dropped.
func TestSealWithdrawsEveryWaiter(t *testing.T) {
	g := newSealedGroup(t)
	h := g.h
	rs, evs := h.apply(Command{Kind: KindSeal})
	require.Equal(t, Result{Status: OK, Value: 9}, rs[0])
	require.True(t, h.st.Sealed())
	var dropped []Event
	for _, e := range evs {
		require.Equal(t, EventDropped, e.Kind, "a seal only withdraws: %+v", e)
		dropped = append(dropped, e)
	}
	want := []Event{}
	for _, name := range []string{"can", "cls", "del", "end", "exp", "max", "rel", "rev"} {
		want = append(want, Event{Kind: EventDropped, Session: g.w, Seq: g.waits[name], Name: name})
	}
	want = append(want, Event{Kind: EventDropped, Session: g.w, Seq: g.waits["e"], Name: "e", Election: true})
	require.Equal(t, want, dropped, "locks then elections, each in name order")
	for name := range g.waits {
		if name == "e" {
			require.Zero(t, h.st.Election(name).Candidates)
			continue
		}
		require.Zero(t, h.st.Lock(name).Waiters, name)
	}
	// Retries of the withdrawn requests: Dropped, not a queue place.
	r, _ := h.one(acqCmd(g.w, g.waits["rel"], "rel", true))
	require.Equal(t, Result{Status: Dropped}, r)
	r, _ = h.one(Command{Kind: KindCampaign, Session: g.w, Seq: g.waits["e"], Name: "e", Value: "w", Wait: true})
	require.Equal(t, Result{Status: Dropped}, r)
	// A second seal changes nothing.
	r, evs = h.one(Command{Kind: KindSeal})
	require.Equal(t, Result{Status: OK}, r)
	require.Empty(t, evs)
}

// From the seal on no new request is queued or granted, whether the lock
// is free or held, waiting or trying, exclusive, shared or a semaphore, and
// a snapshot keeps the seal.
func TestSealAnswersEveryRequestDropped(t *testing.T) {
	g := newSealedGroup(t)
	h := g.h
	h.one(Command{Kind: KindSeal})
	for _, c := range []Command{
		acqCmd(g.w, 20, "free", true),
		acqCmd(g.w, 21, "free", false),
		acqCmd(g.w, 22, "rel", true),
		{Kind: KindAcquireShared, Session: g.w, Seq: 23, Name: "shared", Wait: true},
		{Kind: KindAcquireShared, Session: g.w, Seq: 24, Name: "sem", Permits: 3, Wait: true},
		{Kind: KindCampaign, Session: g.w, Seq: 25, Name: "new", Value: "v", Wait: true},
		{Kind: KindCampaign, Session: g.w, Seq: 26, Name: "e", Value: "v"},
	} {
		r, evs := h.one(c)
		require.Equal(t, Result{Status: Dropped}, r, "%v %q", c.Kind, c.Name)
		require.Empty(t, evs)
		r, _ = h.one(c) // its retry
		require.Equal(t, Result{Status: Dropped}, r)
	}
	restored, err := DecodeSnapshot(saveBytes(t, h.st))
	require.NoError(t, err)
	require.True(t, restored.Sealed())
	require.Equal(t, saveBytes(t, h.st), saveBytes(t, restored))
	rs, evs := restored.Apply(h.idx+1, []Command{acqCmd(g.w, 30, "free", true)})
	require.Equal(t, Dropped, rs[0].Status, "a restored replica refuses as its group does")
	require.Empty(t, evs)
}

// After the seal every way a lock or a leadership passes on only frees:
// a release, a cancel of a grant, an expiry, a revoke, an undelay, a
// maximum hold running out, an operator's end and a close of a session, a
// resignation. The grants made before the seal stay until then.
func TestSealGrantsNothing(t *testing.T) {
	g := newSealedGroup(t)
	h := g.h
	h.one(Command{Kind: KindSeal})
	for name, tok := range g.tokens {
		if name == "del" {
			continue
		}
		held := h.st.Lock(name).Token
		if name == "e" {
			held = h.st.Election(name).Token
		}
		require.Equal(t, tok, held, "%s: a seal revokes nothing", name)
	}
	for _, step := range []struct {
		name string
		cmd  Command
		want Status
	}{
		{"rel", relCmd(g.a, 10, "rel", g.tokens["rel"]), OK},
		{"can", Command{Kind: KindCancel, Session: g.a, Target: 2, Name: "can"}, Cancelled},
		{"exp", Command{Kind: KindExpire, Session: g.c, Target: g.cKeepAlive, Mark: g.mark}, OK},
		{"rev", Command{Kind: KindRevoke, Name: "rev"}, OK},
		{"del", Command{Kind: KindUndelay, Name: "del", Token: g.tokens["del"], Mark: g.mark}, OK},
		{"max", Command{Kind: KindExpireGrant, Name: "max", Token: g.tokens["max"], Mark: g.mark}, OK},
		{"end", Command{Kind: KindEndSession, Session: g.e}, OK},
		{"cls", Command{Kind: KindCloseSession, Session: g.f}, OK},
		{"e", Command{Kind: KindResign, Session: g.a, Seq: 11, Name: "e", Token: g.tokens["e"]}, OK},
	} {
		r, evs := h.one(step.cmd)
		require.Equal(t, step.want, r.Status, step.name)
		requireNoGrant(t, evs)
		if step.name == "e" {
			require.False(t, h.st.Election("e").Led)
			continue
		}
		l := h.st.Lock(step.name)
		require.False(t, l.Held, step.name)
		require.False(t, l.Delayed, step.name)
	}
	require.Equal(t, g.tokens["e"]>>TokenShift, h.st.LastToken()>>TokenShift, "no token was drawn after the seal")
}

// A group whose gate is below 11 cannot seal: its snapshots could not keep
// the seal. Nothing is withdrawn.
func TestSealNeedsVersion11(t *testing.T) {
	h := newHarness(t)
	a, w := h.open(1), h.open(2)
	h.one(acqCmd(a, 1, "x", false))
	h.one(acqCmd(w, 1, "x", true))
	r, evs := h.one(Command{Kind: KindSeal})
	require.Equal(t, Invalid, r.Status)
	require.Empty(t, evs)
	require.False(t, h.st.Sealed())
	require.Equal(t, 1, h.st.Lock("x").Waiters)
	require.Equal(t, 11, MinCodec(KindSeal))
	_, err := AppendEntry(nil, Gate{Codec: 10, Snapshot: 8}, 0, []Command{{Kind: KindSeal}})
	require.Error(t, err, "a group writing version 10 cannot write a seal")
}
