package fencelock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A session with WithExternalKeepAlive lives while KeepAlive is called, and
// once the calls stop its locks pass on, after the holder gave it up.
func TestExternalKeepAlive(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	n := c.node(c.leader(ctx))
	const ttl = time.Second
	s, err := n.NewSession(ctx, WithTTL(ttl), WithExternalKeepAlive())
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "ext")
	require.NoError(t, err)

	// Heartbeats for three TTLs keep it alive: without them it would end
	// after TTL − margin.
	start := time.Now()
	var last time.Time
	for time.Since(start) < 3*ttl {
		last = time.Now()
		require.NoError(t, s.KeepAlive(ctx))
		select {
		case <-l.Done():
			t.Fatalf("lock lost while heartbeating: %v", l.Err())
		case <-time.After(ttl / 4):
		}
	}
	info, err := n.Inspect(ctx, "ext")
	require.NoError(t, err)
	require.Equal(t, s.ID(), info.SessionID)

	// The waiter is queued, and granted once the heartbeats stop.
	other, err := c.node(1 + c.leader(ctx)%3).NewSession(ctx)
	require.NoError(t, err)
	defer other.Close(ctx)
	queued := make(chan int, 1)
	l2, err := other.Acquire(ctx, "ext", WithQueuePosition(func(p int) { queued <- p }))
	holderStopped := closed(s.s.Testing().Done()) // the raw channel: Done() would check the deadline itself
	require.NoError(t, err)
	freed := time.Since(last)
	require.Equal(t, 1, <-queued, "it waited at the head of the queue")
	require.Greater(t, l2.Token(), l.Token())
	t.Logf("lock passed on %v after the last heartbeat (TTL %v)", freed, ttl)
	require.GreaterOrEqual(t, freed, ttl-s.SafetyMargin()-50*time.Millisecond)
	// It passed on because the heartbeats stopped: the holder had given
	// the session up by its own deadline when the waiter was granted.
	require.True(t, holderStopped, "the lock passed on while its holder still believed it held it")
	<-s.Done()
	require.ErrorIs(t, s.KeepAlive(ctx), ErrSessionExpired)
}
