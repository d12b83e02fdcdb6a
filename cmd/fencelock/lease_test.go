package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/httpapi"
)

// A heartbeat that could not renew a named group where the session holds
// the lock (503, naming the group) is an unanswered heartbeat: it extends
// nothing, and the command is stopped by the deadline as after any failed
// heartbeat; it does not end the session. An answer's lease_ms is what it
// promises: one of 0 extends nothing.
func TestHeartbeatNotRenewedInAGroup(t *testing.T) {
	now := bootNow()
	h := &holder{lease: 900 * time.Millisecond, lost: make(chan struct{})}
	h.deadline = now.Add(h.lease)
	before := h.deadline

	notRenewed := &apiError{status: 503, body: httpapi.Error{Code: httpapi.CodeUnavailable,
		Message: `fencelock: group unavailable: keep-alive did not renew the session in group "b" (…)`}}
	h.answer(beat{sent: now.Add(500 * time.Millisecond), err: fmt.Errorf("heartbeat: %w", notRenewed)})
	require.Equal(t, before, h.deadline, "a 503 extends nothing")
	require.Error(t, h.failing)
	require.Contains(t, h.failing.Error(), `group "b"`)
	require.NoError(t, h.reason(), "the session is not over: the deadline decides")

	h.answer(beat{sent: now.Add(600 * time.Millisecond), r: httpapi.SessionResponse{LeaseMS: 0}})
	require.Equal(t, before, h.deadline, "lease_ms 0 promises nothing")
	require.NoError(t, h.failing)

	h.answer(beat{sent: now.Add(700 * time.Millisecond), r: httpapi.SessionResponse{LeaseMS: 900}})
	require.Equal(t, now.Add(1600*time.Millisecond), h.deadline)
}
