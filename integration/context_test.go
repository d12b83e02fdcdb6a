package integration_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// A grant's context carries its token while the grant lasts and is
// cancelled, with the grant's reason as its cause, when it ends.
func TestGrantContext(t *testing.T) {
	cl := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	leader := cl.Leader(ctx)
	s := newSession(t, ctx, cl.Node(leader))
	_, ok := fencelock.TokenFrom(ctx)
	require.False(t, ok, "a context without a grant carries no token")

	l, err := s.Acquire(ctx, "ctx/lock")
	require.NoError(t, err)
	lctx := l.Context(ctx)
	tok, ok := fencelock.TokenFrom(lctx)
	require.True(t, ok)
	require.Equal(t, l.Token(), tok)
	require.NoError(t, lctx.Err())

	require.NoError(t, l.Release(ctx))
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), fencelock.ErrNotHeld)
	tok, ok = fencelock.TokenFrom(lctx)
	require.False(t, ok, "an ended grant's token is not to be written with")
	require.Equal(t, l.Token(), tok)

	lead, err := s.Campaign(ctx, "ctx/election", "v")
	require.NoError(t, err)
	ectx := lead.Context(ctx)
	tok, ok = fencelock.TokenFrom(ectx)
	require.True(t, ok)
	require.Equal(t, lead.Token(), tok)
	require.NoError(t, lead.Resign(ctx))
	<-ectx.Done()
	require.ErrorIs(t, context.Cause(ectx), fencelock.ErrNotLeader)
}
