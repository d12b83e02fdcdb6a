package proposer

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lni/dragonboat/v4"
	"github.com/lni/dragonboat/v4/config"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/fencelock/fencelock/internal/dblog"
	"github.com/fencelock/fencelock/internal/fsm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// entries counts the raft entries the state machine applies.
type entries struct{ n atomic.Int64 }

func (e *entries) Applied(uint64, []fsm.Command, []fsm.Event) { e.n.Add(1) }
func (e *entries) Restored(*fsm.State)                        {}

// oneReplica starts a one-replica group on loopback and returns a proposer
// over it.
func oneReplica(t *testing.T, cfg Config) (*Proposer, *entries) {
	t.Helper()
	dblog.Use(nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	nh, err := dragonboat.NewNodeHost(config.NodeHostConfig{
		NodeHostDir: t.TempDir(), RTTMillisecond: 5, RaftAddress: addr,
		Expert: config.ExpertConfig{LogDB: config.GetTinyMemLogDBConfig()},
	})
	require.NoError(t, err)
	seen := &entries{}
	require.NoError(t, nh.StartReplica(map[uint64]dragonboat.Target{1: addr}, false,
		fsm.NewStateMachine(seen), config.Config{ShardID: 1, ReplicaID: 1, ElectionRTT: 10, HeartbeatRTT: 1, WaitReady: true}))
	p := New(func(cmd []byte, timeout time.Duration) (*dragonboat.RequestState, error) {
		return nh.Propose(nh.GetNoOPSession(1), cmd, timeout)
	}, cfg)
	t.Cleanup(func() { p.Close(); nh.Close() })
	return p, seen
}

// propose retries until the replica has elected itself.
func propose(t *testing.T, p *Proposer, cmd fsm.Command) fsm.Result {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		r, err := p.Propose(ctx, cmd)
		if err == nil {
			return r
		}
		if !dragonboat.IsTempError(err) {
			require.NoError(t, err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no result: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func TestConcurrentCallsShareEntriesAndGetTheirOwnResults(t *testing.T) {
	p, seen := oneReplica(t, Config{Timeout: 5 * time.Second, MaxBatch: 64, InFlight: 1})
	propose(t, p, fsm.Command{Kind: fsm.KindOpenSession, Nonce: 1, TTL: 1}) // the group is up
	before := seen.n.Load()

	const calls = 200
	ids := make([]uint64, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = propose(t, p, fsm.Command{Kind: fsm.KindOpenSession, Nonce: uint64(i + 2), TTL: 1}).Value
		}()
	}
	wg.Wait()
	unique := map[uint64]bool{}
	for _, id := range ids {
		require.NotZero(t, id)
		unique[id] = true
	}
	require.Len(t, unique, calls, "every call got its own command's result")
	// Again with the same nonces: each call must get its own session back.
	for i := range calls {
		require.Equal(t, ids[i], propose(t, p, fsm.Command{Kind: fsm.KindOpenSession, Nonce: uint64(i + 2), TTL: 1}).Value)
	}
	batched := seen.n.Load() - before - calls
	require.Less(t, batched, int64(calls), "concurrent commands were packed into fewer entries")
	t.Logf("%d concurrent commands took %d entries", calls, batched)
}

func TestCloseFailsWaitingCalls(t *testing.T) {
	p, _ := oneReplica(t, Config{Timeout: 5 * time.Second, MaxBatch: 8, InFlight: 1})
	propose(t, p, fsm.Command{Kind: fsm.KindOpenSession, Nonce: 1, TTL: 1})
	p.Close()
	_, err := p.Propose(context.Background(), fsm.Command{Kind: fsm.KindOpenSession, Nonce: 2, TTL: 1})
	require.True(t, errors.Is(err, ErrClosed), "%v", err)
	p.Close() // Cleanup closes again: it must not panic
}

// A caller whose context ends while its entry is in flight returns at once;
// the entry's slot is freed when the entry completes, so later calls go on.
func TestCancelledCallsFreeTheirSlots(t *testing.T) {
	p, _ := oneReplica(t, Config{Timeout: 5 * time.Second, MaxBatch: 8, InFlight: 1})
	propose(t, p, fsm.Command{Kind: fsm.KindOpenSession, Nonce: 1, TTL: 1})
	cancelled := 0
	for i := range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Duration(i*20)*time.Microsecond, cancel)
		_, err := p.Propose(ctx, fsm.Command{Kind: fsm.KindOpenSession, Nonce: uint64(i + 2), TTL: 1})
		if errors.Is(err, context.Canceled) {
			cancelled++
		} else {
			require.NoError(t, err)
		}
		cancel()
	}
	t.Logf("%d of 50 calls returned cancelled", cancelled)
	// Every slot comes back: a call after them all completes.
	r := propose(t, p, fsm.Command{Kind: fsm.KindOpenSession, Nonce: 1000, TTL: 1})
	require.NotZero(t, r.Value)
}
