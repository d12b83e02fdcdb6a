package lockbench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// svcFake is an in-memory Service whose kill can be made to lose things, so
// that W12's counts are shown to see them: fault "session" ends the first
// session on the kill (its holder is told), fault "silent" frees its held
// lock at the service without telling its holder (a double holder).
type svcFake struct {
	fault string

	mu       sync.Mutex
	token    uint64
	holders  map[string]*fakeSess
	sessions []*fakeSess
}

type fakeSess struct {
	f    *svcFake
	done chan struct{}
	once sync.Once
}

type fakeGrant struct {
	s     *fakeSess
	name  string
	token uint64
}

func (f *svcFake) Replicas() int                        { return 3 }
func (f *svcFake) Leader(context.Context) (int, error)  { return 1, nil }
func (f *svcFake) Terminate(context.Context, int) error { return nil }
func (f *svcFake) Restart(context.Context, int) error   { return nil }
func (f *svcFake) Close() error                         { return nil }
func (s *fakeSess) Done() <-chan struct{}               { return s.done }
func (s *fakeSess) Close(context.Context) error         { s.end(); return nil }
func (g fakeGrant) Token() uint64                       { return g.token }
func (g fakeGrant) Done() <-chan struct{}               { return g.s.done }
func (s *fakeSess) end()                                { s.once.Do(func() { close(s.done); s.f.drop(s) }) }
func (f *svcFake) Open(context.Context, time.Duration) (ServiceSession, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &fakeSess{f: f, done: make(chan struct{})}
	f.sessions = append(f.sessions, s)
	return s, nil
}

func (s *fakeSess) Err() error {
	select {
	case <-s.done:
		return fmt.Errorf("ended")
	default:
		return nil
	}
}

func (f *svcFake) drop(s *fakeSess) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for n, h := range f.holders {
		if h == s {
			delete(f.holders, n)
		}
	}
}

func (f *svcFake) Kill(context.Context, int) error {
	f.mu.Lock()
	first := f.sessions[0]
	f.mu.Unlock()
	switch f.fault {
	case "session":
		first.end()
	case "silent":
		f.mu.Lock()
		delete(f.holders, "bench/W12/held/0")
		f.mu.Unlock()
	}
	return nil
}

func (s *fakeSess) TryAcquire(_ context.Context, name string) (ServiceGrant, error) {
	f := s.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if s.Err() != nil {
		return nil, fmt.Errorf("session over")
	}
	if f.holders[name] != nil {
		return nil, ErrHeld
	}
	f.token++
	f.holders[name] = s
	return fakeGrant{s, name, f.token}, nil
}

func (s *fakeSess) Acquire(ctx context.Context, name string) (ServiceGrant, error) {
	for {
		g, err := s.TryAcquire(ctx, name)
		if err != ErrHeld {
			return g, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

func (g fakeGrant) Release(context.Context) error {
	g.s.f.mu.Lock()
	defer g.s.f.mu.Unlock()
	if g.s.f.holders[g.name] != g.s {
		return fmt.Errorf("not held")
	}
	delete(g.s.f.holders, g.name)
	return nil
}

func runFake(t *testing.T, fault string) Result {
	t.Helper()
	f := &svcFake{fault: fault, holders: map[string]*fakeSess{}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := W12(ctx, f, "fake", W12Options{Clients: 3, Rounds: 1, Settle: 2,
		Down: time.Millisecond, Dwell: 10 * time.Millisecond, Log: t.Logf})
	require.NoError(t, err)
	return res
}

func note(t *testing.T, r Result, key string) float64 {
	t.Helper()
	v, ok := r.Note(key)
	require.True(t, ok, "note %s missing: %s", key, r.Notes)
	return v
}

// W12's counts: nothing lost on a sound service; a lost session and its
// held lock counted; a lock freed behind its holder's back counted as lost
// and as a double holder.
func TestW12Counts(t *testing.T) {
	r := runFake(t, "")
	for _, k := range []string{"sessions_lost", "held_lost", "double_holders", "stale_writes", "failed_calls"} {
		require.Zero(t, note(t, r, k), "%s: %s", k, r.Notes)
	}
	require.Contains(t, r.Notes, "externals=none")
	require.Positive(t, r.Ops)
	require.Contains(t, Headline(r), "sessions_lost")

	r = runFake(t, "session")
	require.Equal(t, 1.0, note(t, r, "sessions_lost"), r.Notes)
	require.Equal(t, 1.0, note(t, r, "held_lost"), r.Notes)
	require.Zero(t, note(t, r, "double_holders"), r.Notes)

	r = runFake(t, "silent")
	require.Zero(t, note(t, r, "sessions_lost"), r.Notes)
	require.Equal(t, 1.0, note(t, r, "held_lost"), r.Notes)
	require.Equal(t, 1.0, note(t, r, "double_holders"), r.Notes)
	require.Positive(t, note(t, r, "stale_writes"), r.Notes)
	require.Contains(t, r.Notes, "PROBE GOT bench/W12/held/0")
}
