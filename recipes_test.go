package fencelock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/testhook"
)

func holderIDs(info LockInfo) []uint64 {
	var out []uint64
	for _, h := range info.Holders {
		out = append(out, h.SessionID)
	}
	return out
}

func notYet(t *testing.T, ch <-chan acquired, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s was granted early: %+v", what, r)
	case <-time.After(100 * time.Millisecond):
	}
}

// A shared holder whose session expires loses its grant alone; the writer
// queued behind both readers is granted once the other reader releases.
func TestSharedHolderExpiryFreesOnlyItsGrant(t *testing.T) {
	c := newCluster(t, 3, nil)
	ctx := testCtx(t)
	frozen := newSession(t, ctx, c.node(2), WithTTL(time.Second))
	live, w := newSession(t, ctx, c.node(1)), newSession(t, ctx, c.node(3))
	lf, err := frozen.AcquireShared(ctx, "doc")
	require.NoError(t, err)
	ll, err := live.AcquireShared(ctx, "doc")
	require.NoError(t, err)
	writer := acquireAsync(ctx, w, "doc")
	waitWaiters(t, ctx, c.node(1), "doc", 1)

	testhook.Freeze(frozen)
	defer testhook.Thaw(frozen)
	<-lf.Done()
	require.ErrorIs(t, lf.Err(), ErrSessionExpired)
	waitUntil(t, ctx, "the group expired the frozen reader", func() bool {
		return len(inspect(t, ctx, c.node(1), "doc").Holders) == 1
	})
	require.Equal(t, []uint64{live.ID()}, holderIDs(inspect(t, ctx, c.node(3), "doc")))
	require.Nil(t, ll.Err(), "the other reader keeps its grant")
	notYet(t, writer, "the writer, while a reader holds")

	require.NoError(t, ll.Release(ctx))
	r := <-writer
	require.NoError(t, r.err)
	require.Greater(t, r.l.Token(), ll.Token())
	require.NoError(t, r.l.Release(ctx))
}
