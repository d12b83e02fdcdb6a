package fencelock

import "sync"

// Fencer is the resource's side of fencing: it remembers, per resource, the
// highest fencing token it has admitted, and refuses lower ones. No lock
// service can stop a paused client from acting after its lock passed on; a
// Fencer at the resource makes that client's writes bounce, from the moment
// a later holder's token has reached it: the later holder's first write, or
// its Claim at grant time (see Claimer). Until then the Fencer knows of no
// later holder and admits the earlier one.
//
// The zero value is an empty Fencer, ready to use, like NewFencer's. A
// Fencer is safe for concurrent use and must not be copied after first use.
// It keeps its marks in memory: a resource that must refuse stale tokens
// across its own restarts persists Highest with its data and seeds a new
// Fencer with Raise (or uses a durable fence: fencesql, fencefile).
type Fencer struct {
	mu        sync.Mutex
	resources map[string]*fence
}

type fence struct {
	mu      sync.Mutex
	highest uint64
}

// NewFencer returns an empty Fencer.
func NewFencer() *Fencer { return &Fencer{resources: make(map[string]*fence)} }

func (f *Fencer) fence(resource string) *fence {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.resources[resource]
	if r == nil {
		if f.resources == nil {
			f.resources = make(map[string]*fence)
		}
		r = &fence{}
		f.resources[resource] = r
	}
	return r
}

// Do admits token for resource and runs write while holding the resource's
// check, so a write with an older token can never land after a newer token
// was admitted. A token equal to the highest is admitted (the same holder
// writing again); a lower one is refused with a *StaleTokenError, which
// satisfies errors.Is(err, ErrStaleToken), and write does not run. The mark
// is raised on admission, whether or not write succeeds.
func (f *Fencer) Do(resource string, token uint64, write func() error) error {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.admit(resource, token); err != nil {
		return err
	}
	return write()
}

// Admit checks and records token for resource, as Do does, without a write.
func (f *Fencer) Admit(resource string, token uint64) error {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.admit(resource, token)
}

// Highest returns the highest token admitted for resource; 0 if none.
func (f *Fencer) Highest(resource string) uint64 {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}

// Raise lifts the mark of resource to at least token without a write: use it
// to restore a mark persisted before a restart.
func (f *Fencer) Raise(resource string, token uint64) {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.highest = max(r.highest, token)
}

func (r *fence) admit(resource string, token uint64) error {
	if token < r.highest {
		return &StaleTokenError{Resource: resource, Token: token, Highest: r.highest}
	}
	r.highest = token
	return nil
}
