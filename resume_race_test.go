package fencelock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
)

// A resume that applies right after the group granted the old incarnation's
// queued request keeps that grant, and the resumed Session lists it: in the
// default group and in a named one, whichever of the grant and the resume
// the replica applies first. The fault checker once saw a resumed session
// whose Locks lacked a grant its group had kept (leader-crash scenario).
func TestResumeKeepsAGrantJustMade(t *testing.T) {
	c := newCluster(t, 3, withGroups(GroupConfig{Name: "b", Voters: []uint64{1, 2, 3}}))
	ctx := testCtx(t)
	var kept, withdrawn int
	for i := range 32 {
		name := "x"
		if i%2 == 1 {
			name = "x@b"
		}
		h := newSession(t, ctx, c.node(2))
		hl, err := h.Acquire(ctx, name)
		require.NoError(t, err)
		s := newSession(t, ctx, c.node(1), WithTTL(30*time.Second))
		queued := make(chan error, 1)
		go func() {
			_, err := s.Acquire(ctx, name)
			queued <- err
		}()
		waitWaiters(t, ctx, c.node(3), name, 1)
		released := make(chan error, 1)
		go func() { released <- hl.Release(ctx) }()
		if i%4 >= 2 {
			require.NoError(t, <-released) // the grant applies before the resume
		}
		group := ""
		if i%2 == 1 {
			group = "b"
		}
		lose := i%8 >= 4 // the resume's first reply is lost: it applies twice
		if lose {
			c.node(3).host.Shard(group).TestingLoseReplies(fsm.KindResume, 1)
		}
		rs, err := c.node(3).ResumeSession(ctx, s.Resume())
		require.NoError(t, err, "round %d", i)
		if i%4 < 2 {
			require.NoError(t, <-released)
		}
		info := inspect(t, ctx, c.node(3), name)
		var listed []uint64
		for _, l := range rs.Locks() {
			listed = append(listed, l.Token())
		}
		if lose {
			require.Zero(t, c.node(3).host.Shard(group).TestingLostReplies(fsm.KindResume), "round %d: the resume proposed again", i)
		}
		part, ok := rs.s.PartID(group) // a named group knows the session by its part's ID there
		require.True(t, ok, "round %d: the resumed session has no part in group %q", i, group)
		if info.Held && info.PartID == part {
			kept++
			require.Equal(t, []uint64{info.Token}, listed, "round %d: the group kept %s for the session, its Locks must list it", i, name)
			require.NoError(t, rs.Locks()[0].Release(ctx))
		} else {
			withdrawn++
			require.False(t, info.Held, "round %d: %s held by another session's part %d", i, name, info.PartID)
			require.Empty(t, listed, "round %d: the group holds nothing for the session", i)
		}
		require.NoError(t, rs.Close(ctx))
		// The old incarnation's queued call ends one way or another; what
		// matters is that it ends.
		select {
		case err := <-queued:
			_ = err
		case <-time.After(time.Minute):
			t.Fatalf("round %d: the old incarnation's acquire never ended", i)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := s.Close(cctx); err != nil && !errors.Is(err, ErrSessionExpired) && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("round %d: old incarnation's close: %v", i, err)
		}
		cancel()
		require.NoError(t, h.Close(ctx))
	}
	t.Logf("kept %d, withdrawn %d", kept, withdrawn)
	require.NotZero(t, kept, "no round kept a grant: the test exercised nothing")
}
