package fencelock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/internal/testhook"
	"github.com/fencelock/fencelock/transport"
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

// Issue 39: an operator's call goes through Propose, which proposes again
// after a leader change (or a timeout) while the first proposal may still
// commit. These tests make that happen on purpose: replica's
// TestingLoseReplies reports the first committed proposal of the call as
// lost to a leader change, so Propose proposes the same command again and
// the group applies it twice. The call must apply once: a revoke by name
// must not end the grant it handed on, and a retried RevokeGrant,
// EndSession or EndSessionIn that took effect must return nil. Each runs
// in the default group and in a named one.
func TestOperatorCallsApplyOnceAcrossRetries(t *testing.T) {
	c := newCluster(t, 3, withGroups(GroupConfig{Name: "a", Voters: []uint64{1, 2, 3}}))
	ctx := testCtx(t)
	c.waitStatus(ctx, "leaders", func(_ uint64, st Status) bool { return len(st.Groups) == 2 && allLeaders(st) })
	op := c.node(3) // the operator's node

	for _, g := range []struct{ name, group, suffix string }{{"default group", "", ""}, {"named group", "a", "@a"}} {
		// loseReply makes the operator's next call of kind in the group
		// propose twice, and returns a check that it did.
		loseReply := func(t *testing.T, kind fsm.Kind) (check func()) {
			r := op.host.Shard(g.group)
			r.TestingLoseReplies(kind, 1)
			return func() {
				t.Helper()
				require.Zero(t, r.TestingLostReplies(kind), "the call's first reply was lost: it proposed again")
			}
		}
		// partID is s's session ID in the group.
		partID := func(t *testing.T, s *Session) uint64 {
			t.Helper()
			id, ok := s.IDIn(g.group)
			require.True(t, ok)
			return id
		}

		// heldWithWaiter has a session on replica 1 hold name and one on
		// replica 2 queue for it.
		heldWithWaiter := func(t *testing.T, name string) (held *Lock, waiter *Session, res <-chan acquired) {
			t.Helper()
			a, b := newSession(t, ctx, c.node(1)), newSession(t, ctx, c.node(2))
			la, res := holdWithWaiter(t, ctx, op, a, b, name)
			return la, b, res
		}
		// handedOn checks that the revoked grant ended and that the waiter
		// was granted name and still holds it.
		handedOn := func(t *testing.T, name string, revoked *Lock, waiter *Session, res <-chan acquired) {
			t.Helper()
			<-revoked.Done()
			require.ErrorIs(t, revoked.Err(), ErrRevoked)
			got := <-res
			require.NoError(t, got.err)
			requireStillHolds(t, ctx, c, name, got.l, partID(t, waiter))
		}

		t.Run(g.name+"/revoke", func(t *testing.T) {
			name := "job" + g.suffix
			la, b, res := heldWithWaiter(t, name)
			check := loseReply(t, fsm.KindRevoke)
			require.NoError(t, op.Revoke(ctx, name))
			check()
			handedOn(t, name, la, b, res)
		})

		t.Run(g.name+"/revoke grant", func(t *testing.T) {
			name := "grant" + g.suffix
			la, b, res := heldWithWaiter(t, name)
			check := loseReply(t, fsm.KindRevoke)
			require.NoError(t, op.RevokeGrant(ctx, name, la.Token()), "not ErrNotHeld: the call's own first attempt ended the grant")
			check()
			handedOn(t, name, la, b, res)
			require.ErrorIs(t, op.RevokeGrant(ctx, name, la.Token()), ErrNotHeld, "a new call finds the grant gone")
		})

		t.Run(g.name+"/end session", func(t *testing.T) {
			name := "ended" + g.suffix
			s := newSession(t, ctx, c.node(1))
			l, err := s.Acquire(ctx, name)
			require.NoError(t, err)
			id := partID(t, s)

			check := loseReply(t, fsm.KindEndSession)
			if g.group == "" {
				require.NoError(t, op.EndSession(ctx, id), "not ErrSessionExpired: the call's own first attempt ended it")
			} else {
				require.NoError(t, op.EndSessionIn(ctx, g.group, id), "not ErrSessionExpired: the call's own first attempt ended it")
			}
			check()
			<-l.Done()
			require.ErrorIs(t, l.Err(), ErrRevoked)
			require.False(t, inspect(t, ctx, op, name).Held)
			require.ErrorIs(t, op.EndSessionIn(ctx, g.group, id), ErrSessionExpired, "a new call finds it over")
		})

		t.Run(g.name+"/revoke leadership", func(t *testing.T) {
			name := "primary" + g.suffix
			a, b := newSession(t, ctx, c.node(1)), newSession(t, ctx, c.node(2))
			la := campaign(t, ctx, a, name, "a")
			res := campaignAsync(ctx, b, name, "b")
			waitUntil(t, ctx, "b queues", func() bool {
				cands, err := op.Candidates(ctx, name)
				require.NoError(t, err)
				return cands.Total == 1
			})

			check := loseReply(t, fsm.KindRevoke)
			require.NoError(t, op.RevokeLeadership(ctx, name))
			check()
			<-la.Done()
			require.ErrorIs(t, la.Err(), ErrRevoked)
			got := <-res
			require.NoError(t, got.err)
			lb := got.l
			// Every replica has applied the retry once a linearizable
			// read on each returns; b's node then knows of any end.
			for id := uint64(1); id <= 3; id++ {
				cands, err := c.node(id).Candidates(ctx, name)
				require.NoError(t, err)
				require.Equal(t, partID(t, b), cands.Leader.PartID, "the successor leads still (replica %d)", id)
				require.Equal(t, lb.Token(), cands.Leader.Token)
			}
			time.Sleep(100 * time.Millisecond) // events reach the session after the apply
			require.False(t, closed(lb.Done()), "the successor's leadership is not revoked: %v", lb.Err())
		})
	}
}

// requireStillHolds checks that lock l, the grant a revocation handed on,
// is held still, by the session's part id there (PartID), with its token, as
// every replica sees it once it has applied the revocation's retry.
func requireStillHolds(t *testing.T, ctx context.Context, c *testCluster, name string, l *Lock, id uint64) {
	t.Helper()
	// A linearizable read on each replica returns once it applied the
	// retry, which committed before the revoke returned; the holder's
	// node then knows of any end.
	for n := uint64(1); n <= 3; n++ {
		info := inspect(t, ctx, c.node(n), name)
		require.True(t, info.Held, "replica %d: %+v", n, info)
		require.Equal(t, id, info.PartID, "the successor holds still (replica %d)", n)
		require.Equal(t, l.Token(), info.Token, "with its grant's token (replica %d)", n)
	}
	time.Sleep(100 * time.Millisecond) // events reach the session after the apply
	require.False(t, closed(l.Done()), "the successor's grant is not revoked: %v", l.Err())
}

// The same with a real leader change rather than the hook: the operator's
// replica proposes a revoke by name, the leader commits it (the waiter is
// granted) but its messages to the operator's replica are slow, and the
// leadership moves before the operator's replica hears of the commit. Its
// proposer fails the revoke in flight with a leader change, Propose
// proposes it again, and the group applies it twice. The race is real, so
// a round whose revoke happened to complete first proves nothing: rounds
// repeat until one applied the revoke twice (the group's log says), and
// every round checks that the successor holds still.
func TestRevokeAppliesOnceAcrossALeaderTransfer(t *testing.T) {
	var mu sync.Mutex
	revokes := map[string]int{} // lock name -> revoke commands replica 1 applied
	c := newCluster(t, 3, func(cfg *Config) {
		if cfg.ReplicaID != 1 {
			return
		}
		testhook.ObserveApplied(cfg, func(a testhook.Applied) {
			mu.Lock()
			defer mu.Unlock()
			for _, cmd := range a.Cmds {
				if cmd.Kind == fsm.KindRevoke {
					revokes[cmd.Name]++
				}
			}
		})
	})
	ctx := testCtx(t)
	c.pauseBalancers()
	applied := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return revokes[name]
	}

	const rounds = 4
	twice := 0
	for round := range rounds {
		leader := c.leader(ctx)
		op, next := leader%3+1, (leader+1)%3+1 // the operator's replica; the next leader
		name := fmt.Sprintf("job-%d", round)
		a, b := newSession(t, ctx, c.node(leader)), newSession(t, ctx, c.node(next))
		la, err := a.Acquire(ctx, name)
		require.NoError(t, err)
		res := acquireAsync(ctx, b, name)
		waitWaiters(t, ctx, c.node(op), name, 1)

		c.net.SetLink(c.members[leader], c.members[op], transport.LinkFault{Delay: 500 * time.Millisecond})
		revoked := make(chan error, 1)
		go func() { revoked <- c.node(op).Revoke(ctx, name) }()
		got := <-res // the leader and the next have applied the revoke
		require.NoError(t, got.err)
		require.NoError(t, c.node(leader).TransferLeadership(ctx, "", next))
		require.NoError(t, <-revoked)
		c.net.Heal()

		<-la.Done()
		require.ErrorIs(t, la.Err(), ErrRevoked)
		requireStillHolds(t, ctx, c, name, got.l, b.ID())
		require.NoError(t, got.l.Release(ctx))
		require.NoError(t, a.Close(ctx))
		require.NoError(t, b.Close(ctx))
		if applied(name) >= 2 {
			twice++
		}
		t.Logf("round %d: leader %d -> %d, operator %d: the revoke applied %d times", round, leader, next, op, applied(name))
	}
	require.Positive(t, twice, "no round's revoke was proposed twice: the test did not test the retry")
}
