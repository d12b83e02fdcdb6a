package integration_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencelocktest"
)

// With only the default group configured, every call that takes a lock or
// election name refuses a name that names another group, loudly: nothing
// is queued, held or read in the default group instead.
func TestUnknownGroupFailsEveryCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := fencelocktest.NewCluster(t, 1)
	n := c.Node(1)
	s := newSession(t, ctx, n)
	for _, name := range []string{"x@nope", "x@", "x@Billing", "a@b@nope"} {
		calls := map[string]error{}
		_, calls["Acquire"] = s.Acquire(ctx, name)
		_, calls["TryAcquire"] = s.TryAcquire(ctx, name)
		_, calls["AcquireShared"] = s.AcquireShared(ctx, name)
		_, calls["TryAcquireShared"] = s.TryAcquireShared(ctx, name)
		_, calls["AcquireSemaphore"] = s.AcquireSemaphore(ctx, name, 2)
		_, calls["TryAcquireSemaphore"] = s.TryAcquireSemaphore(ctx, name, 2)
		_, calls["Campaign"] = s.Campaign(ctx, name, "v")
		_, calls["TryCampaign"] = s.TryCampaign(ctx, name, "v")
		_, calls["Leader"] = n.Leader(ctx, name)
		_, calls["Inspect"] = n.Inspect(ctx, name)
		_, calls["Candidates"] = n.Candidates(ctx, name)
		calls["Revoke"] = n.Revoke(ctx, name)
		calls["RevokeGrant"] = n.RevokeGrant(ctx, name, 1)
		calls["RevokeLeadership"] = n.RevokeLeadership(ctx, name)
		_, calls["Locks"] = n.Locks(ctx, name)
		_, calls["Elections"] = n.Elections(ctx, name)
		calls["RunElection"] = n.RunElection(ctx, name, "v", fencelock.ElectionCallbacks{
			OnStartedLeading: func(context.Context, *fencelock.Leadership) { t.Error("led an election in an unknown group") },
		})
		obs := <-n.Observe(ctx, name)
		calls["Observe"] = obs.Err
		w := <-n.Watch(ctx, name)
		calls["Watch"] = w.Err
		for call, err := range calls {
			require.ErrorIs(t, err, fencelock.ErrUnknownGroup, "%s(%q)", call, name)
		}
	}
	page, err := n.Locks(ctx, "")
	require.NoError(t, err)
	require.Empty(t, page.Locks, "nothing was taken in the default group instead")
	require.Empty(t, s.Locks())
	require.Empty(t, s.Leaderships())
	require.NoError(t, s.Err())

	// A name without '@' is the default group's, as always.
	l, err := s.Acquire(ctx, "plain")
	require.NoError(t, err)
	require.Equal(t, n.Status().GroupID, l.Fence().Group)
	require.NoError(t, l.Release(ctx))
}
