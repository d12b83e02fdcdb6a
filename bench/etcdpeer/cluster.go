package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/bench/lockbench"
)

const members = 3

// cluster is an embedded etcd cluster: members in this process, on loopback,
// each with its own data dir, etcd's defaults otherwise (heartbeat 100ms,
// election 1s, fsync on every commit).
type cluster struct {
	mu      sync.Mutex
	etcds   []*embed.Etcd // nil once stopped
	clients []string      // client URL per member
	stopped []*embed.Etcd // hard-stopped, closed at the end
	opened  []*clientv3.Client
	cfgs    []*embed.Config // per member, to restart it on its dir (W11)
}

func start(ctx context.Context, dir string) (lockbench.Cluster, error) {
	c := &cluster{etcds: make([]*embed.Etcd, members), cfgs: make([]*embed.Config, members)}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var peers, initial []string
	for i := range members {
		pp, err := lockbench.FreePort()
		if err != nil {
			return nil, err
		}
		cp, err := lockbench.FreePort()
		if err != nil {
			return nil, err
		}
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", pp))
		c.clients = append(c.clients, fmt.Sprintf("http://127.0.0.1:%d", cp))
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	errs := make([]error, members)
	var wg sync.WaitGroup
	for i := range members {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		pu, _ := url.Parse(peers[i])
		cu, _ := url.Parse(c.clients[i])
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.LogLevel = "error"
		cfg.LogOutputs = []string{filepath.Join(dir, cfg.Name+".log")}
		c.cfgs[i] = cfg
		wg.Go(func() {
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				errs[i] = err
				return
			}
			select {
			case <-e.Server.ReadyNotify():
				c.etcds[i] = e
			case <-time.After(60 * time.Second):
				e.Close()
				errs[i] = fmt.Errorf("member %d not ready", i)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *cluster) Replicas() int { return members }

func (c *cluster) NewClient(ctx context.Context, i int, ttl time.Duration) (lockbench.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.clients[i]},
		DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.opened = append(c.opened, cli)
	c.mu.Unlock()
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	return &client{cli: cli, s: s, mutexes: map[string]*concurrency.Mutex{}}, nil
}

func (c *cluster) Leader(ctx context.Context) (int, error) {
	for {
		c.mu.Lock()
		var lead uint64
		agree, found := true, -1
		for i, e := range c.etcds {
			if e == nil {
				continue
			}
			l := uint64(e.Server.Leader())
			if lead == 0 {
				lead = l
			}
			agree = agree && l != 0 && l == lead
			if uint64(e.Server.MemberID()) == l {
				found = i
			}
		}
		c.mu.Unlock()
		if agree && found >= 0 {
			return found, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no leader: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Stop stops member i hard: raft and its peer transport stop at once, with
// no leadership transfer (which etcd's graceful Close would do first).
func (c *cluster) Stop(i int) error {
	c.mu.Lock()
	e := c.etcds[i]
	c.etcds[i] = nil
	c.stopped = append(c.stopped, e)
	c.mu.Unlock()
	e.Server.HardStop()
	return nil
}

// StopGracefully closes member i as etcd does on SIGTERM: the server's
// Stop transfers its leadership to a peer first when it leads
// (etcd-io/etcd#8153), then it stops.
func (c *cluster) StopGracefully(_ context.Context, i int) error {
	c.mu.Lock()
	e := c.etcds[i]
	c.etcds[i] = nil
	c.mu.Unlock()
	if e == nil {
		return fmt.Errorf("member %d already stopped", i)
	}
	e.Close()
	return nil
}

// Restart starts member i again on its data dir and returns once it is
// ready and has applied what the other members have applied now.
func (c *cluster) Restart(ctx context.Context, i int) error {
	cfg := *c.cfgs[i]
	cfg.ClusterState = embed.ClusterStateFlagExisting
	e, err := embed.StartEtcd(&cfg)
	if err != nil {
		return err
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-ctx.Done():
		e.Close()
		return ctx.Err()
	}
	c.mu.Lock()
	c.etcds[i] = e
	c.mu.Unlock()
	// The target is read again at every check, as fencelock's side does.
	target := func() uint64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		var t uint64
		for _, o := range c.etcds {
			if o != nil && o != e {
				t = max(t, o.Server.AppliedIndex())
			}
		}
		return t
	}
	for e.Server.AppliedIndex() < target() || e.Server.Leader() == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond): // no event for "applied up to"
		}
	}
	return nil
}

func (c *cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cli := range c.opened {
		cli.Close()
	}
	var wg sync.WaitGroup
	for _, e := range append(c.etcds, c.stopped...) {
		if e != nil {
			wg.Go(e.Close)
		}
	}
	wg.Wait()
	return nil
}

type client struct {
	cli     *clientv3.Client
	s       *concurrency.Session
	mutexes map[string]*concurrency.Mutex // one per lock name, reused
	mu      sync.Mutex
	last    time.Time
}

func (c *client) Acquire(ctx context.Context, name string) (lockbench.Held, error) {
	c.mu.Lock()
	m := c.mutexes[name]
	if m == nil {
		m = concurrency.NewMutex(c.s, name)
		c.mutexes[name] = m
	}
	c.mu.Unlock()
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return held{m}, nil
}

// StopHeartbeats stops the session's keep-alive loop without revoking the
// lease (Orphan), then renews the lease once more by hand: that renewal is
// the last heartbeat, and its send time is known exactly.
func (c *client) StopHeartbeats(ctx context.Context) (func() time.Time, error) {
	c.s.Orphan()
	sent := time.Now()
	if _, err := c.cli.KeepAliveOnce(ctx, c.s.Lease()); err != nil {
		return nil, err
	}
	return func() time.Time { return sent }, nil
}

func (c *client) Close(ctx context.Context) error {
	err := c.s.Close()
	c.cli.Close()
	return err
}

type held struct{ m *concurrency.Mutex }

func (h held) Token() uint64                     { return uint64(h.m.Header().Revision) }
func (h held) Release(ctx context.Context) error { return h.m.Unlock(ctx) }
