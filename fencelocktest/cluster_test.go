package fencelocktest_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/transport"
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

// WithHandler's handler stands in front of every replica's endpoint, and
// sees each call reach the replica's API (the route its mux took); API is
// the replica's Server while it runs.
func TestWithHandlerFrontsEveryReplicasAPI(t *testing.T) {
	ctx := testCtx(t)
	readyz := make(chan string, 3) // the host each /readyz call was made to, once it reached the API
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithHTTP(), fencelocktest.WithHandler(func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			if r.Pattern == "GET /readyz" {
				readyz <- r.Host
			}
		})
	}))
	c.Leader(ctx)
	for id := uint64(1); id <= 3; id++ {
		require.NotNil(t, c.API(id))
		resp, err := http.Get(c.URL(id) + "/readyz")
		require.NoError(t, err)
		resp.Body.Close()
		select {
		case host := <-readyz:
			require.Equal(t, c.URL(id), "http://"+host)
		case <-ctx.Done():
			t.Fatalf("replica %d's call never reached its API through the handler", id)
		}
	}
	c.Stop(3)
	require.Nil(t, c.API(3), "a stopped replica has no API")
}

// A cluster made WithRestore starts from the backup: every replica holds
// the backup's lock with its token, and grants above it. Each replica's
// Dir is where it keeps that state, the same across a restart.
func TestWithRestoreStartsFromTheBackup(t *testing.T) {
	ctx := testCtx(t)
	src := fencelocktest.NewCluster(t, 3)
	src.Leader(ctx)
	s, err := src.Node(1).NewSession(ctx, fencelock.WithTTL(time.Minute))
	require.NoError(t, err)
	held, err := s.Acquire(ctx, "x")
	require.NoError(t, err)
	var backup bytes.Buffer
	require.NoError(t, src.Node(2).Snapshot(ctx, &backup))

	dst := fencelocktest.NewCluster(t, 3, fencelocktest.WithRestore(backup.Bytes()))
	dst.Leader(ctx)
	for id := uint64(1); id <= 3; id++ {
		info, err := dst.Node(id).Inspect(ctx, "x")
		require.NoError(t, err)
		require.True(t, info.Held, "replica %d: the backup's lock is not held", id)
		require.Equal(t, held.Token(), info.Token, "replica %d", id)
	}

	dir := dst.Dir(2)
	dst.Stop(2)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "the stopped replica's Dir is empty")
	require.Equal(t, dir, dst.Dir(2))
	s2, err := dst.Restart(2).NewSession(ctx)
	require.NoError(t, err)
	l, err := s2.TryAcquire(ctx, "y")
	require.NoError(t, err)
	require.Greater(t, l.Token(), held.Token(), "the restored group grants above the backup's tokens")
}

// A cluster made WithNetwork runs on the test's network, broken before the
// replicas started: replica 3, isolated from the start, hears nobody while
// the other two elect a leader through it.
func TestWithNetworkStartsOnTheTestsNetwork(t *testing.T) {
	net := transport.NewNetwork(1)
	net.Isolate(net.Addr(3))
	c := fencelocktest.NewCluster(t, 3, fencelocktest.WithNetwork(net))
	require.Same(t, net, c.Network())
	require.Eventually(t, func() bool {
		l := c.Node(1).Status().LeaderID
		return l != 0 && l == c.Node(2).Status().LeaderID
	}, 30*time.Second, 10*time.Millisecond, "replicas 1 and 2 elect no leader")
	require.Positive(t, net.Stats(c.Addr(1)).Messages, "the replicas' messages do not go through the test's network")
	require.Zero(t, net.Stats(c.Addr(3)).Messages, "replica 3, isolated before it started, heard from a peer")
	require.Zero(t, c.Node(3).Status().LeaderID)
}

// FreePort never names a port twice in a process, though each port it
// names is free again once it returns: replicas started from its picks
// never collide (CI once started two on one HTTP port, and the second
// failed with "address already in use"). 2,000 picks out of 22,000 ports
// would repeat one with near certainty without that memory; and a port
// handed out is not taken by ListenBelowEphemeral either.
func TestFreePortNeverNamesAPortTwice(t *testing.T) {
	seen := map[string]bool{}
	for range 2000 {
		addr := fencelocktest.FreePort(t)
		require.False(t, seen[addr], "FreePort named %s twice", addr)
		seen[addr] = true
	}
	for range 200 {
		l := fencelocktest.ListenBelowEphemeral(t)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		require.False(t, seen[addr], "ListenBelowEphemeral took %s, which FreePort handed out", addr)
	}
}
