package fencelocktest_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/fsm"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func applied(n *fencelock.Node) uint64 { return n.Status().AppliedIndex }

// A frozen replica neither hears the group nor answers its HTTP callers,
// Heal included, until Thaw; then it answers what waited and catches up.
func TestFreezeHoldsRaftAndHandlersUntilThaw(t *testing.T) {
	ctx := testCtx(t)
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithHTTP())
	leader := c.Leader(ctx)
	frozen := leader%3 + 1
	c.Freeze(frozen)
	defer c.Thaw(frozen)

	// /healthz answers at once, without the group: only the freeze holds it.
	answered := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", c.URL(frozen)+"/healthz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	s, err := c.Node(leader).NewSession(ctx)
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "while-frozen")
	require.NoError(t, err, "the other two grant")
	// The grant's log index, proposed after the freeze: the frozen replica
	// may still apply what reached it before (the group's start, a leader's
	// timer), never this. A fresh group's token is index<<TokenShift.
	afterFreeze := l.Token() >> fsm.TokenShift

	// Heal ends the network's faults, not the freeze: the leader's messages
	// to the frozen replica go on being lost.
	c.Partition([]uint64{leader, frozen%3 + 1}, []uint64{frozen})
	c.Heal()
	addr := c.Addr(frozen)
	before := c.Network().Stats(addr)
	require.Eventually(t, func() bool {
		st := c.Network().Stats(addr)
		return st.Messages+st.MessagesDropped >= before.Messages+before.MessagesDropped+5
	}, 30*time.Second, 10*time.Millisecond, "the leader sent the frozen replica nothing")
	require.Equal(t, before.Messages, c.Network().Stats(addr).Messages, "a frozen replica received raft messages after Heal")
	require.Less(t, applied(c.Node(frozen)), afterFreeze, "a frozen replica applied an entry proposed after it froze")
	select {
	case err := <-answered:
		t.Fatalf("a frozen replica's API answered (err %v)", err)
	default:
	}

	c.Thaw(frozen)
	require.NoError(t, <-answered, "the held call goes on after Thaw")
	require.Eventually(t, func() bool { return applied(c.Node(frozen)) >= applied(c.Node(leader)) },
		30*time.Second, 10*time.Millisecond, "the thawed replica catches up")
}

// A replica that is down drops its HTTP connections, and serves the API
// again at the same URL once restarted.
func TestStoppedReplicaDropsItsHTTPUntilRestart(t *testing.T) {
	ctx := testCtx(t)
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithHTTP())
	c.Leader(ctx)
	c.Stop(2)
	require.Nil(t, c.Node(2))
	_, err := http.Get(c.URL(2) + "/readyz")
	require.Error(t, err, "a stopped replica's URL answered")

	c.Restart(2)
	require.Eventually(t, func() bool {
		resp, err := http.Get(c.URL(2) + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "the restarted replica is never ready")
}
