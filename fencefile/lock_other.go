//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package fencefile

import (
	"errors"
	"fmt"
)

// lockFile needs flock(2), which this system lacks: the example's shared
// file cannot be guarded across processes here.
func lockFile(path string) (unlock func(), err error) {
	return nil, fmt.Errorf("fencefile: locking %s: %w", path, errors.ErrUnsupported)
}
