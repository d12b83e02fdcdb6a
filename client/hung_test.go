package client

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Two of three endpoints take every call and never answer (hung
// replicas), the first of them the one in use: each heartbeat still asks
// the third within its budget (half the lease, a third of it for each
// endpoint), so the session and its lock live on for leases, and the hung
// ones are asked last from then on.
func TestHeartbeatAsksEveryEndpointWithinItsBudget(t *testing.T) {
	g := newGroup(t)
	ctx := testCtx(t)
	a, b, good := newFront(t, g.API(1)), newFront(t, g.API(1)), newFront(t, g.API(1))
	c := newClient(t, a.url, b.url, good.url)
	s, l := hold(t, ctx, c, 5*time.Second, "jobs/hung") // lease 3s, heartbeat every 1s, budget 1.5s
	c.answered(0)
	a.mode.Store("hang")
	b.mode.Store("hang")
	before := good.calls.Load()

	lease := s.Lease()
	select {
	case <-s.Done():
		t.Fatalf("the session ended with an endpoint left that answers: %v", s.Err())
	case <-time.After(2 * lease):
	}
	require.NoError(t, l.Err())
	require.Greater(t, good.calls.Load(), before+2, "heartbeats went to the endpoint that answers")
	// Asked once each, then last: the heartbeats since went to the third
	// endpoint first.
	require.Equal(t, []int{2, 0, 1}, c.order())
	require.NoError(t, l.Release(ctx))
}

// An endpoint whose try ran out of time goes to the back of the order
// until it answers again: a later call whose first endpoint fails asks the
// one that answers next, not the hung one that comes first round the list.
func TestTimedOutEndpointTriedLast(t *testing.T) {
	g := newGroup(t)
	ctx := testCtx(t)
	hung, spare, inUse := newFront(t, g.API(1)), newFront(t, g.API(1)), newFront(t, g.API(1))
	c := newClient(t, hung.url, spare.url, inUse.url) // AttemptTimeout 1s
	hung.mode.Store("hang")
	spare.mode.Store("503")
	c.answered(0)
	before := hung.calls.Load()
	_, err := c.Inspect(ctx, "jobs/any")
	require.NoError(t, err)
	require.Equal(t, before+1, hung.calls.Load())

	// The endpoint in use fails: round the list the hung one comes next,
	// but it is asked only after the one that answers.
	inUse.mode.Store("503")
	spare.mode.Store("ok")
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond) // less than AttemptTimeout
	defer cancel()
	_, err = c.Inspect(cctx, "jobs/any")
	require.NoError(t, err, "the call waited for the hung endpoint")
	require.Equal(t, before+1, hung.calls.Load(), "the hung endpoint was asked again before the others")
	require.Equal(t, []int{1, 2, 0}, c.order(), "the endpoint that answered first, the hung one last")
}

// A heartbeat that went unanswered for its whole budget (half the lease)
// held back the next tick; the one it held back is sent as soon as it
// fails, not a period later, which is when the lease ends: the session
// lives on through its one endpoint, which answers again.
func TestFailedHeartbeatSendsTheHeldBackOneAtOnce(t *testing.T) {
	g := newGroup(t)
	ctx := testCtx(t)
	f := newFront(t, g.API(1))
	c := newClient(t, f.url)
	s, l := hold(t, ctx, c, 3*time.Second, "jobs/held-back") // lease 1.8s, heartbeat every 600ms, budget 900ms
	f.mode.Store("hang once")
	select {
	case <-s.Done():
		t.Fatalf("the session ended after one heartbeat went unanswered: %v", s.Err())
	case <-time.After(2 * s.Lease()):
	}
	require.Equal(t, "ok", f.mode.Load(), "no heartbeat hung")
	require.NoError(t, l.Release(ctx))
}

// An endpoint that did not answer within its share while the others
// failed fast (refused) is asked once more with the time they left: a
// slow replica is not a hung one, and the call succeeds within its
// deadline.
func TestSlowEndpointAskedAgainWithTheTimeLeft(t *testing.T) {
	g := newGroup(t)
	ctx := testCtx(t)
	slow, dead := newFront(t, g.API(1)), newFront(t, g.API(1))
	c := newClient(t, slow.url, dead.url) // AttemptTimeout 1s
	dead.stop()
	slow.mode.Store("hang once")
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second) // a share of 1s each
	defer cancel()
	before := slow.calls.Load()
	_, err := c.Inspect(cctx, "jobs/any")
	require.NoError(t, err, "the endpoint that timed out was not asked again with the time left")
	require.Equal(t, before+2, slow.calls.Load())
}
