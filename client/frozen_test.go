package client

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/fencelocktest"
)

// Three serve processes with --http-peers, as the README's walkthrough
// starts them; the replica a Go client's session lives on is frozen
// (SIGSTOP): it keeps its sockets and answers nothing. The session and its
// lock live on through the two others, which have quorum, for more than a
// full TTL while it is frozen, with the same fencing token, and after it
// resumes. Before, the client's heartbeats asked the frozen owner first and
// the replica it forwarded to waited for the owner without end: the lock
// was lost 6s into its 10s TTL.
func TestSessionOutlivesAFrozenOwner(t *testing.T) {
	p := fencelocktest.StartServe(t)
	ctx := testCtx(t)
	c := newClient(t, p.URLs[1], p.URLs[2], p.URLs[3])
	const ttl = 10 * time.Second
	s, l := hold(t, ctx, c, ttl, "jobs/frozen")
	info, err := c.Inspect(ctx, "jobs/frozen")
	require.NoError(t, err)
	require.Len(t, info.Holders, 1)
	owner := info.Holders[0].Owner
	require.NotZero(t, owner)

	// What the frozen owner costs: the heartbeats that failed, and how
	// near the lease came to its end.
	var mu sync.Mutex
	failed, least := 0, ttl
	s.OnHeartbeat(func(err error, left time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed++
		}
		least = min(least, left)
	})
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		t.Logf("while frozen: %d heartbeats failed; the least lease left after an answer: %v of %v", failed, least, s.Lease())
	}()
	p.Freeze(owner)
	defer p.Thaw(owner)
	frozen := time.Now()
	select {
	case <-l.Done():
		t.Fatalf("the lock was lost %v after its session's replica froze, two healthy replicas left: %v",
			time.Since(frozen).Round(100*time.Millisecond), l.Err())
	case <-time.After(ttl + ttl/5):
	}
	require.NoError(t, s.Err())
	info, err = c.Inspect(ctx, "jobs/frozen")
	require.NoError(t, err)
	require.Equal(t, l.Token(), info.Token, "the lock changed hands: %+v", info)
	require.Len(t, info.Holders, 1)
	require.NotEqual(t, owner, info.Holders[0].Owner, "the session still lives on the frozen replica")

	s.OnHeartbeat(nil)
	p.Thaw(owner)
	require.NoError(t, s.KeepAlive(ctx))
	require.NoError(t, l.Err())
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.Close(ctx))
}
