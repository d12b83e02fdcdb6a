package session

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencelock/fencelock/internal/replica"
)

// contention is what one group's router counts of this process's own lock
// calls: how long Acquire calls waited for their grants, how long the
// grants were held, and how the calls ended. Each figure is an atomic, so
// recording costs a few adds and no allocation; the root's Stats reads
// them.
type contention struct {
	wait, hold                  histogram
	grants, timeouts, cancelled atomic.Uint64
}

// contentionBounds are the upper bounds of the wait and hold buckets: from
// a grant at once to a hold of an hour (a job's lock).
var contentionBounds = [...]time.Duration{
	time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
	30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour,
}

// histogram is a fixed-bucket histogram updated with atomics.
type histogram struct {
	buckets [len(contentionBounds) + 1]atomic.Uint64 // the last counts the rest
	sum     atomic.Int64                             // nanoseconds
}

func (h *histogram) observe(d time.Duration) {
	i := 0
	for i < len(contentionBounds) && d > contentionBounds[i] {
		i++
	}
	h.buckets[i].Add(1)
	h.sum.Add(int64(d))
}

// snapshot returns the histogram with cumulative bucket counts.
func (h *histogram) snapshot() replica.Histogram {
	out := replica.Histogram{Buckets: make([]replica.Bucket, len(contentionBounds))}
	var total uint64
	for i, b := range contentionBounds {
		total += h.buckets[i].Load()
		out.Buckets[i] = replica.Bucket{UpperBound: b, Count: total}
	}
	out.Count = total + h.buckets[len(contentionBounds)].Load()
	out.Sum = time.Duration(h.sum.Load())
	return out
}

// ended records how an acquire call ended: granted after waited, or ended
// by its context. Other failures (ErrLocked of a Try, a lost session) are
// not contention and are not counted.
func (c *contention) ended(err error, waited time.Duration) {
	switch {
	case err == nil:
		c.grants.Add(1)
		c.wait.observe(waited)
	case errors.Is(err, context.DeadlineExceeded):
		c.timeouts.Add(1)
	case errors.Is(err, context.Canceled):
		c.cancelled.Add(1)
	}
}

// Contention are the figures of this process's lock calls in one group
// (the root's Contention documents them).
type Contention struct {
	Wait, Hold                      replica.Histogram
	Grants, Timeouts, Cancellations uint64
}

// Contention returns the figures of this process's lock calls in group;
// zero for a group no call named.
func (h *Host) Contention(group string) Contention {
	rt := h.routerOf(group)
	if rt == nil {
		return Contention{Wait: (&histogram{}).snapshot(), Hold: (&histogram{}).snapshot()}
	}
	c := &rt.contention
	return Contention{Wait: c.wait.snapshot(), Hold: c.hold.snapshot(),
		Grants: c.grants.Load(), Timeouts: c.timeouts.Load(), Cancellations: c.cancelled.Load()}
}

// leading counts, by election, the leaderships this process's sessions
// hold; an election is in it from the first Campaign naming it, so that
// its gauge reads 0 while this process only campaigns. It never shrinks:
// it is bounded by the elections the process campaigns in.
type leading struct {
	mu sync.Mutex
	by map[leadKey]*atomic.Int64
}

type leadKey struct{ group, name string }

// of returns the count of election name of group, made on first use.
func (l *leading) of(group, name string) *atomic.Int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := leadKey{group, name}
	n := l.by[k]
	if n == nil {
		if l.by == nil {
			l.by = make(map[leadKey]*atomic.Int64)
		}
		n = new(atomic.Int64)
		l.by[k] = n
	}
	return n
}

// Leading is one election this process campaigns in, and whether one of
// its sessions leads it now.
type Leading struct {
	Group, Name string
	Leader      bool
}

// Leading returns the elections this process's sessions have campaigned
// in, by group and name.
func (h *Host) Leading() []Leading {
	l := &h.leading
	l.mu.Lock()
	out := make([]Leading, 0, len(l.by))
	for k, n := range l.by {
		out = append(out, Leading{Group: k.group, Name: k.name, Leader: n.Load() > 0})
	}
	l.mu.Unlock()
	slices.SortFunc(out, func(a, b Leading) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
