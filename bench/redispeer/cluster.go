package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// ErrNoReplicas is what the workloads that stop or restart a replica get:
// a single Redis has none to fail over to.
var ErrNoReplicas = errors.New("redispeer: one redis-server, no replicas to stop or fail over to")

// cluster is one redis-server seen as a lockbench.Cluster of one replica,
// its own leader: W1's two placements both reach it.
type cluster struct {
	srv *server

	mu     sync.Mutex
	opened []*redis.Client
}

func start(ctx context.Context, dir string) (lockbench.Cluster, error) {
	srv, err := startServer(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &cluster{srv: srv}, nil
}

func (c *cluster) Replicas() int { return 1 }

// NewClient opens a go-redis client of its own (its own connection pool, as
// one client process would have) and a redsync over it. ttl is each lock's
// expiry: redsync has no session, a lock is its own lease.
func (c *cluster) NewClient(ctx context.Context, _ int, ttl time.Duration) (lockbench.Client, error) {
	cl := redis.NewClient(&redis.Options{Addr: c.srv.addr})
	if err := cl.Ping(ctx).Err(); err != nil {
		cl.Close()
		return nil, err
	}
	c.mu.Lock()
	c.opened = append(c.opened, cl)
	c.mu.Unlock()
	return &client{cl: cl, rs: redsync.New(goredis.NewPool(cl)), ttl: ttl}, nil
}

func (c *cluster) Leader(ctx context.Context) (int, error) { return 0, nil }

func (c *cluster) Stop(int) error { return ErrNoReplicas }

func (c *cluster) Close() error {
	c.mu.Lock()
	for _, cl := range c.opened {
		cl.Close()
	}
	c.opened = nil
	c.mu.Unlock()
	c.srv.stop()
	return nil
}

type client struct {
	cl  *redis.Client
	rs  *redsync.Redsync
	ttl time.Duration
}

// Acquire takes the lock with redsync's Mutex as shipped (SET NX PX with a
// random value; on failure a retry after 50-250 ms, redsync's default
// delay), except that it keeps trying until ctx ends, as the other systems'
// Acquire blocks until granted: no queue, so the grants are not in order.
func (c *client) Acquire(ctx context.Context, name string) (lockbench.Held, error) {
	m := c.rs.NewMutex(name, redsync.WithExpiry(c.ttl), redsync.WithTries(math.MaxInt32))
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return nil, err
	}
	return held{m}, nil
}

// StopHeartbeats: a redsync lock has no session to stop; a lock expires on
// its own after its expiry unless Extend is called (W5 is not run).
func (c *client) StopHeartbeats(context.Context) (func() time.Time, error) {
	return nil, errors.ErrUnsupported
}

func (c *client) Close(context.Context) error { return c.cl.Close() }

type held struct{ m *redsync.Mutex }

// Token is 0: redsync has no fencing token (the lock's value is random, not
// ordered), which lockbench's W3 reports as untokened grants.
func (held) Token() uint64 { return 0 }

// Release deletes the key if it still holds this grant's value (redsync's
// compare-and-delete script).
func (h held) Release(ctx context.Context) error {
	ok, err := h.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = redsync.ErrLockAlreadyExpired
	}
	return err
}
