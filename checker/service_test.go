package checker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// runService runs the service scenario (service.go) and fails t on every
// violation, timed-out check, or a run that did not do what it says.
func runService(t *testing.T, seed uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r, err := RunService(ctx, seed, t.TempDir())
	if err != nil {
		for _, note := range r.Notes {
			t.Logf("service: %s", note)
		}
		for _, v := range r.Violations {
			t.Errorf("service: %s", v)
		}
		t.Fatalf("service: %v", err)
	}
	fmt.Println(r.Line())
	for _, note := range r.Notes {
		t.Logf("service: %s", note)
	}
	t.Logf("service: faults %v; %d grants (%d to the split client), %d calls held by freezes, %d of the split client's answered after one, %d late writes refused; %d grants ended by their lease before the next grant, the least slack %v",
		r.Faults, r.Grants, r.SplitGrants, r.Held, r.HeldAnswers, r.Refused, r.Lapsed, r.MinSlack)
	for _, v := range r.Violations {
		t.Errorf("service: %s", v)
	}
	for _, to := range r.TimedOut {
		t.Errorf("service: %s", to)
	}
	for _, f := range r.Skipped {
		t.Logf("service: fault %s skipped: the workload offered it no moment (see the notes)", f)
	}
	if len(r.Faults)+len(r.Skipped) != len(svcFaults) || len(r.Faults) < len(svcFaults)-1 {
		t.Errorf("service: %d of %d faults applied, %v skipped", len(r.Faults), len(svcFaults), r.Skipped)
	}
	if r.SplitGrants == 0 || r.HeldAnswers == 0 {
		t.Errorf("service: %d grants to the split client, %d of its calls answered after a freeze held them: the workload did not run", r.SplitGrants, r.HeldAnswers)
	}
}

// newCheckRun is a service run with no cluster: enough for its checks.
func newCheckRun() *svcRun {
	return &svcRun{h: newHistory(), beliefs: map[string][]*svcBelief{}, applied: map[string][]svcGrant{},
		freed: map[grantKey]time.Time{}, seen: map[grantKey]bool{}}
}

// The service scenario's own checks fail on what they name: a grant its
// holder stopped after the group granted the lock on, a second token
// answered for a grant the session holds, a grant answered after the
// group applied its end; and they pass a holder that stopped in time,
// measuring its slack.
func TestServiceChecks(t *testing.T) {
	t0 := time.Now()
	r := newCheckRun()
	r.applied["L"] = []svcGrant{{token: 10, at: t0}, {token: 20, at: t0.Add(time.Second)}}
	r.hold(&svcBelief{client: 1, session: 1, name: "L", token: 10})
	r.stop(r.beliefs["L"][0], t0.Add(1500*time.Millisecond), true)
	v, lapsed, _ := r.overlaps()
	require.Len(t, v, 1)
	require.Contains(t, v[0], "holder open past the group's grant: client 1 (session 1, split=false) held \"L\" with token 10")
	require.Equal(t, 1, lapsed)

	r = newCheckRun()
	r.applied["L"] = []svcGrant{{token: 10, at: t0}, {token: 20, at: t0.Add(time.Second)}}
	r.hold(&svcBelief{client: 1, session: 1, name: "L", token: 10})
	r.stop(r.beliefs["L"][0], t0.Add(700*time.Millisecond), true)
	v, lapsed, slack := r.overlaps()
	require.Empty(t, v)
	require.Equal(t, 1, lapsed)
	require.Equal(t, 300*time.Millisecond, slack)

	// A grant whose lease ended while its holder worked, released after:
	// the group's next grant follows the release, so its slack is no
	// margin the lease kept and is not counted; an overlap still is.
	r = newCheckRun()
	r.applied["L"] = []svcGrant{{token: 10, at: t0}, {token: 20, at: t0.Add(time.Second)}, {token: 30, at: t0.Add(3 * time.Second)}}
	r.hold(&svcBelief{client: 1, session: 1, name: "L", token: 10})
	r.hold(&svcBelief{client: 2, session: 2, name: "L", token: 20})
	r.stop(r.beliefs["L"][0], t0.Add(975*time.Millisecond), true)
	r.releasedLapsed(r.beliefs["L"][0])
	r.stop(r.beliefs["L"][1], t0.Add(2*time.Second), true)
	v, lapsed, slack = r.overlaps()
	require.Empty(t, v)
	require.Equal(t, 1, lapsed)
	require.Equal(t, time.Second, slack)
	r.beliefs["L"][0].stopped = t0.Add(1100 * time.Millisecond) // its holder stopped after the next grant
	v, _, _ = r.overlaps()
	require.Len(t, v, 1, "a released lapsed grant is still checked for overlap")

	r = newCheckRun()
	s := newSplit(5, r, []string{"http://127.0.0.1:1", "http://127.0.0.1:2"}, rand.New(rand.NewPCG(1, 1)))
	s.sess = splitSession{id: 7}
	r.split = s
	answer := func(token uint64, began time.Time) *svcBelief {
		op := r.h.begin(Op{Client: 5, Kind: OpTryAcquire, Lock: svcLocks[0], Session: 7})
		return s.answer(splitAnswer{sess: s.sess, op: op, ep: "e", sent: time.Now(), outcome: Granted, token: token, lease: time.Minute, began: began})
	}
	b := answer(10, time.Now())
	require.NotNil(t, b)
	require.Empty(t, r.violations)
	require.Nil(t, answer(10, time.Now()), "a second answer naming the grant it holds is that grant")
	require.Empty(t, r.violations)
	answer(12, time.Now())
	require.Len(t, r.violations, 1)
	require.Contains(t, r.violations[0], "two tokens for one grant: session 7's acquire")
	r.freed[grantKey{groupOf(svcLocks[0]), 10}] = time.Now()
	answer(10, time.Now().Add(time.Millisecond))
	require.Contains(t, r.violations[1], "stale grant answered: session 7's acquire")
	s.tr.CloseIdleConnections()
}
