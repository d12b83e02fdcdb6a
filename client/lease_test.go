package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
