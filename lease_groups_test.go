package fencelock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// beatRecord is one KeepAlive call of a heartbeating holder.
type beatRecord struct {
	start time.Time // when the call began
	held  bool      // the lock was held when it began
	err   error
}

// placeLeaders places the leaders the tests of this file
// expect: once every one of the groups (the default one included) has a
// leader, replica 2 leads the default group and replica 4 group b. The
// balancer would move them, so it is paused on every replica first.
func placeLeaders(t *testing.T, ctx context.Context, c *testCluster, groups int) {
	t.Helper()
	c.pauseBalancers()
	c.waitStatus(ctx, "leaders", func(_ uint64, st Status) bool { return len(st.Groups) == groups && allLeaders(st) })
	for _, lead := range []struct {
		group string
		to    uint64
	}{{"", 2}, {"b", 4}} {
		require.NoError(t, c.node(lead.to).TransferLeadership(ctx, lead.group, lead.to), "group %q", lead.group)
		c.waitStatus(ctx, fmt.Sprintf("group %q led by %d", lead.group, lead.to), func(_ uint64, st Status) bool {
			g, ok := group(st, lead.group)
			return ok && g.LeaderID == lead.to
		})
	}
}

// Issue 39. Five replicas, groups a = {1,2,3} and b = {3,4,5}; a session on
// replica 1 holds x@b and is renewed only by KeepAlive; replica 1 is cut
// from 4 (b's leader) and 5, while it still reaches the default group's
// leader (2). Group b expires the session's part there and grants x@b to a
// session on replica 4. No KeepAlive that returned nil while x@b was held
// may promise (TTL − margin after its start) past that grant: once b
// cannot be renewed, KeepAlive fails, wrapping ErrUnavailable and naming b.
// The session itself lives on: its default part is renewed throughout.
func TestKeepAliveCountsEveryGroup(t *testing.T) {
	c := newCluster(t, 5, withGroups(GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}},
		GroupConfig{Name: "b", Voters: []uint64{3, 4, 5}}))
	ctx := testCtx(t)
	placeLeaders(t, ctx, c, 3)

	const ttl = 3 * time.Second
	s1, err := c.node(1).NewSession(ctx, WithTTL(ttl), WithExternalKeepAlive())
	require.NoError(t, err)
	margin := s1.SafetyMargin()
	l1, err := s1.Acquire(ctx, "x@b")
	require.NoError(t, err)

	// The holder heartbeats every TTL/6, each KeepAlive bounded by TTL/3 so
	// that one stuck on b does not starve the default part.
	var mu sync.Mutex
	var beats []beatRecord
	beat := make(chan struct{}, 1) // a beat was recorded
	stop := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			b := beatRecord{start: time.Now(), held: l1.Err() == nil}
			kctx, cancel := context.WithTimeout(ctx, ttl/3)
			b.err = s1.KeepAlive(kctx)
			cancel()
			mu.Lock()
			beats = append(beats, b)
			mu.Unlock()
			select {
			case beat <- struct{}{}:
			default:
			}
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(ttl / 6): // the heartbeat period, not synchronisation
			}
		}
	}()
	stopBeats := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-stopped
	}
	defer stopBeats()
	okBeats := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, b := range beats {
			if b.err == nil {
				n++
			}
		}
		return n
	}
	for okBeats() < 2 {
		select {
		case <-beat:
		case <-ctx.Done():
			t.Fatalf("no heartbeat answered before the cut: %v", ctx.Err())
		}
	}

	// The cut: replica 1 no longer reaches b's leader (4) nor 5.
	for _, id := range []uint64{4, 5} {
		c.net.Cut(c.addr(1), c.addr(id))
		c.net.Cut(c.addr(id), c.addr(1))
	}
	cut := time.Now()

	// A session on replica 4 waits for x@b: b grants it once it expired the
	// first session's part there.
	s2, err := c.node(4).NewSession(ctx, WithTTL(ttl))
	require.NoError(t, err)
	l2, err := s2.Acquire(ctx, "x@b")
	require.NoError(t, err)
	granted := time.Now()
	require.Greater(t, l2.Token(), l1.Token())
	t.Logf("x@b granted to the other session %v after the cut", granted.Sub(cut).Round(time.Millisecond))
	select {
	case <-l1.Done():
	case <-ctx.Done():
		t.Fatalf("the first holder never gave x@b up: %v", ctx.Err())
	}
	// One more beat after the grant, then stop.
	mu.Lock()
	n := len(beats)
	mu.Unlock()
	for {
		mu.Lock()
		more := len(beats) > n
		mu.Unlock()
		if more {
			break
		}
		select {
		case <-beat:
		case <-ctx.Done():
			t.Fatalf("no heartbeat after the grant: %v", ctx.Err())
		}
	}
	stopBeats()
	c.net.Heal()

	mu.Lock()
	defer mu.Unlock()
	failedOnB := false
	for _, b := range beats {
		promise := b.start.Add(ttl - margin)
		t.Logf("KeepAlive at cut%+v (x@b held: %v): err %v; promised until grant%+v",
			b.start.Sub(cut).Round(time.Millisecond), b.held, b.err, promise.Sub(granted).Round(time.Millisecond))
		if b.err != nil && b.start.After(cut) && b.held {
			require.ErrorIs(t, b.err, ErrUnavailable, "a KeepAlive that could not renew b")
			if strings.Contains(b.err.Error(), `group "b"`) {
				failedOnB = true
			}
		}
		if b.err == nil && b.held {
			require.True(t, promise.Before(granted),
				"a KeepAlive at cut%+v returned nil while x@b was held, promising it until %v after x@b was granted to another session",
				b.start.Sub(cut).Round(time.Millisecond), promise.Sub(granted).Round(time.Millisecond))
		}
	}
	require.True(t, failedOnB, "no KeepAlive after the cut said that b was not renewed")
	// The session lives on, renewed in the default group; with nothing held
	// in b any more, KeepAlive succeeds again.
	require.NoError(t, s1.Err())
	require.NoError(t, s1.KeepAlive(ctx))
}

// KeepAliveGroups reports each part: both renewed while both groups are
// reachable, and the lease is the shortest over the parts that hold
// something. A part that holds nothing and cannot be renewed fails nothing,
// and does not hold the round past the deadline of the others.
func TestKeepAliveGroupsReportsEachPart(t *testing.T) {
	c := newCluster(t, 5, withGroups(GroupConfig{Name: "b", Voters: []uint64{3, 4, 5}}))
	ctx := testCtx(t)
	placeLeaders(t, ctx, c, 2)
	const ttl = 3 * time.Second
	s, err := c.node(1).NewSession(ctx, WithTTL(ttl), WithExternalKeepAlive())
	require.NoError(t, err)
	l, err := s.Acquire(ctx, "x@b")
	require.NoError(t, err)

	leases, err := s.KeepAliveGroups(ctx)
	require.NoError(t, err)
	require.Len(t, leases, 2)
	for i, want := range []string{"", "b"} {
		require.Equal(t, want, leases[i].Group)
		require.True(t, leases[i].Holds, "group %q", want)
		require.True(t, leases[i].Renewed, "group %q", want)
		require.NoError(t, leases[i].Err)
		require.GreaterOrEqual(t, leases[i].Lease, ttl-s.SafetyMargin(), "group %q", want)
	}
	require.Equal(t, min(leases[0].Lease, leases[1].Lease), MinLease(leases))

	// Released, the part in b holds nothing: cut from b, it is not renewed,
	// and KeepAlive still succeeds.
	require.NoError(t, l.Release(ctx))
	for _, id := range []uint64{4, 5} {
		c.net.Cut(c.addr(1), c.addr(id))
		c.net.Cut(c.addr(id), c.addr(1))
	}
	defer c.net.Heal()
	// No deadline of the caller's: the round waits for b a keep-alive
	// period at most, so the default part it renewed is still live when it
	// returns (a session renewed only by KeepAlive would otherwise lose it
	// to a group where it holds nothing).
	began := time.Now()
	leases, err = s.KeepAliveGroups(ctx)
	took := time.Since(began)
	require.NoError(t, err, "a part holding nothing fails nothing")
	require.Less(t, took, ttl-s.SafetyMargin(), "the round waited for b past the default part's deadline")
	require.NoError(t, s.Err())
	require.Len(t, leases, 2)
	require.True(t, leases[0].Renewed)
	require.Equal(t, "b", leases[1].Group)
	require.False(t, leases[1].Holds)
	require.False(t, leases[1].Renewed)
	require.ErrorIs(t, leases[1].Err, ErrUnavailable)
	require.Equal(t, leases[0].Lease, MinLease(leases), "only the default part holds: it alone decides")
}
