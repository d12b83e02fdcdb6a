package fencelock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/testhook"
)

// A holder paused past its TTL (testhook.Pause: no timer, no news) keeps an
// open grant context while paused; on waking, its first TokenFrom refuses
// the token.
func TestTokenFromRechecksDeadlineAfterPause(t *testing.T) {
	cl := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := cl.leader(ctx)
	a := newSession(t, ctx, cl.node(leader%3+1), WithTTL(time.Second))
	b := newSession(t, ctx, cl.node(leader), WithTTL(5*time.Second))
	la, err := a.Acquire(ctx, "ctx/paused")
	require.NoError(t, err)
	lctx := la.Context(ctx)
	res := acquireAsync(ctx, b, "ctx/paused")
	waitWaiters(t, ctx, cl.node(leader), "ctx/paused", 1)

	testhook.Pause(a)
	r := <-res
	require.NoError(t, r.err, "the group expired the paused holder and granted on")
	require.NoError(t, lctx.Err(), "while paused, nothing cancelled the grant's context")
	testhook.Resume(a)
	_, ok := TokenFrom(lctx)
	require.False(t, ok, "on waking, TokenFrom sees the deadline passed")
	require.Error(t, lctx.Err(), "on waking, the context's Err sees it too, whatever the timer did")
	require.True(t, closed(lctx.Done()))
	require.ErrorIs(t, context.Cause(lctx), ErrSessionExpired)
}

// aheadClock is the process clock with a reading a test can move forward,
// monotonic part included, while its timers run in real time: it stands for
// a process that slept (SIGSTOP, a long GC pause) and woke before any timer
// of its had a chance to run.
type aheadClock struct{ ahead atomic.Int64 }

func (c *aheadClock) Now() time.Time                       { return time.Now().Add(time.Duration(c.ahead.Load())) }
func (c *aheadClock) NewTimer(d time.Duration) clock.Timer { return clock.Real.NewTimer(d) }
func (c *aheadClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return clock.Real.AfterFunc(d, f)
}

// A grant context's Err and Done answer by the holder's clock at the call:
// once the deadline has passed they report it, although the deadline timer
// is still many seconds away from running and the group has not expired
// the session. GrantErr and TokenFrom see it through derived contexts, whose
// own Err does not check. Nothing here waits: every answer is the first look.
func TestGrantContextRechecksDeadlineAtCall(t *testing.T) {
	c := &aheadClock{}
	cl := newCluster(t, 1, func(cfg *Config) { testhook.UseClock(cfg, c) })
	ctx := testCtx(t)
	const ttl = 20 * time.Second // no timer of the test's sessions runs during the test
	s1 := newSession(t, ctx, cl.node(1), WithTTL(ttl))
	s2 := newSession(t, ctx, cl.node(1), WithTTL(ttl))
	l, err := s1.Acquire(ctx, "ctx/ahead")
	require.NoError(t, err)
	lead, err := s2.Campaign(ctx, "ctx/ahead", "v")
	require.NoError(t, err)
	lctx, ectx := l.Context(ctx), lead.Context(ctx)
	derived, cancel := context.WithTimeout(lctx, time.Hour) // as database/sql and net/http derive
	defer cancel()
	require.NoError(t, GrantErr(derived))
	require.NoError(t, lctx.Err())
	require.False(t, closed(ectx.Done()))

	testhook.Freeze(s1) // no keep-alive moves the deadlines on
	testhook.Freeze(s2)
	c.ahead.Store(int64(2 * ttl)) // the process "wakes" two TTLs later

	require.ErrorIs(t, GrantErr(derived), ErrSessionExpired, "through a derived context")
	tok, ok := TokenFrom(derived)
	require.False(t, ok)
	require.Equal(t, l.Token(), tok)
	require.Error(t, lctx.Err())
	require.ErrorIs(t, context.Cause(lctx), ErrSessionExpired)
	require.Error(t, derived.Err(), "cancelling the grant context cancels its children at once")
	require.True(t, closed(ectx.Done()), "Done is closed on its first look")
	require.ErrorIs(t, context.Cause(ectx), ErrSessionExpired)
	require.ErrorIs(t, lead.Err(), ErrSessionExpired)
	testhook.Thaw(s1)
	testhook.Thaw(s2)
}

// GrantErr of a context without a grant is nil: helpers that re-check
// before writing have nothing to check then, and TokenFrom says no token.
func TestGrantErrWithoutGrant(t *testing.T) {
	require.NoError(t, GrantErr(context.Background()))
	tok, ok := TokenFrom(context.Background())
	require.False(t, ok)
	require.Zero(t, tok)
}
