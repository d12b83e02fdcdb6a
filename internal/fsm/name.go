package fsm

import (
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 512

// ValidName reports whether name may name a lock: non-empty valid UTF-8 of at
// most MaxNameLen bytes, without NUL.
func ValidName(name string) bool {
	return name != "" && len(name) <= MaxNameLen && utf8.ValidString(name) &&
		!strings.ContainsRune(name, 0)
}
