package integration_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// callTiming is one acquire or release of the worker: when it started and
// how long it took.
type callTiming struct {
	start time.Time
	took  time.Duration
}

// worker acquires and releases lock name on s until stop closes, recording
// every call; it reports the first error.
func worker(ctx context.Context, s *fencelock.Session, name string, stop <-chan struct{}, calls chan<- callTiming) error {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		start := time.Now()
		l, err := s.Acquire(ctx, name)
		if err != nil {
			return err
		}
		calls <- callTiming{start, time.Since(start)}
		start = time.Now()
		if err := l.Release(ctx); err != nil {
			return err
		}
		calls <- callTiming{start, time.Since(start)}
	}
}

// The raft leader's replica closes while a worker on another replica
// acquires and releases: Close hands the leadership over first, so no call
// of the worker waits an election timeout (at least 150ms with the
// defaults) for a new leader. Each call stays within 50ms of the slowest
// call the worker made alone (a generous bound on a loaded machine; W11
// measures the figure), and another replica leads when Close returns.
func TestCloseHandsLeadershipOver(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	leader := c.Leader(ctx)
	term := c.Node(leader).Status().Term
	w := leader%3 + 1
	s := newSession(t, ctx, c.Node(w))

	// The worker's normal latency, measured alone in the same test.
	stop := make(chan struct{})
	calls := make(chan callTiming, 1<<16)
	done := make(chan error, 1)
	go func() { done <- worker(ctx, s, "handover", stop, calls) }()
	var alone []time.Duration
	for len(alone) < 200 {
		alone = append(alone, (<-calls).took)
	}
	normal := slices.Max(alone)

	closeStart := time.Now()
	require.NoError(t, c.Node(leader).Close())
	closed := time.Since(closeStart)
	// Another replica leads now: it took office before Close returned, and
	// its own report of it is at most an event delivery away; an election
	// after a crash could not start before an election timeout (150ms).
	var led uint64
	require.Eventually(t, func() bool {
		for id, n := range running(c) {
			if id != leader {
				if st := n.Status(); st.IsLeader && st.Term > term {
					led = id
					return true
				}
			}
		}
		return false
	}, 50*time.Millisecond, time.Millisecond, "no replica took the leadership over by the time Close returned")
	t.Logf("leader %d handed over to %d; Close took %v; the worker's slowest call alone %v", leader, led, closed, normal)

	// A few more calls after the close, then stop.
	var during []callTiming
	for after := 0; after < 100; {
		ct := <-calls
		if ct.start.Add(ct.took).After(closeStart) {
			during = append(during, ct)
		}
		if ct.start.After(closeStart) {
			after++
		}
	}
	close(stop)
	require.NoError(t, <-done)
	close(calls)
	for ct := range calls {
		during = append(during, ct)
	}
	var worst time.Duration
	for _, ct := range during {
		worst = max(worst, ct.took)
	}
	t.Logf("%d calls ended after the close began; the slowest took %v", len(during), worst)
	require.LessOrEqual(t, worst, normal+50*time.Millisecond,
		"a call waited more than 50ms beyond the worker's slowest call alone (%v)", normal)
	c.Stop(leader) // Close was called: the cluster forgets the node
}

// Close of a leader whose group has lost its quorum waits a bounded time
// for a handover that cannot happen, then stops; a second Close is a no-op.
func TestCloseWithoutQuorumIsBounded(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	leader := c.Leader(ctx)
	for id := range c.Members() {
		if id != leader {
			c.Stop(id)
		}
	}
	n := c.Node(leader)
	start := time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { require.NoError(t, n.Close()) })
	}
	wg.Wait()
	// 3 election timeouts and 2 RTTs (470ms) is the bound; the rest is slack
	// for a loaded machine.
	require.Less(t, time.Since(start), 5*time.Second)
	require.NoError(t, n.Close())
	_, err := n.NewSession(ctx)
	require.ErrorIs(t, err, fencelock.ErrClosed)
	c.Stop(leader)
}
