package checker

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/fencelock/fencelock"
)

// env is what a running scenario shares between its clients, its nemesis
// and its checks.
type env struct {
	c         *Cluster
	h         *History
	fencer    *fencelock.Fencer
	locks     []string
	recipes   []string // shared locks and semaphores (recipe.go)
	elections []string
	ttl       time.Duration
	opTimeout time.Duration
	rng       *rand.Rand // the nemesis's
	clients   []*client
	observers []*observer
	beliefs   beliefs
	applied   *appliedLog // every group's applied log
	dumps     *dumps      // what a violation wrote for its reader

	holderIsolations int // HolderIsolated faults so far; only the nemesis uses it

	placement fencelock.Placement // every replica's (Scenario.Placement)

	mu       sync.Mutex
	sessions map[uint64]*fencelock.Session
	delayed  map[uint64]bool // sessions with a lock-delay (lockDelays)
	faults   int
	resumed  int    // sessions a restarted client resumed
	revokes  int    // operator revocations and session ends that took effect
	spans    []Span // faults applied, for the report (applyFault)
}

func (e *env) resumes() {
	e.mu.Lock()
	e.resumed++
	e.mu.Unlock()
}

// otherNode returns a running replica other than id, or id if none runs.
func (e *env) otherNode(id uint64) uint64 {
	for _, o := range e.c.IDs() {
		if o != id && e.c.Node(o) != nil {
			return o
		}
	}
	return id
}

func (e *env) addSession(s *fencelock.Session, node uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sessions[s.ID()] = s
}

// live reports whether session id is still alive for its holder.
func (e *env) live(id uint64) bool {
	e.mu.Lock()
	s := e.sessions[id]
	e.mu.Unlock()
	return s != nil && s.Err() == nil
}

// delays records that session id has a lock-delay.
func (e *env) delays(id uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.delayed == nil {
		e.delayed = map[uint64]bool{}
	}
	e.delayed[id] = true
}

func (e *env) fault() {
	e.mu.Lock()
	e.faults++
	e.mu.Unlock()
}

// pickNode returns the client's home replica if it runs, else another one
// that does.
func (e *env) pickNode(home uint64) (*fencelock.Node, uint64) {
	if n := e.c.Node(home); n != nil {
		return n, home
	}
	for _, id := range e.c.IDs() {
		if n := e.c.Node(id); n != nil {
			return n, id
		}
	}
	return nil, 0
}
