package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
)

// A heartbeat that could not renew a named group where the session holds
// a lock (503, naming the group) is an unanswered heartbeat: it extends
// nothing, and the holder stops by the deadline as after any failed
// heartbeat; it does not end the session. An answer's lease_ms is what it
// promises: one of 0 extends nothing. (Moved here from the command's
// lease_test.go with fencelock lock's heartbeats.)
func TestHeartbeatNotRenewedInAGroup(t *testing.T) {
	n := now()
	s := &Session{ttl: 1500 * time.Millisecond, lease: 900 * time.Millisecond, done: make(chan struct{}),
		stop: make(chan struct{}), grants: map[*grant]struct{}{}}
	s.deadline = n.Add(s.lease)
	before := s.deadline

	notRenewed := &Error{Status: 503, Code: "unavailable",
		Message: `fencelock: group unavailable: keep-alive did not renew the session in group "b" (…)`}
	s.answer(beat{sent: n.Add(500 * time.Millisecond), err: fmt.Errorf("heartbeat: %w", notRenewed)})
	require.Equal(t, before, s.deadline, "a 503 extends nothing")
	require.NoError(t, s.err, "the session is not over: the deadline decides")

	s.answer(beat{sent: n.Add(600 * time.Millisecond), a: sessionAnswer{LeaseMS: 0}})
	require.Equal(t, before, s.deadline, "lease_ms 0 promises nothing")

	s.answer(beat{sent: n.Add(700 * time.Millisecond), a: sessionAnswer{LeaseMS: 900}})
	require.Equal(t, n.Add(1600*time.Millisecond), s.deadline)
	require.NoError(t, s.err)
}

// A grant's lease_ms brings the deadline earlier, never later. A heartbeat
// sent before that grant's answer arrived (its round may have left the
// grant's part out: it held nothing yet) moves the deadline no later than
// the grant's bound; the first one sent after lifts it. A lease that has
// run out ends the session, saying it was a grant's.
func TestGrantLeaseBoundsTheDeadline(t *testing.T) {
	n := now()
	s := &Session{c: &Client{sessions: map[*Session]struct{}{}}, ttl: 10 * time.Second, lease: 6 * time.Second, done: make(chan struct{}), stop: make(chan struct{}),
		lowered: make(chan struct{}, 1), grants: map[*grant]struct{}{}}
	s.deadline = n.Add(6 * time.Second)
	ms := time.Millisecond

	s.grantLease(n.Add(100*ms), n.Add(150*ms), time.Second)
	require.Equal(t, n.Add(1100*ms), s.deadline, "lowered to the grant's send + its lease")
	select {
	case <-s.lowered:
	default:
		t.Fatal("the heartbeat loop was not woken")
	}
	s.grantLease(n.Add(200*ms), n.Add(250*ms), 5*time.Second)
	require.Equal(t, n.Add(1100*ms), s.deadline, "a longer grant lease raises nothing")
	require.Empty(t, s.lowered, "nor wakes the loop")

	s.answer(beat{sent: n.Add(240 * ms), a: sessionAnswer{LeaseMS: 6000}})
	require.Equal(t, n.Add(1100*ms), s.deadline, "a heartbeat sent before the last grant's answer arrived stays within the grant's bound")
	s.answer(beat{sent: n.Add(300 * ms), a: sessionAnswer{LeaseMS: 6000}})
	require.Equal(t, n.Add(6300*ms), s.deadline, "one sent after it renewed the grant's group: the bound is lifted")
	s.answer(beat{sent: n.Add(280 * ms), a: sessionAnswer{LeaseMS: 6000}})
	require.Equal(t, n.Add(6300*ms), s.deadline, "and stays lifted")
	require.NoError(t, s.err)

	s.grantLease(n.Add(-time.Second), n, 0) // its part had nothing left
	s.check()
	require.ErrorIs(t, s.err, fencelock.ErrSessionExpired)
	require.Contains(t, s.err.Error(), "a grant's lease ran out")
}

// lease_ms is read only when there: an answer without it (a server before
// it) gives none, and 0 is a lease of 0, not none.
func TestGrantAnswerLease(t *testing.T) {
	var a acquireAnswer
	require.NoError(t, decodeAnswer([]byte(`{"granted":true,"fencing_token":"7","fence":"00000000000000ab:7"}`), &a))
	require.Nil(t, a.LeaseMS)
	require.NoError(t, decodeAnswer([]byte(`{"granted":true,"fencing_token":"7","fence":"00000000000000ab:7","lease_ms":0}`), &a))
	require.NotNil(t, a.LeaseMS)
	require.Zero(t, *a.LeaseMS)
	var c campaignAnswer
	require.NoError(t, decodeAnswer([]byte(`{"elected":true,"token":"9","fence":"00000000000000ab:9","lease_ms":4200}`), &c))
	require.Equal(t, int64(4200), *c.LeaseMS)
}
