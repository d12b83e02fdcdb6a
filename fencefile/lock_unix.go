//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fencefile

import (
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on path, waiting for it. The kernel drops
// it when the process dies, so a writer killed with kill -9 blocks no one.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
