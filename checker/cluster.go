package checker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/internal/clock"
	"github.com/fencelock/fencelock/internal/testhook"
	"github.com/fencelock/fencelock/transport"
)

// Cluster is a group of replicas in this process, on real data dirs, talking
// over a fault network; every replica takes time from one jumping clock,
// run at the replica's own rate (Scenario.Rates) if it has one.
type Cluster struct {
	Net     *transport.Network
	Clock   *clock.Jumping
	clocks  map[uint64]clock.Clock // each replica's: Clock, or Clock at its rate
	members map[uint64]string
	groups  []fencelock.GroupConfig // beside the default group (groupsFor)
	dir     string
	tune    func(*fencelock.Config)

	mu      sync.Mutex
	nodes   map[uint64]*fencelock.Node
	crashes int    // replicas stopped by Crash
	lost    uint64 // deferred raft states (commit indexes) those crashes lost
}

var discardLog = slog.New(slog.NewTextHandler(io.Discard, nil))

func newCluster(size int, dir string, seed uint64, rates map[uint64]float64, tune func(*fencelock.Config)) (*Cluster, error) {
	c := &Cluster{Net: transport.NewNetwork(seed), Clock: &clock.Jumping{}, members: map[uint64]string{},
		dir: dir, tune: tune, nodes: map[uint64]*fencelock.Node{}, groups: groupsFor(size), clocks: map[uint64]clock.Clock{}}
	for id := uint64(1); id <= uint64(size); id++ {
		c.members[id] = c.Net.Addr(id)
		c.clocks[id] = c.Clock
		if r, ok := rates[id]; ok && r != 1 {
			rc, err := clock.NewRated(c.Clock, r)
			if err != nil {
				return nil, fmt.Errorf("replica %d: %w", id, err)
			}
			c.clocks[id] = rc
		}
	}
	return c, c.StartAll()
}

// Boot reads replica id's clock as its sessions time their deadlines
// (clock.Boot): at its rate, if it has one.
func (c *Cluster) Boot(id uint64) clock.Instant { return clock.Boot(c.clocks[id]) }

// rate returns how fast replica id's clock runs against the real one.
func (c *Cluster) rate(id uint64) float64 {
	if r, ok := c.clocks[id].(*clock.Rated); ok {
		return r.Rate()
	}
	return 1
}

func (c *Cluster) config(id uint64) fencelock.Config {
	cfg := fencelock.Config{ReplicaID: id, Members: c.members, Dir: filepath.Join(c.dir, fmt.Sprint(id)),
		Transport: c.Net, Logger: discardLog}
	for _, g := range c.groups { // a copy each: Start may keep or reorder it
		cfg.Groups = append(cfg.Groups, fencelock.GroupConfig{Name: g.Name, Voters: slices.Clone(g.Voters)})
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	testhook.UseClock(&cfg, c.clocks[id])
	return cfg
}

// IDs returns every replica's ID, running or not.
func (c *Cluster) IDs() []uint64 {
	ids := make([]uint64, 0, len(c.members))
	for id := range c.members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Addr returns replica id's address on the network.
func (c *Cluster) Addr(id uint64) string { return c.members[id] }

// Node returns replica id, or nil if it is stopped.
func (c *Cluster) Node(id uint64) *fencelock.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

// StartAll starts every stopped replica at once.
func (c *Cluster) StartAll() error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs error
	for _, id := range c.IDs() {
		if c.Node(id) != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.Start(id) // outside mu: the starts overlap, as after a power cut
			mu.Lock()
			defer mu.Unlock()
			errs = errors.Join(errs, err)
		}()
	}
	wg.Wait()
	return errs
}

// Start starts replica id on its dir.
func (c *Cluster) Start(id uint64) error { return c.StartWith(id, nil) }

// StartWith starts replica id with its configuration changed by mutate: a
// misconfigured replica.
func (c *Cluster) StartWith(id uint64, mutate func(*fencelock.Config)) error {
	cfg := c.config(id)
	if mutate != nil {
		mutate(&cfg)
	}
	n, err := fencelock.Start(context.Background(), cfg)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return nil
}

// Crash stops replica id as the death of its process would end it
// (testhook.Crash), at a moment when its log store defers a commit index:
// unlike Stop's clean Close, that commit index is lost, so a restart on its
// dir replays the log only up to the last commit index a sync wrote.
func (c *Cluster) Crash(id uint64) { c.crash(id, crashWithin) }

// crash crashes replica id, waiting up to within for a commit index to lose.
func (c *Cluster) crash(id uint64, within time.Duration) {
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if n == nil {
		return
	}
	// The death waits for a commit index the store defers, which a
	// replica in a working group has within a heartbeat or two.
	ctx, cancel := context.WithTimeout(context.Background(), within)
	lost := testhook.Crash(ctx, n)
	cancel()
	c.mu.Lock()
	c.crashes++
	c.lost += lost
	c.mu.Unlock()
}

// crashWithin bounds how long Crash waits for a deferred commit index to
// lose before it crashes the replica anyway.
const crashWithin = 5 * time.Second

// CrashAll crashes every running replica, as a power loss would: the
// followers at once, each when it defers a commit index the leader sent
// it, then the leader, without waiting (with its followers dead, no
// acknowledgement comes to move its commit index).
func (c *Cluster) CrashAll() {
	leader := uint64(0)
	for _, id := range c.IDs() {
		if n := c.Node(id); n != nil && n.Status().IsLeader {
			leader = id
		}
	}
	var wg sync.WaitGroup
	for _, id := range c.IDs() {
		if id == leader {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.crash(id, crashWithin)
		}()
	}
	wg.Wait()
	if leader != 0 {
		c.crash(leader, 0)
	}
}

// Crashes returns how many replicas Crash stopped, and how many deferred
// commit indexes they lost between them.
func (c *Cluster) Crashes() (crashes int, lost uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.crashes, c.lost
}

// Stop closes replica id cleanly (Node.Close): what its log store defers is
// written first. Faults that model a crash use Crash.
func (c *Cluster) Stop(id uint64) {
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if n != nil {
		n.Close()
	}
}

// StopAll stops every replica.
func (c *Cluster) StopAll() {
	for _, id := range c.IDs() {
		c.Stop(id)
	}
}

// Leader waits until the running replicas among ids (all if none) agree on
// a leader that runs, and returns it.
func (c *Cluster) Leader(ctx context.Context, ids ...uint64) (uint64, error) {
	if len(ids) == 0 {
		ids = c.IDs()
	}
	for {
		var leader uint64
		agree, running := true, 0
		for _, id := range ids {
			n := c.Node(id)
			if n == nil {
				continue
			}
			running++
			st := n.Status()
			if leader == 0 {
				leader = st.LeaderID
			}
			agree = agree && st.LeaderID != 0 && st.LeaderID == leader
		}
		if agree && running > 0 && leader != 0 && c.Node(leader) != nil && contains(ids, leader) {
			return leader, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no leader among %v: %w", ids, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func contains(ids []uint64, id uint64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
