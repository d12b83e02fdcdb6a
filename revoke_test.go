package fencelock

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/testhook"
)

// A revoked holder that has not noticed yet (its process paused) writes
// late with its old token: the resource's Fencer refuses it once the next
// holder has written.
func TestRevokedHoldersLateWriteIsRefused(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	fencer := NewFencer()
	holder := newSession(t, ctx, c.node(1))
	l, err := holder.Acquire(ctx, "register")
	require.NoError(t, err)
	require.NoError(t, fencer.Admit("register", l.Token()))
	testhook.Pause(holder) // it sees nothing while paused: its Done stays open
	next := make(chan *Lock, 1)
	go func() {
		nl, err := newSession(t, ctx, c.node(2)).Acquire(ctx, "register")
		assert.NoError(t, err)
		next <- nl
	}()
	waitWaiters(t, ctx, c.node(3), "register", 1)
	require.NoError(t, c.node(3).Revoke(ctx, "register"))
	nl := <-next
	require.NoError(t, fencer.Admit("register", nl.Token()), "the next holder writes")
	testhook.Resume(holder)
	err = fencer.Admit("register", l.Token())
	require.ErrorIs(t, err, ErrStaleToken, "the revoked holder's late write")
	<-l.Done()
	require.ErrorIs(t, l.Err(), ErrRevoked)
}
