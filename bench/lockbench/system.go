// Package lockbench runs the lockbench workloads (W1-W5, W7, W8, W11 and W12 of WORKLOADS.md)
// against any lock service that implements Cluster, and prints one JSON line
// per workload. It imports nothing but the standard library, so that both
// fencelock's benchmark and the etcd peer (a module of its own) drive the
// same code and their figures compare.
package lockbench

import (
	"context"
	"time"
)

// Cluster is a running group of replicas in this process.
type Cluster interface {
	// Replicas is the number of replicas, indexed from 0.
	Replicas() int
	// NewClient opens one session (lease) with the given TTL on replica i.
	NewClient(ctx context.Context, replica int, ttl time.Duration) (Client, error)
	// Leader returns the index of the consensus leader once the running
	// replicas agree on one.
	Leader(ctx context.Context) (int, error)
	// Stop stops replica i hard (its process would exit).
	Stop(replica int) error
	// Close stops everything still running.
	Close() error
}

// Client is one session of a worker.
type Client interface {
	// Acquire blocks until the lock is granted.
	Acquire(ctx context.Context, name string) (Held, error)
	// StopHeartbeats stops the session's keep-alives without closing it, as a
	// crash would. The returned function tells, when called later, when the
	// last keep-alive the service acknowledged was sent.
	StopHeartbeats(ctx context.Context) (lastHeartbeat func() time.Time, err error)
	// Close ends the session.
	Close(ctx context.Context) error
}

// Held is one grant.
type Held interface {
	Token() uint64
	Release(ctx context.Context) error
}

// Starter starts a fresh cluster in dir (each workload gets its own).
type Starter func(ctx context.Context, dir string) (Cluster, error)
