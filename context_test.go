package fencelock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/testhook"
)

// A grant's context carries its token while the grant lasts and is
// cancelled, with the grant's reason as its cause, when it ends.
func TestGrantContext(t *testing.T) {
	cl := newCluster(t, 3, nil)
	ctx := testCtx(t)
	leader := cl.leader(ctx)
	s := newSession(t, ctx, cl.node(leader))
	_, ok := TokenFrom(ctx)
	require.False(t, ok, "a context without a grant carries no token")

	l, err := s.Acquire(ctx, "ctx/lock")
	require.NoError(t, err)
	lctx := l.Context(ctx)
	tok, ok := TokenFrom(lctx)
	require.True(t, ok)
	require.Equal(t, l.Token(), tok)
	require.NoError(t, lctx.Err())

	require.NoError(t, l.Release(ctx))
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), ErrNotHeld)
	tok, ok = TokenFrom(lctx)
	require.False(t, ok, "an ended grant's token is not to be written with")
	require.Equal(t, l.Token(), tok)

	lead, err := s.Campaign(ctx, "ctx/election", "v")
	require.NoError(t, err)
	ectx := lead.Context(ctx)
	tok, ok = TokenFrom(ectx)
	require.True(t, ok)
	require.Equal(t, lead.Token(), tok)
	require.NoError(t, lead.Resign(ctx))
	<-ectx.Done()
	require.ErrorIs(t, context.Cause(ectx), ErrNotLeader)
}

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
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), ErrSessionExpired)
}
