package checker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/clock"
)

// keeper renews a session made WithExternalKeepAlive, as the heartbeats of
// a client in another process would reach its replica: KeepAlive every
// TTL/3, nothing else renews it. External clients (client.external) and
// OneGroupQuorum's second holder use one. It checks KeepAlive's contract: a call
// that returns nil renewed every part that holds something, so none of
// those parts ends by its own deadline before TTL − margin after the
// call began (by the holder's clock). A KeepAlive that answers nil when
// only the default group's part was renewed lets a remote client believe
// in a lock its part in another group is about to give up.
type keeper struct {
	e    *env
	s    *fencelock.Session
	node uint64
	stop chan struct{}
	ctx  context.Context // ends at close, with the call in flight
	end  context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	watched []*fencelock.Lock
	ok      []round   // the calls that returned nil
	closes  []closing // grants found over by their deadline
}

// round is a KeepAlive call that returned nil: when it began, and the
// grants watched that were still open then (a grant taken during the call,
// by a part opened just before it, is not the call's to renew).
type round struct {
	start clock.Instant
	open  map[*fencelock.Lock]bool
}

type closing struct {
	l  *fencelock.Lock
	at clock.Instant
}

func startKeeper(e *env, s *fencelock.Session, node uint64) *keeper {
	k := &keeper{e: e, s: s, node: node, stop: make(chan struct{})}
	k.ctx, k.end = context.WithCancel(context.Background())
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		k.run()
	}()
	return k
}

func (k *keeper) run() {
	t := time.NewTicker(k.e.ttl / 3)
	defer t.Stop()
	for {
		start := k.e.c.Boot(k.node)
		open := map[*fencelock.Lock]bool{}
		k.mu.Lock()
		for _, l := range k.watched {
			if !closed(l.Done()) { // looked at after start: open since before it
				open[l] = true
			}
		}
		k.mu.Unlock()
		ctx, cancel := context.WithTimeout(k.ctx, k.e.ttl)
		err := k.s.KeepAlive(ctx)
		cancel()
		if err == nil {
			k.mu.Lock()
			k.ok = append(k.ok, round{start, open})
			k.mu.Unlock()
		}
		select {
		case <-k.stop:
			return
		case <-k.s.Done():
			return
		case <-t.C:
		}
	}
}

// watch notes when l's Done closes because its part's deadline passed.
func (k *keeper) watch(l *fencelock.Lock) {
	k.mu.Lock()
	k.watched = append(k.watched, l)
	k.mu.Unlock()
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		select {
		case <-l.Done():
		case <-k.stop:
			return
		}
		at := k.e.c.Boot(k.node) // at or after the close
		if errors.Is(l.Err(), fencelock.ErrSessionExpired) {
			k.mu.Lock()
			k.closes = append(k.closes, closing{l, at})
			k.mu.Unlock()
		}
	}()
}

// close stops the keeper and returns how its contract was broken: a grant
// open when a KeepAlive that returned nil began, whose part gave up by its
// own deadline before TTL − margin after that. (The grant was found over
// at or after it closed, so a close found before that bound was before it.)
func (k *keeper) close() []string {
	close(k.stop)
	k.end()
	k.wg.Wait()
	life := k.s.TTL() - k.s.SafetyMargin()
	var out []string
	for _, c := range k.closes {
		for _, r := range k.ok {
			if r.open[c.l] && c.at.Before(r.start.Add(life)) {
				out = append(out, fmt.Sprintf("keep-alive: KeepAlive of session %d returned nil, yet %q, held when the call began, ended by its part's deadline %v after that (TTL − margin is %v)",
					k.s.ID(), c.l.Name(), c.at.Sub(r.start).Round(time.Millisecond), life))
				break
			}
		}
	}
	return out
}

// setKeeper replaces c's keeper (nil: none), closing the old one and
// recording how its contract was broken.
func (c *client) setKeeper(k *keeper) {
	if c.keep != nil {
		for _, v := range c.keep.close() {
			c.e.h.violation("%s", v)
		}
	}
	c.keep = k
}

// sessionOptions are the options of c's sessions beside the TTL: a
// lock-delay for the delayed slow client, WithExternalKeepAlive for an
// external one.
func (c *client) sessionOptions() []fencelock.SessionOption {
	var opts []fencelock.SessionOption
	if c.delay {
		opts = append(opts, fencelock.WithLockDelay(lockDelay))
	}
	if c.external {
		opts = append(opts, fencelock.WithExternalKeepAlive())
	}
	return opts
}
