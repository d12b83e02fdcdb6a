package session

// Names and routing: the one place where a lock or election name is
// checked and taken to its group. A name lives in the group after its last
// '@' (SplitName; the root publishes the rule as fencelock.SplitName for
// the packages above it), and in the default group ("") without one; a
// group the deployment does not run is an error wrapping the Config's
// UnknownGroup, never a fall back to another group.

import (
	"context"
	"fmt"

	"github.com/fencelock/fencelock/internal/fsm"
	"github.com/fencelock/fencelock/lockapi"
)

// SplitName splits a lock or election name into its base and the group it
// lives in (lockapi.SplitName: the rule the client reads too). ok is false
// for a name that ends in '@': the default group has no name to write, so
// such a name is in no group.
func SplitName(name string) (base, group string, ok bool) { return lockapi.SplitName(name) }

// checkName refuses a name that cannot be a lock's or an election's:
// ErrInvalidName.
func checkName(name string) error {
	if why := fsm.NameProblem(name); why != "" {
		return fmt.Errorf("%w: %q: %s", ErrInvalidName, truncate(name, 64), why)
	}
	return nil
}

// checkValue refuses a leader's value longer than MaxValueLen:
// ErrValueTooLarge.
func checkValue(value string) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrValueTooLarge, len(value), MaxValueLen)
	}
	return nil
}

// Route returns the group name lives in (SplitName) and this process's
// replica of it, or an error wrapping UnknownGroup if that is not a group
// of the deployment. It does not check the name: the calls check it first.
func (h *Host) Route(ctx context.Context, name string) (string, Group, error) {
	_, group, ok := SplitName(name)
	if !ok {
		return "", nil, fmt.Errorf("%w: %q in %q", h.cfg.UnknownGroup, group, truncate(name, 64))
	}
	r, err := h.cfg.Groups.Lookup(ctx, group)
	if err != nil {
		return "", nil, fmt.Errorf("%w in %q", err, truncate(name, 64))
	}
	return group, r, nil
}

// route checks name, then routes it.
func (h *Host) route(ctx context.Context, name string) (string, Group, error) {
	if err := checkName(name); err != nil {
		return "", nil, err
	}
	return h.Route(ctx, name)
}

// routePrefix takes a listing's prefix to the group it names: named is
// false for a prefix without '@' (base is then the prefix), else base is
// the part before its last '@' and r the group's replica. A group stores
// each name whole, "@group" and all, so a name there starts with base as
// it starts with the prefix here.
func (h *Host) routePrefix(ctx context.Context, prefix string) (base, group string, r Group, named bool, err error) {
	base, _, _ = SplitName(prefix)
	if base == prefix {
		return prefix, "", nil, false, nil
	}
	group, r, err = h.Route(ctx, prefix)
	return base, group, r, true, err
}

// Group returns group's Group ("" is the default group), or an error
// wrapping UnknownGroup: for the calls that take a group by name.
func (h *Host) Group(ctx context.Context, group string) (Group, error) {
	return h.cfg.Groups.Lookup(ctx, group)
}

// truncate shortens s to n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
