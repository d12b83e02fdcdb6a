package checker

import (
	"context"
	"errors"

	"github.com/fencelock/fencelock"
)

// restartOdds: one write step in restartOdds, a client holding a lock (or
// leading) restarts its process in the middle of its critical section (its
// term): it resumes its session on another replica, with the token the old
// process saved, and goes on under the grant the session kept.
const restartOdds = 24

// restartUnlessPinned restarts c unless a fault pinned it; it reports
// whether c still holds the grant.
func (c *client) restartUnlessPinned(ctx context.Context) bool {
	c.restartMu.Lock()
	defer c.restartMu.Unlock()
	if c.pinned {
		return true
	}
	return c.restart(ctx)
}

// pin keeps c on its replica until unpin is called: a restart under way
// finishes first, so that once pin returns, c's beliefs name the replica
// it stays on.
func (c *client) pin() (unpin func()) {
	c.restartMu.Lock()
	c.pinned = true
	c.restartMu.Unlock()
	return func() {
		c.restartMu.Lock()
		c.pinned = false
		c.restartMu.Unlock()
	}
}

// restart resumes c's session on another replica as a restarted process
// would, and records what the resume kept of the grant c holds (Kept). The
// old Session is dropped without being closed: the group tells it its
// session is over at its next keep-alive. It reports whether c still holds
// the grant.
func (c *client) restart(ctx context.Context) bool {
	b := c.held
	id := c.e.otherNode(c.node)
	n := c.e.c.Node(id)
	if n == nil {
		return true // nowhere to restart to: go on as before
	}
	tok := c.sess.Resume()
	i := c.e.h.begin(Op{Client: c.id, Node: id, Kind: OpKept, Lock: b.name, Session: c.sess.ID(), Token: b.token})
	rctx, cancel := context.WithTimeout(ctx, c.e.opTimeout)
	c.setKeeper(nil) // the old process's heartbeats stop with it
	s, err := n.ResumeSession(rctx, tok, c.sessionOptions()...)
	cancel()
	if err != nil {
		// Unknown: the resume may still apply, and the old process's
		// session end with it; either way this process gives the grant up.
		out := Unknown
		if errors.Is(err, fencelock.ErrSessionExpired) {
			out = NotHeld
		}
		c.e.h.endWhy(i, out, err.Error())
		c.e.drop(b)
		c.held = nil
		// The old process is gone too: its session must not live on
		// without a holder. If the resume did apply, the group refuses
		// this close (an old incarnation's), and the resumed session,
		// which nobody renews, expires.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.e.opTimeout)
		_ = c.sess.Close(cctx)
		cancel()
		c.sess = nil
		return false
	}
	c.sess, c.node = s, id
	c.where.Store(id)
	c.e.addSession(s, id)
	if c.external {
		c.setKeeper(startKeeper(c.e, s, id))
	}
	var done <-chan struct{}
	var lock *fencelock.Lock
	var lead *fencelock.Leadership
	if b.lead != nil {
		for _, l := range s.Leaderships() {
			if l.Token() == b.token {
				lead, done = l, l.Done()
			}
		}
	} else {
		for _, l := range s.Locks() {
			if l.Token() == b.token && l.Name() == b.name {
				lock, done = l, l.Done()
			}
		}
	}
	if done == nil && s.Err() != nil {
		// The resumed session was over for its holder already (the resume
		// took longer than TTL − margin, on a lagging replica), and gave
		// its grants up with it: whether the group still holds this one,
		// until the session's close or expiry applies, is not known.
		c.e.h.endWhy(i, Unknown, "resumed, but the session was over for its holder: "+s.Err().Error())
		c.e.drop(b)
		c.held = nil
		return false
	}
	if done == nil {
		c.e.h.endWhy(i, NotHeld, "resumed without it")
		c.e.drop(b)
		c.held = nil
		return false
	}
	c.e.h.end(i, OK, 0)
	c.e.update(b, func(b *belief) { b.done, b.lock, b.lead, b.node = done, lock, lead, id })
	c.e.resumes()
	return true
}
