package shard

import (
	"sync"

	"github.com/fencelock/fencelock/lockapi"
)

// callFence lets a replica stop only once no call into Dragonboat that
// reads the shard's state machine is in flight: Dragonboat destroys a
// stopped shard's state machine without the lock its lookups take, so a
// lookup in flight then is a data race inside Dragonboat (the race
// detector reports it: StaleRead or SyncRead against NodeHost.Close or
// StopShard). Proposals need none: stop closes the proposer first, which
// waits for its calls into Dragonboat.
//
// A call holds the fence shared (one RLock on the hot path) for as long as
// it is inside Dragonboat, never across a call that enters again; close
// waits for them and turns every later call away.
type callFence struct {
	mu     sync.RWMutex
	closed bool
}

// enter admits a call, or reports false once close began; a call admitted
// must exit.
func (f *callFence) enter() bool {
	f.mu.RLock()
	if f.closed {
		f.mu.RUnlock()
		return false
	}
	return true
}

func (f *callFence) exit() { f.mu.RUnlock() }

// close waits for the calls admitted to exit and admits no more. It is
// idempotent.
func (f *callFence) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

// stoppedErr is what a call the fence turned away fails with: why this
// replica stopped taking part (its Dir is an older copy of itself), or
// closedErr.
func (r *Shard) stoppedErr() error {
	if e := r.refused.Load(); e != nil {
		return *e
	}
	return r.ClosedErr()
}

// Serving returns why r cannot serve a call (feed a mirror, export, make
// a proposal or a read), nil if it can: it stopped, was taken off its
// group, or refused its Dir.
func (r *Shard) Serving() error {
	select {
	case <-r.Done():
		return r.ClosedErr()
	default:
	}
	if e := r.Gone.Load(); e != nil {
		return *e
	}
	if r.Ops.Removed.Load() {
		return lockapi.ErrRemoved
	}
	if e := r.refused.Load(); e != nil {
		return *e
	}
	return nil
}
