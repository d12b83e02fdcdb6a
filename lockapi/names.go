package lockapi

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The bounds a name, a value or an option must keep. They are the
// replicated state machine's (internal/fsm, a test checks they agree),
// written here so that a client can check its arguments without linking
// the engine; package fencelock re-exports the state machine's own.
const (
	// MaxNameLen is the longest lock or election name, in bytes.
	MaxNameLen = 512
	// MaxValueLen is the longest leader value, in bytes.
	MaxValueLen = 4096
	// MaxSessionNameLen is the longest session name, in bytes.
	MaxSessionNameLen = 256
	// MaxHoldersPerLock is the most holders a lock has at once in shared
	// mode, and the largest permit count of a semaphore.
	MaxHoldersPerLock = 10_000
	// MaxContended is the most locks a listing of contended locks returns.
	MaxContended = 100
	// MaxHoldLimit is the longest maximum hold (WithMaxHold): 24h, the
	// longest session TTL.
	MaxHoldLimit = 24 * time.Hour
)

// NameProblem says why name cannot name a lock or an election, in words
// an error can carry ("513 bytes, at most 512"), or "" if it can: empty,
// longer than MaxNameLen bytes, not UTF-8, or containing NUL. The name's
// "@group" suffix is part of it here; SplitName reads it.
func NameProblem(name string) string {
	switch {
	case name == "":
		return "empty"
	case len(name) > MaxNameLen:
		return fmt.Sprintf("%d bytes, at most %d", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return "not UTF-8"
	case strings.ContainsRune(name, 0):
		return "contains NUL"
	}
	return ""
}

// CheckName refuses a name NameProblem finds a problem with, with an error
// wrapping ErrInvalidName that says why.
func CheckName(name string) error {
	if why := NameProblem(name); why != "" {
		return fmt.Errorf("%w: %q: %s", ErrInvalidName, truncate(name, 64), why)
	}
	return nil
}

// CheckValue refuses a leader's value longer than MaxValueLen bytes, with
// an error wrapping ErrValueTooLarge.
func CheckValue(value string) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrValueTooLarge, len(value), MaxValueLen)
	}
	return nil
}

// CheckSessionName refuses a session name longer than MaxSessionNameLen
// bytes, not UTF-8, or containing NUL, with an error wrapping
// ErrInvalidSessionName that says which. "" is a valid name.
func CheckSessionName(name string) error {
	switch {
	case len(name) > MaxSessionNameLen:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidSessionName, len(name), MaxSessionNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not UTF-8", ErrInvalidSessionName)
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("%w: contains NUL", ErrInvalidSessionName)
	}
	return nil
}

// SplitName splits a lock or election name into its base and the group it
// lives in: what follows its last '@' ("jobs/a@billing" is "jobs/a" in
// billing; a base may hold '@' itself), or "" (the default group) for a
// name without '@', whose base is the whole name. ok is false for a name
// that ends in '@': it is in no group (ErrUnknownGroup).
func SplitName(name string) (base, group string, ok bool) {
	i := strings.LastIndexByte(name, '@')
	if i < 0 {
		return name, "", true
	}
	return name[:i], name[i+1:], i+1 < len(name)
}
