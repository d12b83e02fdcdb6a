package fencelock

import (
	"github.com/fencelock/fencelock/lockapi"
)

// SplitName splits a lock or election name into its base and the group it
// lives in: what follows its last '@' ("jobs/a@billing" is "jobs/a" in
// billing; a base may hold '@' itself), or "" (the default group) for a
// name without '@', whose base is the whole name. Every call that takes a
// name routes it by this rule. ok is false for a name that ends in '@':
// it is in no group, and a call given it fails with ErrUnknownGroup.
func SplitName(name string) (base, group string, ok bool) { return lockapi.SplitName(name) }
