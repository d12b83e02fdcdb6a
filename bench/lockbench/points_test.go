package lockbench

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParsePoints(t *testing.T) {
	got, err := ParsePoints("1,2,4,8,16,32,64,128,256")
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 4, 8, 16, 32, 64, 128, 256}, got)

	got, err = ParsePoints("10k, 30k,100K,300k,1M,1.5M")
	require.NoError(t, err)
	require.Equal(t, []int{10_000, 30_000, 100_000, 300_000, 1_000_000, 1_500_000}, got)

	for _, bad := range []string{"", "1,,2", "0", "-4", "2.5", "1.00001k", "4,2", "3,3", "x", "10m", "2e10"} {
		_, err := ParsePoints(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestParseWorkloadsExpandsW1ToBothPlacements(t *testing.T) {
	got, err := ParseWorkloads("W1,w2", Workloads)
	require.NoError(t, err)
	require.Equal(t, []string{W1Leader, W1Follower, "W2"}, got)
	got, err = ParseWorkloads("w1-follower", Workloads)
	require.NoError(t, err)
	require.Equal(t, []string{W1Follower}, got)
	// A list that has W1 itself keeps it.
	got, err = ParseWorkloads("W1", []string{"W1", "W2"})
	require.NoError(t, err)
	require.Equal(t, []string{"W1"}, got)
}

// placed is the fake with a leader at replica 2, recording where sessions
// open.
type placed struct {
	*fake
	mu     sync.Mutex
	opened []int
}

func (p *placed) Leader(context.Context) (int, error) { return 2, nil }
func (p *placed) NewClient(ctx context.Context, i int, ttl time.Duration) (Client, error) {
	p.mu.Lock()
	p.opened = append(p.opened, i)
	p.mu.Unlock()
	return p.fake.NewClient(ctx, i, ttl)
}

func TestW1PlacesTheWorkerOnTheLeaderOrAFollower(t *testing.T) {
	for _, tc := range []struct {
		workload string
		replica  int
		onLeader float64
	}{{W1Leader, 2, 1}, {W1Follower, 0, 0}} {
		p := &placed{fake: newFake(1)}
		r, err := Run(context.Background(), Options{System: "fake", Iterations: 50}, tc.workload,
			func(context.Context, string) (Cluster, error) { return p, nil }, t.TempDir())
		require.NoError(t, err)
		require.Equal(t, []int{tc.replica}, p.opened, tc.workload)
		require.Equal(t, tc.workload, r.Workload)
		require.Equal(t, 50, r.Ops)
		v, ok := r.Note("worker_on_leader")
		require.True(t, ok)
		require.Equal(t, tc.onLeader, v, tc.workload)
		require.Contains(t, Headline(r), "pairs_per_s")
	}
}
