package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/bench/lockbench"
	"github.com/fencelock/fencelock/internal/testhook"
)

// cluster is a fencelock group of replicas in this process, on loopback
// ports, each with its own data dir on local disk, durability as shipped.
type cluster struct {
	cfgs  []fencelock.Config
	mu    sync.Mutex
	nodes []*fencelock.Node // nil once stopped
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// freeMembers returns n free loopback addresses, as members 1..n. The
// listeners stay open until all are taken: closed one by one, the kernel
// may hand the same port out twice.
func freeMembers(n int) (map[uint64]string, error) {
	members := map[uint64]string{}
	for id := uint64(1); id <= uint64(n); id++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		members[id] = l.Addr().String()
	}
	return members, nil
}

// starter returns a lockbench.Starter of size replicas; tune adjusts each
// replica's Config (nil: the defaults).
func starter(size int, tune func(*fencelock.Config)) lockbench.Starter {
	return func(ctx context.Context, dir string) (lockbench.Cluster, error) {
		return startCluster(ctx, dir, size, tune)
	}
}

func startCluster(ctx context.Context, dir string, size int, tune func(*fencelock.Config)) (*cluster, error) {
	members, err := freeMembers(size)
	if err != nil {
		return nil, err
	}
	c := &cluster{nodes: make([]*fencelock.Node, size)}
	for i := range size {
		cfg := fencelock.Config{ReplicaID: uint64(i + 1), Members: members,
			Dir: filepath.Join(dir, fmt.Sprint(i+1)), Logger: quiet}
		if tune != nil {
			tune(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i := range size {
		wg.Go(func() { c.nodes[i], errs[i] = fencelock.Start(ctx, c.cfgs[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *cluster) Replicas() int { return len(c.cfgs) }

func (c *cluster) node(i int) *fencelock.Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

func (c *cluster) NewClient(ctx context.Context, i int, ttl time.Duration) (lockbench.Client, error) {
	n := c.node(i)
	if n == nil {
		return nil, fmt.Errorf("replica %d is stopped", i)
	}
	s, err := n.NewSession(ctx, fencelock.WithTTL(ttl))
	if err != nil {
		return nil, err
	}
	return &client{s: s, c: c, i: i}, nil
}

// Leader waits until the running replicas agree on a leader. Polling the
// replicas' local view is all there is: no event says "all agree".
func (c *cluster) Leader(ctx context.Context) (int, error) {
	for {
		c.mu.Lock()
		var leader uint64
		agree := true
		for _, n := range c.nodes {
			if n == nil {
				continue
			}
			st := n.Status()
			if leader == 0 {
				leader = st.LeaderID
			}
			agree = agree && st.LeaderID != 0 && st.LeaderID == leader
		}
		alive := leader != 0 && c.nodes[leader-1] != nil
		c.mu.Unlock()
		if agree && alive {
			return int(leader - 1), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Stop stops replica i hard, as a crash would: it does not hand its
// leadership over (W4 measures the election that follows a crash).
func (c *cluster) Stop(i int) error {
	n, err := c.take(i)
	if err != nil {
		return err
	}
	// The crash waits for a commit index its log store defers, which W4's
	// load brings at once; a second at most.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	testhook.Crash(ctx, n)
	return nil
}

// StopGracefully stops replica i with Node.Close, which hands the
// leadership of its groups over first (W11).
func (c *cluster) StopGracefully(_ context.Context, i int) error {
	n, err := c.take(i)
	if err != nil {
		return err
	}
	return n.Close()
}

func (c *cluster) take(i int) (*fencelock.Node, error) {
	c.mu.Lock()
	n := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if n == nil {
		return nil, fmt.Errorf("replica %d already stopped", i)
	}
	return n, nil
}

// Restart starts replica i again on its dir, and returns once it knows a
// leader and has applied what the other replicas have applied now (W11's
// "caught up"). The target is read again at every check: under W11's
// steady writes only a replica the leader replicates to keeps up with it,
// while its log replayed from Dir can pass a target read once at the
// start, before the leader sent it anything (a leader that found it
// unreachable while it was down resumes slowly).
func (c *cluster) Restart(ctx context.Context, i int) error {
	n, err := fencelock.Start(ctx, c.cfgs[i])
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.nodes[i] = n
	c.mu.Unlock()
	for {
		c.mu.Lock()
		var target uint64
		for _, o := range c.nodes {
			if o != nil && o != n {
				target = max(target, o.Status().AppliedIndex)
			}
		}
		c.mu.Unlock()
		if st := n.Status(); st.LeaderID != 0 && st.AppliedIndex >= target {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond): // the local view has no event for "applied up to"
		}
	}
}

func (c *cluster) Close() error {
	c.mu.Lock()
	nodes := c.nodes
	c.nodes = make([]*fencelock.Node, len(nodes))
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range nodes {
		if n != nil {
			wg.Go(func() { n.Close() })
		}
	}
	wg.Wait()
	return nil
}

type client struct {
	s      *fencelock.Session
	frozen bool

	c      *cluster
	i      int                   // its replica
	resume fencelock.ResumeToken // set by Suspend
}

// Suspend keeps the session's resume token: the session survives its
// replica's graceful stop at the group (Node.Close does not end it there).
func (c *client) Suspend(context.Context) error {
	c.resume = c.s.Resume()
	return nil
}

// Resume takes the session back on the restarted replica, with its locks.
func (c *client) Resume(ctx context.Context) error {
	n := c.c.node(c.i)
	if n == nil {
		return fmt.Errorf("replica %d is stopped", c.i)
	}
	s, err := n.ResumeSession(ctx, c.resume)
	if err != nil {
		return err
	}
	c.s = s
	return nil
}

func (c *client) Acquire(ctx context.Context, name string) (lockbench.Held, error) {
	l, err := c.s.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return held{l}, nil
}

// AcquireExclusive is Acquire: a name is one lock with two modes.
func (c *client) AcquireExclusive(ctx context.Context, name string) (lockbench.Held, error) {
	return c.Acquire(ctx, name)
}

func (c *client) AcquireShared(ctx context.Context, name string) (lockbench.Held, error) {
	l, err := c.s.AcquireShared(ctx, name)
	if err != nil {
		return nil, err
	}
	return held{l}, nil
}

func (c *client) AcquireSemaphore(ctx context.Context, name string, permits int) (lockbench.Held, error) {
	l, err := c.s.AcquireSemaphore(ctx, name, permits)
	if err != nil {
		return nil, err
	}
	return held{l}, nil
}

// StopHeartbeats freezes the session: its keep-alives stop, as in a crashed
// or paused process, and nothing closes it.
func (c *client) StopHeartbeats(context.Context) (func() time.Time, error) {
	testhook.Freeze(c.s)
	c.frozen = true
	return func() time.Time { return testhook.LastKeepAlive(c.s) }, nil
}

func (c *client) Close(ctx context.Context) error {
	if c.frozen {
		testhook.Thaw(c.s)
	}
	return c.s.Close(ctx)
}

var _ lockbench.Recipes = (*client)(nil)

type held struct{ l *fencelock.Lock }

func (h held) Token() uint64                     { return h.l.Token() }
func (h held) Release(ctx context.Context) error { return h.l.Release(ctx) }
