package main

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	recipe "go.etcd.io/etcd/client/v3/experimental/recipes"

	"github.com/fencelock/fencelock/bench/lockbench"
)

var _ lockbench.Recipes = (*client)(nil)

// AcquireShared and AcquireExclusive take etcd's read-write lock recipe
// (experimental/recipes RWMutex: a key per request under the name, each
// waiting for the deletion of the last conflicting key created before it).
// It takes no context: its calls run under context.TODO, so W7's figures
// are for calls without a deadline, as W7 makes them.
func (c *client) AcquireShared(_ context.Context, name string) (lockbench.Held, error) {
	m := recipe.NewRWMutex(c.s, name)
	if err := m.RLock(); err != nil {
		return nil, err
	}
	return released(m.RUnlock), nil
}

func (c *client) AcquireExclusive(_ context.Context, name string) (lockbench.Held, error) {
	m := recipe.NewRWMutex(c.s, name)
	if err := m.Lock(); err != nil {
		return nil, err
	}
	return released(m.Unlock), nil
}

// released is a grant without a token (etcd's recipes expose none), given
// back by unlock.
type released func() error

func (released) Token() uint64                   { return 0 }
func (r released) Release(context.Context) error { return r() }

// AcquireSemaphore is a counting semaphore by hand: etcd has no semaphore
// recipe. It is etcd's lock recipe with a count, FIFO by create revision:
// the request puts a key of its own under name, with the session's lease
// (so a crashed holder's permit is freed by lease expiry), and holds a
// permit once fewer than permits keys created before it remain. Keys
// created before it only go away, so it counts them once, then watches
// their deletions (from the revision of the count, with the deleted key's
// previous value to tell its create revision). At most permits requests
// hold at once: a holder had fewer than permits older keys when it was
// admitted, and no older key can appear later. Every deletion under the
// name reaches every waiter's watch, but only as an event: the waiters
// issue no requests until admitted.
func (c *client) AcquireSemaphore(ctx context.Context, name string, permits int) (lockbench.Held, error) {
	key := fmt.Sprintf("%s/%x", name, c.s.Lease())
	put, err := c.cli.Put(ctx, key, "", clientv3.WithLease(c.s.Lease()))
	if err != nil {
		return nil, err
	}
	mine := put.Header.Revision
	free := func() error {
		_, err := c.cli.Delete(context.WithoutCancel(ctx), key)
		return err
	}
	// The keys themselves, not WithCountOnly: etcd applies the revision
	// filters to the keys it returns, not to the count.
	ahead, err := c.cli.Get(ctx, name+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithMaxCreateRev(mine-1))
	if err != nil {
		_ = free()
		return nil, err
	}
	n := int64(len(ahead.Kvs))
	if n < int64(permits) {
		return released(free), nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range c.cli.Watch(wctx, name+"/", clientv3.WithPrefix(), clientv3.WithPrevKV(),
		clientv3.WithFilterPut(), clientv3.WithRev(ahead.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			_ = free()
			return nil, err
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE && ev.PrevKv != nil && ev.PrevKv.CreateRevision < mine {
				n--
			}
		}
		if n < int64(permits) {
			return released(free), nil
		}
	}
	_ = free()
	return nil, fmt.Errorf("semaphore %q: watch ended: %w", name, context.Cause(ctx))
}
