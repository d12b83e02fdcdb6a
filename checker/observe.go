package checker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// observer is an application process that follows one election with
// Node.Observe on its replica (another one while its home is down) and
// records every value delivered, across re-subscriptions: when its replica
// stops, the stream closes and it observes again elsewhere.
type observer struct {
	id   int
	e    *env
	name string
	home uint64

	mu      sync.Mutex
	seen    []Observation
	changed chan struct{} // closed and replaced on every delivery
}

// Observation is one value an observer received.
type Observation struct {
	Info   fencelock.LeaderInfo
	Node   uint64 // the replica whose stream delivered it
	Stream int    // which subscription of the observer
	At     int64
}

func newObserver(id int, e *env, name string, home uint64) *observer {
	return &observer{id: id, e: e, name: name, home: home, changed: make(chan struct{})}
}

func (o *observer) run(ctx context.Context) {
	for stream := 0; ctx.Err() == nil; stream++ {
		n, id := o.e.pickNode(o.home)
		if n == nil {
			o.pace(ctx)
			continue
		}
		for info := range n.Observe(ctx, o.name) {
			o.record(Observation{Info: info, Node: id, Stream: stream, At: o.e.h.now()})
		}
		// The stream closed: its replica stopped (or is stopping), or ctx
		// ended. Wait a little before asking again, not to spin on a
		// replica that is closing.
		o.pace(ctx)
	}
}

func (o *observer) pace(ctx context.Context) {
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func (o *observer) record(ob Observation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, ob)
	close(o.changed)
	o.changed = make(chan struct{})
}

// last returns the last value delivered (ok false if none yet) and the
// channel closed on the next delivery.
func (o *observer) last() (ob Observation, ok bool, changed <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) > 0 {
		ob, ok = o.seen[len(o.seen)-1], true
	}
	return ob, ok, o.changed
}

func (o *observer) observations() []Observation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]Observation(nil), o.seen...)
}

// observerBound is how long after the final read every observer must have
// been delivered the final leader.
const observerBound = 20 * time.Second

// observersCatchUp checks, after the final reads, that every observer's
// last delivered value is the final leader of its election: observers are
// never left on a stale value.
func observersCatchUp(ctx context.Context, e *env, reads []Op) {
	final := map[string]fencelock.LeaderInfo{}
	for _, r := range reads {
		if r.Kind == OpLeader {
			final[r.Lock] = leaderInfo(r)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, observerBound)
	defer cancel()
	for _, o := range e.observers {
		want := final[electionKey(o.name)]
		for {
			ob, ok, changed := o.last()
			if ok && sameLeader(ob.Info, want) {
				break
			}
			select {
			case <-changed:
				continue
			case <-wctx.Done():
			}
			got := "nothing"
			if ok {
				got = fmt.Sprintf("%+v", ob.Info)
			}
			e.h.violation("observer %d of %q was left on %s, %v after the final read %+v",
				o.id, o.name, got, observerBound, want)
			break
		}
	}
}

// sameLeader reports whether an observer's value is the read's: the same
// term (token, session, value) named the same way and elected at the same
// instant (times compared with Equal, as their locations may differ).
func sameLeader(a, b fencelock.LeaderInfo) bool {
	at, bt := a.ElectedAt, b.ElectedAt
	a.ElectedAt, b.ElectedAt = time.Time{}, time.Time{}
	return a == b && at.Equal(bt)
}

// leaderInfo is what Observe reports for the leader a Leader read saw.
func leaderInfo(r Op) fencelock.LeaderInfo {
	name := strings.TrimPrefix(r.Lock, electionPrefix)
	if !r.Held {
		return fencelock.LeaderInfo{Election: name}
	}
	return fencelock.LeaderInfo{Election: name, Value: r.Value, Token: r.Token, SessionID: r.Session,
		PartID: r.LeaderPart, SessionName: r.LeaderName, ElectedAt: r.ElectedAt}
}
