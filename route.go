package fencelock

import (
	"fmt"
	"strings"

	"github.com/fencelock/fencelock/internal/replica"
)

// groupOf returns the group a lock or election name lives in: the part after
// its last '@', or the default group ("") for a name without one. ok is
// false for a name that ends in '@': the default group has no name to write.
func groupOf(name string) (group string, ok bool) {
	i := strings.LastIndexByte(name, '@')
	if i < 0 {
		return "", true
	}
	return name[i+1:], i+1 < len(name)
}

// route returns the group name lives in and this node's replica of it, or
// an error wrapping ErrUnknownGroup if that is not a group of this
// deployment. Every call that takes a lock or election name routes by it.
func (n *Node) route(name string) (string, *replica.Replica, error) {
	group, ok := groupOf(name)
	var r *replica.Replica
	if ok {
		r = n.groups().Group(group)
	}
	if r == nil {
		return "", nil, fmt.Errorf("%w: %q in %q", ErrUnknownGroup, group, truncate(name, 64))
	}
	return group, r, nil
}

// group returns this node's replica of group ("" is the default group), or
// an error wrapping ErrUnknownGroup. The views that take a group by name
// (SessionsIn, MembersOf, EndSessionIn) resolve it here.
func (n *Node) group(group string) (*replica.Replica, error) {
	if r := n.groups().Group(group); r != nil {
		return r, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownGroup, truncate(group, 64))
}
