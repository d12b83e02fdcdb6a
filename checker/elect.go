package checker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencelock/fencelock"
)

// electionNames are the elections the election clients campaign in; there
// are more candidates than elections, so candidates queue behind leaders.
var electionNames = []string{"primary/a", "primary/b"}

// electionClients campaign in every scenario, besides the lock clients;
// observers watch the elections (observe.go).
const electionClients, observers = 4, 4

// termSteps is how many fenced writes, each followed by a proclamation, a
// leader makes per term, termGap apart: a term lasts about a quarter of the
// TTL or more, so faults catch leaders in the middle of their terms.
const termSteps = 4

func termGap(ttl time.Duration) time.Duration { return ttl / 30 }

// electionKey is an election's name in the history, the beliefs and the
// Fencer: elections are a namespace of their own, apart from locks.
func electionKey(name string) string { return electionPrefix + name }

const electionPrefix = "election:"

// campaignLoop is an election client's life: now and then read the leader,
// campaign, and as leader make fenced writes with the term's epoch and
// proclaim a new value after each, checking Done before each step; then
// resign.
func (c *client) campaignLoop(ctx context.Context) {
	for ctx.Err() == nil {
		if !c.ensureSession(ctx) {
			continue
		}
		name := electionNames[c.rng.IntN(len(electionNames))]
		if c.rng.IntN(2) == 0 {
			c.readLeader(ctx, name)
		}
		key := electionKey(name)
		value := c.nextValue()
		kind := OpCampaign
		if c.rng.IntN(4) == 0 {
			kind = OpTryCampaign
		}
		i := c.e.h.begin(Op{Client: c.id, Node: c.node, Kind: kind, Lock: key, Session: c.sess.ID(), Value: value})
		// Candidates wait for the terms before theirs: a leader cut off
		// keeps its term until the group expires its session.
		actx, cancel := context.WithTimeout(c.e.h.track(ctx, i), 4*c.e.ttl)
		var l *fencelock.Leadership
		var err error
		if kind == OpTryCampaign {
			l, err = c.sess.TryCampaign(actx, name, value)
		} else {
			l, err = c.sess.Campaign(actx, name, value)
		}
		cancel()
		if errors.Is(err, fencelock.ErrElectionTaken) {
			c.e.h.end(i, Locked, 0)
			c.sleep(ctx, time.Duration(1+c.rng.IntN(10))*time.Millisecond)
			continue
		}
		if err != nil {
			c.e.h.end(i, Unknown, 0)
			c.sleep(ctx, 20*time.Millisecond)
			continue
		}
		c.e.h.end(i, Granted, l.Token())
		c.held = c.e.granted(c, &belief{name: key, token: l.Token(), done: l.Done(), lead: l})
		if c.term(ctx) {
			c.release(ctx)
		}
	}
}

// nextValue returns a value of this client that no earlier one equals; its
// number rises, so an observer can tell the order of one term's values.
func (c *client) nextValue() string {
	c.n++
	return fmt.Sprintf("c%d/%d", c.id, c.n)
}

// valueOrder returns the number of a value made by nextValue.
func valueOrder(v string) (client, n int, ok bool) {
	_, err := fmt.Sscanf(v, "c%d/%d", &client, &n)
	return client, n, err == nil
}

// term is one term of leadership: a fenced write and a proclamation per
// step. It reports whether the client should resign now.
func (c *client) term(ctx context.Context) bool {
	b := c.held
	return c.steps(ctx, termSteps, termGap(c.e.ttl), func() bool { return c.write(b) && c.proclaim(ctx, b) })
}

// proclaim replaces the leader's value; false if the group refused it or
// the outcome is unknown.
func (c *client) proclaim(ctx context.Context, b *belief) bool {
	value := c.nextValue()
	i := c.e.h.begin(Op{Client: c.id, Node: c.node, Kind: OpProclaim, Lock: b.name, Session: c.sess.ID(),
		Token: b.token, Value: value})
	// A leader acts for as long as its term lasts: the call gives up when
	// Done closes, not after a timeout shorter than the TTL, so a leader
	// that never learns its term ended goes on acting, as it would.
	pctx, cancel := termContext(c.e.h.track(ctx, i), b.done, 4*c.e.ttl)
	err := b.lead.Proclaim(pctx, value)
	cancel()
	switch {
	case err == nil:
		c.e.h.end(i, OK, 0)
		return true
	case errors.Is(err, fencelock.ErrNotLeader) && b.lead.Err() == nil:
		// The group refused it: a term that Done had not yet ended locally
		// is refused only by the group. Once Done is closed, Proclaim
		// refuses without asking, and the refusal says nothing of the group.
		c.e.h.end(i, NotHeld, 0)
	default:
		c.e.h.end(i, Unknown, 0)
	}
	return false
}

// termContext returns a context that ends with ctx, when done closes, or
// after d.
func termContext(ctx context.Context, done <-chan struct{}, d time.Duration) (context.Context, context.CancelFunc) {
	tctx, cancel := context.WithTimeout(ctx, d)
	go func() {
		select {
		case <-done:
			cancel()
		case <-tctx.Done():
		}
	}()
	return tctx, cancel
}

// readLeader reads the election's leader, linearizably, from the client's
// replica; a read that fails is not recorded (it changed nothing).
func (c *client) readLeader(ctx context.Context, name string) {
	n := c.e.c.Node(c.node)
	if n == nil {
		return
	}
	call := c.e.h.now()
	rctx, cancel := context.WithTimeout(ctx, c.e.opTimeout)
	info, err := n.Leader(rctx, name)
	cancel()
	if err != nil && !errors.Is(err, fencelock.ErrNoLeader) {
		return
	}
	c.e.h.add(leaderOp(c.id, c.node, name, info, call, c.e.h.now()))
}

// leaderOp is the record of a Leader read that returned info.
func leaderOp(client int, node uint64, name string, info fencelock.LeaderInfo, call, ret int64) Op {
	return Op{Client: client, Node: node, Kind: OpLeader, Lock: electionKey(name), Outcome: OK,
		Held: info.Token != 0, Session: info.SessionID, Token: info.Token, Value: info.Value, Call: call, Return: ret,
		LeaderName: info.SessionName, ElectedAt: info.ElectedAt, LeaderPart: info.PartID}
}
