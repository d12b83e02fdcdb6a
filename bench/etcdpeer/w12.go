package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/fencelock/fencelock/bench/lockbench"
)

// W12's etcd side: the same members, each client a clientv3 with the three
// endpoints and a concurrency.Session, each lock a concurrency.Mutex.
// Terminate is the member's graceful stop (what etcd does on SIGTERM:
// leadership handed over, then stop); Kill stops its raft at once, with no
// handover (Server.HardStop), then closes its listeners so that its
// restart can bind them: the in-process stand-in for SIGKILL. etcd has no
// counterpart of the fencelock lock command or of the Python client, so
// this Service has no Externals.
type service struct{ *cluster }

func startService(ctx context.Context, dir string) (*service, error) {
	c, err := start(ctx, dir)
	if err != nil {
		return nil, err
	}
	return &service{c.(*cluster)}, nil
}

func (s *service) Terminate(ctx context.Context, i int) error { return s.StopGracefully(ctx, i) }

func (s *service) Kill(_ context.Context, i int) error {
	s.mu.Lock()
	e := s.etcds[i]
	s.etcds[i] = nil
	s.mu.Unlock()
	if e == nil {
		return fmt.Errorf("member %d already stopped", i)
	}
	e.Server.HardStop()
	e.Close()
	return nil
}

func (s *service) Open(ctx context.Context, ttl time.Duration) (lockbench.ServiceSession, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.clients, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.opened = append(s.opened, cli)
	s.mu.Unlock()
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(max(int(ttl/time.Second), 1)))
	if err != nil {
		return nil, err
	}
	return &etcdSession{s: sess}, nil
}

type etcdSession struct{ s *concurrency.Session }

func (e *etcdSession) Acquire(ctx context.Context, name string) (lockbench.ServiceGrant, error) {
	m := concurrency.NewMutex(e.s, name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return etcdGrant{m: m, s: e.s}, nil
}

func (e *etcdSession) TryAcquire(ctx context.Context, name string) (lockbench.ServiceGrant, error) {
	m := concurrency.NewMutex(e.s, name)
	if err := m.TryLock(ctx); err != nil {
		if errors.Is(err, concurrency.ErrLocked) {
			return nil, fmt.Errorf("%w: %w", lockbench.ErrHeld, err)
		}
		return nil, err
	}
	return etcdGrant{m: m, s: e.s}, nil
}

// Done is closed when the session's lease is no longer kept alive: it
// expired (or was revoked), or the keep-alive gave up.
func (e *etcdSession) Done() <-chan struct{} { return e.s.Done() }

func (e *etcdSession) Err() error {
	select {
	case <-e.s.Done():
		return errors.New("etcd session done: its lease expired, was revoked, or its keep-alive ended")
	default:
		return nil
	}
}

func (e *etcdSession) Close(context.Context) error { return e.s.Close() }

// etcdGrant: a Mutex's grant ends with its session's lease; its token is
// the revision the lock was granted at (as in cluster.go).
type etcdGrant struct {
	m *concurrency.Mutex
	s *concurrency.Session
}

func (g etcdGrant) Token() uint64                     { return uint64(g.m.Header().Revision) }
func (g etcdGrant) Done() <-chan struct{}             { return g.s.Done() }
func (g etcdGrant) Release(ctx context.Context) error { return g.m.Unlock(ctx) }
