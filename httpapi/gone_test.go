package httpapi

import (
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/transport"
)

// grantGone is the group's word on a release or resign whose grant this
// replica's copy of the session does not show: errNotBacked while the
// group (by a linearizable read) still has it granted to the session, so
// that the copy is dropped and the call made again on the session adopted
// afresh; nil once it is over or another's. The HTTP tests reach it only
// when a thawed replica's copy lags the group (cmd/fencelock's stale-copy
// tests), which the copy rarely still does when the call arrives: here
// each branch is reached every time.
func TestGrantGoneIsTheGroupsWord(t *testing.T) {
	ctx := t.Context()
	net := transport.NewNetwork(1)
	n, err := fencelock.Start(ctx, fencelock.Config{ReplicaID: 1, Members: map[uint64]string{1: net.Addr(1)},
		Dir: t.TempDir(), Transport: net, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	defer n.Close()
	s := New(n)
	open := func() *session {
		fs, err := n.NewSession(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = fs.Close(context.Background()) })
		return newSession(fs, [sha256.Size]byte{})
	}
	holder, other := open(), open()

	term, err := holder.s.Campaign(ctx, "e", "v")
	require.NoError(t, err)
	l, err := holder.s.Acquire(ctx, "l")
	require.NoError(t, err)
	for _, c := range []struct {
		what     string
		election bool
		name     string
		token    uint64
	}{{"the term", true, "e", term.Token()}, {"the lock", false, "l", l.Token()}} {
		require.ErrorIs(t, s.grantGone(ctx, holder, c.name, c.election, c.token), errNotBacked,
			"%s, still the session's in the group, must not be answered as over", c.what)
		require.NoError(t, s.grantGone(ctx, other, c.name, c.election, c.token), "%s: another session's", c.what)
		require.NoError(t, s.grantGone(ctx, holder, c.name, c.election, c.token+1), "%s: another token", c.what)
		require.NoError(t, s.grantGone(ctx, holder, c.name, c.election, 0), "%s: no token", c.what)
	}

	require.NoError(t, term.Resign(ctx))
	require.NoError(t, l.Release(ctx))
	require.NoError(t, s.grantGone(ctx, holder, "e", true, term.Token()), "a term resigned: no leader at all")
	require.NoError(t, s.grantGone(ctx, holder, "l", false, l.Token()), "a lock released")
	next, err := other.s.Campaign(ctx, "e", "w")
	require.NoError(t, err)
	require.NoError(t, s.grantGone(ctx, holder, "e", true, term.Token()), "a term passed on to another session")
	require.ErrorIs(t, s.grantGone(ctx, other, "e", true, next.Token()), errNotBacked)
}
