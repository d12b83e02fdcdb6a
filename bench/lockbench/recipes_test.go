package lockbench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fake is an in-memory lock service: one shared/exclusive lock and one
// semaphore that admits limit holders, whatever permits the caller names,
// so that a broken semaphore can be shown to fail W8.
type fake struct {
	fakeReplicas
	mu      sync.Mutex
	cond    *sync.Cond
	readers int
	writer  bool
	queued  int // writers waiting: readers wait behind them, so the writer is not starved
	permits int
	limit   int
	token   uint64
}

func newFake(limit int) *fake {
	f := &fake{limit: limit}
	f.cond = sync.NewCond(&f.mu)
	return f
}

// fakeReplicas is the part of a fake Cluster that is the same in every
// one: three replicas, the leader on the first, nothing to stop or close.
// A fake embeds it and has NewClient of its own.
type fakeReplicas struct{}

func (fakeReplicas) Replicas() int                       { return 3 }
func (fakeReplicas) Leader(context.Context) (int, error) { return 0, nil }
func (fakeReplicas) Stop(int) error                      { return nil }
func (fakeReplicas) Close() error                        { return nil }

func (f *fake) NewClient(context.Context, int, time.Duration) (Client, error) {
	return fakeClient{f}, nil
}

type fakeClient struct{ f *fake }

type fakeHeld struct {
	f       *fake
	token   uint64
	release func()
}

func (h fakeHeld) Token() uint64 { return h.token }
func (h fakeHeld) Release(context.Context) error {
	h.f.mu.Lock()
	h.release()
	h.f.cond.Broadcast()
	h.f.mu.Unlock()
	return nil
}

func (c fakeClient) take(admit func() bool, take, give func()) (Held, error) {
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for !admit() {
		f.cond.Wait()
	}
	take()
	f.token++
	return fakeHeld{f: f, token: f.token, release: give}, nil
}

func (c fakeClient) Acquire(context.Context, string) (Held, error) {
	f := c.f
	f.mu.Lock()
	f.queued++
	f.mu.Unlock()
	return c.take(func() bool { return !f.writer && f.readers == 0 },
		func() { f.writer, f.queued = true, f.queued-1 }, func() { f.writer = false })
}

func (c fakeClient) AcquireExclusive(ctx context.Context, name string) (Held, error) {
	return c.Acquire(ctx, name)
}

func (c fakeClient) AcquireShared(context.Context, string) (Held, error) {
	f := c.f
	return c.take(func() bool { return !f.writer && f.queued == 0 }, func() { f.readers++ }, func() { f.readers-- })
}

func (c fakeClient) AcquireSemaphore(context.Context, string, int) (Held, error) {
	f := c.f
	return c.take(func() bool { return f.permits < f.limit }, func() { f.permits++ }, func() { f.permits-- })
}

func (fakeClient) StopHeartbeats(context.Context) (func() time.Time, error) {
	return time.Now, nil
}
func (fakeClient) Close(context.Context) error { return nil }

func TestW7ReportsBothModes(t *testing.T) {
	o := Options{System: "fake", Duration: 200 * time.Millisecond}
	r, err := Run(context.Background(), o, "W7", func(context.Context, string) (Cluster, error) { return newFake(4), nil }, t.TempDir())
	require.NoError(t, err)
	require.Equal(t, 16, r.Workers)
	require.Zero(t, r.Errors)
	reads, ok := r.Note("read_ops_per_s")
	require.True(t, ok)
	writes, ok := r.Note("write_ops_per_s")
	require.True(t, ok)
	require.Positive(t, reads)
	require.Positive(t, writes)
	h := Headline(r)
	require.Contains(t, h, "write_p99_ms")
	require.Contains(t, h, "read_p99_ms")
}

func TestW8FailsWhenTheSemaphoreAdmitsTooMany(t *testing.T) {
	o := Options{System: "fake", Duration: 300 * time.Millisecond}
	r, err := Run(context.Background(), o, "W8", func(context.Context, string) (Cluster, error) { return newFake(4), nil }, t.TempDir())
	require.NoError(t, err)
	most, ok := r.Note("max_holders")
	require.True(t, ok)
	require.LessOrEqual(t, most, 4.0)
	require.Positive(t, r.OpsPerS)

	// A semaphore that lets 8 in: 16 workers holding 1ms each are seen
	// more than 4 at once, and the run fails.
	_, err = Run(context.Background(), o, "W8", func(context.Context, string) (Cluster, error) { return newFake(8), nil }, t.TempDir())
	require.True(t, errors.Is(err, ErrTooManyHolders), "%v", err)
}
