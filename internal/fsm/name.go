package fsm

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 512

// ValidName reports whether name may name a lock: non-empty valid UTF-8 of at
// most MaxNameLen bytes, without NUL.
func ValidName(name string) bool { return NameProblem(name) == "" }

// NameProblem says why name cannot name a lock or an election, in words an
// error can carry ("513 bytes, at most 512"), or "" if it can: the one rule
// every API that takes a name checks before it asks a group.
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

// MaxSessionNameLen is the longest session name, in bytes.
const MaxSessionNameLen = 256

// InvalidSessionName is the Value of the Invalid result of an OpenSession
// refused for its name, telling it apart from one refused for its TTL,
// nonce or lock-delay (which carry 0).
const InvalidSessionName = 1

// ErrInvalidSessionName reports a session name CheckSessionName refuses.
var ErrInvalidSessionName = errors.New("fsm: invalid session name")

// ValidSessionName reports whether name may name a session: valid UTF-8
// of at most MaxSessionNameLen bytes, without NUL. The empty name is
// valid: a session opened before names existed has it.
func ValidSessionName(name string) bool {
	return len(name) <= MaxSessionNameLen && utf8.ValidString(name) && !strings.ContainsRune(name, 0)
}

// CheckSessionName returns nil if name may name a session, else an error
// wrapping ErrInvalidSessionName that says why. A proposer checks a name
// before it encodes an OpenSession: one longer than MaxSessionNameLen does
// not fit the codec, and would make the whole entry undecodable.
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
