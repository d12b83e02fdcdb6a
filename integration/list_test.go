package integration_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Locks and Sessions list the whole group's state from any replica, in
// order, page by page, with holders, tokens, queues, TTLs and owners.
func TestLocksAndSessionsListing(t *testing.T) {
	c := fencelocktest.NewCluster(t, 3)
	ctx := testCtx(t)
	s1 := newSession(t, ctx, c.Node(1), fencelock.WithTTL(3*time.Second))
	s2 := newSession(t, ctx, c.Node(2), fencelock.WithTTL(5*time.Second))
	s3 := newSession(t, ctx, c.Node(3))
	tokens := map[string]uint64{}
	for i := range 12 {
		name := fmt.Sprintf("jobs/%02d", i)
		s := []*fencelock.Session{s1, s2}[i%2]
		l, err := s.Acquire(ctx, name)
		require.NoError(t, err)
		tokens[name] = l.Token()
	}
	other, err := s3.Acquire(ctx, "other")
	require.NoError(t, err)
	res := acquireAsync(ctx, s3, "jobs/03")
	waitWaiters(t, ctx, c.Node(1), "jobs/03", 1)
	res2 := acquireAsync(ctx, s1, "jobs/03")
	waitWaiters(t, ctx, c.Node(1), "jobs/03", 2)

	var names []string
	var opts []fencelock.ListOption
	for pages := 1; ; pages++ {
		page, err := c.Node(3).Locks(ctx, "jobs/", append(opts, fencelock.ListLimit(5))...)
		require.NoError(t, err)
		for _, l := range page.Locks {
			names = append(names, l.Name)
			require.Equal(t, tokens[l.Name], l.Token)
			require.True(t, l.Held)
			owner := map[uint64]uint64{s1.ID(): 1, s2.ID(): 2}[l.SessionID]
			require.Equal(t, owner, l.Owner)
			if l.Name == "jobs/03" {
				require.Equal(t, 2, l.Waiters)
				require.Equal(t, []uint64{s3.ID(), s1.ID()}, l.Queue, "the queue, head first")
			} else {
				require.Zero(t, l.Waiters)
				require.Empty(t, l.Queue)
			}
		}
		if !page.More {
			require.Equal(t, 3, pages)
			break
		}
		opts = []fencelock.ListOption{fencelock.ListAfter(page.Locks[len(page.Locks)-1].Name)}
	}
	require.Len(t, names, 12)
	require.IsIncreasing(t, names)

	all, err := c.Node(2).Locks(ctx, "")
	require.NoError(t, err)
	require.Len(t, all.Locks, 13)
	require.False(t, all.More)
	require.Equal(t, "other", all.Locks[12].Name)
	require.Equal(t, other.Token(), all.Locks[12].Token)

	sp, err := c.Node(1).Sessions(ctx, fencelock.ListLimit(2))
	require.NoError(t, err)
	require.True(t, sp.More)
	rest, err := c.Node(1).Sessions(ctx, fencelock.ListAfterSession(sp.Sessions[1].ID))
	require.NoError(t, err)
	require.False(t, rest.More)
	got := append(sp.Sessions, rest.Sessions...)
	require.Len(t, got, 3)
	want := map[uint64]fencelock.SessionInfo{
		s1.ID(): {ID: s1.ID(), PartID: s1.ID(), Name: defaultSessionName(), Owner: 1, TTL: 3 * time.Second, Held: 6, Waiting: 1},
		s2.ID(): {ID: s2.ID(), PartID: s2.ID(), Name: defaultSessionName(), Owner: 2, TTL: 5 * time.Second, Held: 6, Waiting: 0},
		s3.ID(): {ID: s3.ID(), PartID: s3.ID(), Name: defaultSessionName(), Owner: 3, TTL: fencelock.DefaultSessionTTL, Held: 1, Waiting: 1},
	}
	for i, s := range got {
		if i > 0 {
			require.Greater(t, s.ID, got[i-1].ID, "in ID order")
		}
		require.Positive(t, s.KeepAliveIndex)
		s.KeepAliveIndex = 0
		require.Equal(t, want[s.ID], s)
	}

	_, err = c.Node(1).Locks(ctx, "", fencelock.ListLimit(0))
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)
	_, err = c.Node(1).Sessions(ctx, fencelock.ListLimit(fencelock.MaxListLimit+1))
	require.ErrorIs(t, err, fencelock.ErrInvalidConfig)

	require.NoError(t, s2.Close(ctx)) // frees jobs/03: s3 is next
	r := <-res
	require.NoError(t, r.err)
	require.NoError(t, s1.Close(ctx))
	require.ErrorIs(t, (<-res2).err, fencelock.ErrSessionClosed)
}
