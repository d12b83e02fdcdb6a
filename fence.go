package fencelock

import (
	"fmt"
	"sync"
)

// Fencer is the resource's side of fencing: it remembers, per resource, the
// highest fencing token it has admitted, and refuses lower ones. No lock
// service can stop a paused client from acting after its lock passed on; a
// Fencer at the resource makes that client's writes bounce, from the moment
// a later holder's token has reached it: the later holder's first write, or
// its Claim at grant time (see Claimer). Until then the Fencer knows of no
// later holder and admits the earlier one.
//
// # Groups
//
// A token orders only the grants of the group that made it (see Fence), so
// each resource is also keyed to a group: the first admitted fence with a
// nonzero Group keys it (DoFence, ClaimFence, or Claim with a grant
// context), and from then on a fence of another nonzero group is refused
// with an *OtherGroupError (errors.Is(err, ErrOtherGroup)), whatever its
// token, until Rekey.
//
// This holds between the groups of one deployment too (Config.Groups): a
// lock's token comes from its own group's log, and "orders@billing" and
// "orders" are two locks in two groups whose tokens are unrelated, so a
// resource is fenced by the locks of one group. Guard it with names of that
// group only: a holder of a lock in another group is refused with
// ErrOtherGroup by a resource keyed to the first, however large its token,
// rather than admitted on a comparison that means nothing. To move a
// resource to another group, stop its writers and Rekey it.
//
// A fence with Group 0 carries no group: every call that takes a bare token
// (Do, Admit, Claim without a grant context) sends one, as does a
// ParseFence of "0000000000000000:N". On a resource keyed to a group it is
// refused like another group's, with an *OtherGroupError (Fence.Group 0),
// and never raises the mark: its token is not known to be of the resource's
// group, and admitting it would let a writer of another deployment lift the
// mark over the group's next holder, who would then be refused as stale,
// hiding that two groups write. On a resource keyed to no group it is
// checked by its token alone and leaves the resource unkeyed: a resource
// that is only ever written with bare tokens works as it always did. So key
// a resource by its first fenced write (DoFence, ClaimFence, Claim with a
// grant context) and from then on write it with fences only.
//
// The zero value is an empty Fencer, ready to use, like NewFencer's. A
// Fencer is safe for concurrent use and must not be copied after first use.
// It keeps its marks in memory: a resource that must refuse stale tokens
// across its own restarts persists Highest and Group with its data and seeds
// a new Fencer with Rekey (if the group is not 0) and then Raise (or uses a
// durable fence: fencesql, fencefile).
type Fencer struct {
	mu        sync.Mutex
	resources map[string]*fence
}

var _ FenceClaimer = (*Fencer)(nil)

type fence struct {
	mu      sync.Mutex
	highest uint64
	group   uint64 // 0 until a fence with a group is admitted, or Rekey
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
// is raised on admission, whether or not write succeeds. Do sends a bare
// token (group 0), which a resource keyed to a group refuses with an
// *OtherGroupError (see Groups); DoFence checks a fence's group.
//
// The resource's check is held while write runs and is not reentrant: write
// must not call this Fencer's methods for the same resource (Highest, Group,
// Do, ...), or it waits for itself forever.
func (f *Fencer) Do(resource string, token uint64, write func() error) error {
	return f.DoFence(resource, Fence{Token: token}, write)
}

// DoFence is Do for a fence: it also refuses, with an *OtherGroupError
// (errors.Is(err, ErrOtherGroup)) and without running write or changing the
// mark, a fence whose Group is not the one the resource is keyed to, Group 0
// included; the first admitted nonzero Group keys the resource, and on a
// resource keyed to no group a fence with Group 0 is checked by its token
// alone (see Groups). As for Do, write runs under the resource's check,
// which is not reentrant: write must not call this Fencer for the same
// resource.
func (f *Fencer) DoFence(resource string, fence Fence, write func() error) error {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.admit(resource, fence); err != nil {
		return err
	}
	return write()
}

// Admit checks and records token for resource, as Do does, without a write:
// a bare token, refused by a resource keyed to a group.
func (f *Fencer) Admit(resource string, token uint64) error {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.admit(resource, Fence{Token: token})
}

// Highest returns the highest token admitted for resource; 0 if none (or
// none since Rekey).
func (f *Fencer) Highest(resource string) uint64 {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}

// Group returns the group resource is keyed to; 0 if none yet.
func (f *Fencer) Group(resource string) uint64 {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.group
}

// Raise lifts the mark of resource to at least token without a write: use it
// to restore a mark persisted before a restart. It leaves the group alone.
func (f *Fencer) Raise(resource string, token uint64) {
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.highest = max(r.highest, token)
}

// Rekey keys resource to group and resets its mark to 0, so that the
// group's tokens are admitted from the lowest on and every other group's
// are refused with ErrOtherGroup. It is the operator's deliberate answer to
// ErrOtherGroup when the group was replaced on purpose (bootstrapped again
// from empty Dirs, or moved to another group), and the way to restore a
// persisted group before Raise restores the mark.
//
// Rekey only once every holder of the old group has stopped: the reset mark
// no longer refuses anything of the new group. group 0 is refused with an error
// wrapping ErrInvalidFence: a resource keyed to no group would adopt the
// next group that writes, whichever it is.
func (f *Fencer) Rekey(resource string, group uint64) error {
	if group == 0 {
		return fmt.Errorf("%w: re-keying %q to group 0: name the new group's ID (Status.GroupID)", ErrInvalidFence, resource)
	}
	r := f.fence(resource)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.group, r.highest = group, 0
	return nil
}

// admit applies the rule for a resource keyed to r.group: another group,
// group 0 included, is refused before the token is looked at (its tokens are
// not comparable with the mark, so calling them stale or admitting them
// would both be wrong); then the token is checked against the mark; an
// admitted nonzero group keys a resource that had none.
func (r *fence) admit(resource string, f Fence) error {
	if r.group != 0 && f.Group != r.group {
		return &OtherGroupError{Resource: resource, Fence: f, Group: r.group}
	}
	if f.Token < r.highest {
		return &StaleTokenError{Resource: resource, Token: f.Token, Highest: r.highest}
	}
	r.highest = f.Token
	if r.group == 0 {
		r.group = f.Group
	}
	return nil
}

// OtherGroupError is the error of a fencer that refused a fence of another
// group than the one the resource is keyed to.
type OtherGroupError struct {
	Resource string
	Fence    Fence  // the fence refused
	Group    uint64 // the group the resource is keyed to
}

func (e *OtherGroupError) Error() string {
	if e.Fence.Group == 0 {
		return fmt.Sprintf("fencelock: fencing token %d for %q carries no group (a bare token, or a fence of group 0), "+
			"the resource is keyed to group %016x: write it with a fence of that group (lock.Fence(), a grant context)",
			e.Fence.Token, e.Resource, e.Group)
	}
	return fmt.Sprintf("fencelock: fencing token %d for %q is of group %016x, the resource is keyed to group %016x "+
		"(if the group was replaced on purpose, re-key the resource once every holder of the old one has stopped)",
		e.Fence.Token, e.Resource, e.Fence.Group, e.Group)
}

// Is makes errors.Is(err, ErrOtherGroup) true.
func (e *OtherGroupError) Is(target error) bool { return target == ErrOtherGroup }
