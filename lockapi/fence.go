package lockapi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Fence is a grant's fencing token together with the ID of the group that
// granted it. A token only orders the grants of one group: another group's
// tokens, or this group's after it was bootstrapped again from empty Dirs,
// mean nothing against it, and a fencer keyed to a group refuses them
// with ErrOtherGroup. Group 0 is a fence without a group (a bare token).
type Fence struct {
	Group uint64
	Token uint64
}

// String formats f as "GROUP:TOKEN", the group in 16 hex digits and the
// token in decimal, for headers, logs and other languages.
func (f Fence) String() string {
	// Without fmt: every grant the API answers carries one.
	var b [37]byte // 16 hex digits, ':', at most 20 decimal digits
	hex := strconv.AppendUint(b[16:16], f.Group, 16)
	n := copy(b[:16], "0000000000000000"[:16-len(hex)]) // pad to 16 digits
	copy(b[n:], hex)
	b[16] = ':'
	return string(strconv.AppendUint(b[:17], f.Token, 10))
}

// ErrInvalidFence reports a string that is not a Fence's String form.
var ErrInvalidFence = errors.New("fencelock: malformed fence")

// ErrOtherGroup: a fencer refused a token granted by another group (or by
// another incarnation of this group) than the one the resource is keyed
// to, or a token without a group (Group 0) at a keyed resource.
var ErrOtherGroup = errors.New("fencelock: fencing token of another group")

// ParseFence parses the String form of a Fence. A bare decimal token (no
// group) parses with Group 0, as does "0000000000000000:N". Anything else,
// or a token of 0, fails with ErrInvalidFence.
func ParseFence(s string) (Fence, error) {
	group, token, found := strings.Cut(s, ":")
	if !found {
		group, token = "", s
	}
	var f Fence
	var err error
	if found {
		if len(group) != 16 {
			return Fence{}, fmt.Errorf("%w: %q: the group is 16 hex digits", ErrInvalidFence, truncate(s, 64))
		}
		if f.Group, err = strconv.ParseUint(group, 16, 64); err != nil {
			return Fence{}, fmt.Errorf("%w: %q: %v", ErrInvalidFence, truncate(s, 64), err)
		}
	}
	if f.Token, err = strconv.ParseUint(token, 10, 64); err != nil || f.Token == 0 {
		return Fence{}, fmt.Errorf("%w: %q: the token is a decimal number > 0", ErrInvalidFence, truncate(s, 64))
	}
	return f, nil
}

// truncate cuts s to n bytes for an error message.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
