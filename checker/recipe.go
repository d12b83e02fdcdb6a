package checker

import (
	"context"
	"errors"
	"time"

	"github.com/fencelock/fencelock"
)

// role is what a recipe client does: write under the shared lock's
// exclusive mode, read under its shared mode, or hold a permit of the
// semaphore. The zero role is a mutex or election client's.
type role uint8

const (
	roleNone role = iota
	roleWriter
	roleReader
	rolePermit
)

// The recipes every scenario runs: rwLock with rwWriters clients taking it
// exclusively (Acquire) and rwReaders in shared mode (AcquireShared), and
// semLock, a semaphore of semPermits permits, with semClients clients.
const (
	rwLock     = "rw/a"
	rwWriters  = 2
	rwReaders  = 3
	semLock    = "sem/a"
	semPermits = 2
	semClients = 3
)

// recipeNames are the names the recipe clients use; the final check reads
// them with all their holders.
var recipeNames = []string{rwLock, semLock}

// isRecipe reports whether name is a shared lock's or a semaphore's.
func isRecipe(name string) bool { return name == rwLock || name == semLock }

// recipeRoles are the roles of the recipe clients, in client order.
func recipeRoles() []role {
	var rs []role
	for range rwWriters {
		rs = append(rs, roleWriter)
	}
	for range rwReaders {
		rs = append(rs, roleReader)
	}
	for range semClients {
		rs = append(rs, rolePermit)
	}
	return rs
}

// recipeLoop is a recipe client's loop: acquire (one time in four the Try
// form) with a deadline, the section of three steps checking Done before
// each, release. A writer's step is a fenced write to the lock's register;
// a reader's reads the register's mark (the highest writer token the
// Fencer admitted) without raising it, since shared holders must not fence
// each other out; a permit's step is the work alone. Sections are checked
// from the history afterwards (checkrecipe.go).
func (c *client) recipeLoop(ctx context.Context) {
	name, permits := rwLock, 0
	if c.role == rolePermit {
		name, permits = semLock, semPermits
	}
	shared := c.role != roleWriter
	for ctx.Err() == nil {
		if !c.ensureSession(ctx) {
			continue
		}
		kind := OpAcquire
		if c.rng.IntN(4) == 0 {
			kind = OpTryAcquire
		}
		i := c.e.h.begin(Op{Client: c.id, Node: c.node, Kind: kind, Lock: name, Session: c.sess.ID(),
			Shared: shared, Permits: permits})
		actx, cancel := context.WithTimeout(c.e.h.track(ctx, i), c.e.opTimeout)
		l, err := c.acquireRecipe(actx, kind == OpTryAcquire, name, permits)
		cancel()
		switch {
		case err == nil:
			c.e.h.end(i, Granted, l.Token())
			if l.Shared() != shared || l.Permits() != permits {
				c.e.h.violation("client %d granted %q token %d with shared=%v permits=%d, asked shared=%v permits=%d",
					c.id, name, l.Token(), l.Shared(), l.Permits(), shared, permits)
			}
		case errors.Is(err, fencelock.ErrLocked):
			c.e.h.end(i, Locked, 0)
			c.sleep(ctx, time.Duration(1+c.rng.IntN(10))*time.Millisecond)
			continue
		default:
			if errors.Is(err, fencelock.ErrPermitConflict) { // every client names the same count
				c.e.h.violation("client %d: %q refused with %v", c.id, name, err)
			}
			c.e.h.end(i, Unknown, 0)
			c.sleep(ctx, 20*time.Millisecond)
			continue
		}
		c.held = c.e.granted(c, &belief{name: name, token: l.Token(), done: l.Done(), lock: l,
			shared: shared, permits: permits})
		if c.critical(ctx) {
			c.release(ctx)
		}
	}
}

func (c *client) acquireRecipe(ctx context.Context, try bool, name string, permits int) (*fencelock.Lock, error) {
	switch {
	case c.role == roleWriter && try:
		return c.sess.TryAcquire(ctx, name)
	case c.role == roleWriter:
		return c.sess.Acquire(ctx, name)
	case c.role == roleReader && try:
		return c.sess.TryAcquireShared(ctx, name)
	case c.role == roleReader:
		return c.sess.AcquireShared(ctx, name)
	case try:
		return c.sess.TryAcquireSemaphore(ctx, name, permits)
	}
	return c.sess.AcquireSemaphore(ctx, name, permits)
}

// step is one step of a reader's or a permit's section; a writer's is
// write. A reader records the register's mark it saw: a writer granted
// after the reader (a higher token) must not have written while the reader
// held the lock.
func (c *client) step(b *belief) bool {
	if c.role == roleReader {
		c.e.h.read(b.name, c.id, b.token, c.e.fencer.Highest(b.name))
	}
	return true
}
