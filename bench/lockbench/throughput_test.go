package lockbench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// namingFake records the names its clients acquire; every name is its own
// lock, always free.
type namingFake struct {
	fakeReplicas
	mu    sync.Mutex
	names map[string]int
}

func (f *namingFake) NewClient(context.Context, int, time.Duration) (Client, error) {
	return namingClient{f}, nil
}

type namingClient struct{ f *namingFake }

func (c namingClient) Acquire(_ context.Context, name string) (Held, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.names[name]++
	return namingHeld{}, nil
}
func (namingClient) StopHeartbeats(context.Context) (func() time.Time, error) { return time.Now, nil }
func (namingClient) Close(context.Context) error                              { return nil }

type namingHeld struct{}

func (namingHeld) Token() uint64                 { return 1 }
func (namingHeld) Release(context.Context) error { return nil }

// W10 spreads W2's workers over groups by their lock names: Throughput must
// give worker i exactly name(i).
func TestThroughputGivesEachWorkerItsName(t *testing.T) {
	f := &namingFake{names: map[string]int{}}
	name := func(i int) string { return fmt.Sprintf("bench/T/%d@g%d", i, i%3) }
	r, err := Throughput(context.Background(), f, 6, 100*time.Millisecond, name)
	require.NoError(t, err)
	require.Equal(t, 6, r.Workers)
	require.Positive(t, r.Ops)
	require.Len(t, f.names, 6, "one name per worker, no other")
	for i := range 6 {
		require.Positive(t, f.names[name(i)], "worker %d", i)
	}
}

func TestUncontendedCountsPairsAndReleaseQuantiles(t *testing.T) {
	f := &namingFake{names: map[string]int{}}
	cl, err := f.NewClient(context.Background(), 0, time.Second)
	require.NoError(t, err)
	r, err := Uncontended(context.Background(), cl, "bench/U/0@b", 50)
	require.NoError(t, err)
	require.Equal(t, 50, r.Ops)
	require.Equal(t, 70, f.names["bench/U/0@b"], "20 warm-up pairs, then the 50 measured")
	_, ok := r.Note("release_p99_ms")
	require.True(t, ok)
}
