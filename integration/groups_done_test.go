package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// Issue 24's "Done when", through the public API on a transport.Network:
// five replicas, groups a (voters 1,2,3) and b (3,4,5). One session spans
// the groups; a group that loses its quorum ends only the grants held
// there; the other groups keep granting; the group comes back under its ID.
func TestGroupsDoneWhen(t *testing.T) {
	const ttl = 2 * time.Second
	c := fencelocktest.NewCluster(t, 5, fencelocktest.WithConfig(withGroups(fencelock.GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}, fencelock.GroupConfig{Name: "b", Voters: []uint64{3, 4, 5}})))
	ctx := testCtx(t)
	waitStatus(t, ctx, c, "every host runs every group", func(_ uint64, st fencelock.Status) bool {
		return len(st.Groups) == 3 && allLeaders(st)
	})
	ids := map[string]uint64{}
	for _, g := range c.Node(1).Status().Groups {
		ids[g.Name] = g.GroupID
	}

	// A session on replica 1 holds a lock in each group, each fenced by
	// its own group.
	s1, err := c.Node(1).NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	seen := map[uint64]string{}
	for _, name := range []string{"x@a", "y@b", "z"} {
		l, err := s1.Acquire(ctx, name)
		require.NoError(t, err, name)
		_, g, _ := fencelock.SplitName(name)
		require.Equal(t, ids[g], l.Fence().Group, "%s is fenced by group %q", name, g)
		require.NotContains(t, seen, l.Fence().Group, "%s and %s share a group", name, seen[l.Fence().Group])
		seen[l.Fence().Group] = name
	}
	_, err = s1.Acquire(ctx, "q@nope")
	require.ErrorIs(t, err, fencelock.ErrUnknownGroup)
	require.NoError(t, s1.Err(), "a refused name ends nothing")

	// A session on replica 3 (a voter of both) holds j@a and k@b.
	s3, err := c.Node(3).NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	j, err := s3.Acquire(ctx, "j@a")
	require.NoError(t, err)
	k, err := s3.Acquire(ctx, "k@b")
	require.NoError(t, err)

	// Stopping 1 and 2 takes a's quorum: j@a's Done closes by the holder's
	// clock, within its TTL (bounded generously for a loaded machine).
	c.Stop(1)
	c.Stop(2)
	stopped := time.Now()
	select {
	case <-j.Done():
		t.Logf("j@a lost %v after a lost its quorum", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(5 * ttl):
		t.Fatalf("j@a still held %v after a lost its quorum", 5*ttl)
	}
	require.ErrorIs(t, j.Err(), fencelock.ErrSessionExpired)

	// k@b is untouched: after more than a TTL without a, it is held by its
	// holder's view and by group b's.
	select {
	case <-k.Done():
		t.Fatalf("k@b ended with a's quorum: %v", k.Err())
	case <-time.After(ttl + ttl/2):
	}
	require.NoError(t, k.Err())
	require.NoError(t, s3.Err(), "the session as a whole lives on")
	info, err := c.Node(4).Inspect(ctx, "k@b")
	require.NoError(t, err)
	require.True(t, info.Held)
	require.Equal(t, k.Token(), info.Token, "b still holds k@b for its holder")
	select {
	case <-k.Done():
		t.Fatalf("k@b ended: %v", k.Err())
	default:
	}

	// A session on replica 4 takes w@b while a has no quorum ...
	s4, err := c.Node(4).NewSession(ctx, fencelock.WithTTL(ttl))
	require.NoError(t, err)
	w, err := s4.Acquire(ctx, "w@b")
	require.NoError(t, err)
	require.Equal(t, ids["b"], w.Fence().Group)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = s4.TryAcquire(short, "v@a")
	cancel()
	require.ErrorIs(t, err, fencelock.ErrUnavailable, "a has no quorum")

	// ... and v@a once 1 and 2 are back, under a's group ID.
	c.Restart(1)
	c.Restart(2)
	v, err := s4.Acquire(ctx, "v@a")
	require.NoError(t, err)
	require.Equal(t, ids["a"], v.Fence().Group, "a came back under its group ID")
	require.NoError(t, w.Err())
	require.NoError(t, k.Err())
}
