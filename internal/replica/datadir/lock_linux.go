package datadir

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

// lockHolder names the process holding a POSIX write lock on path
// (Dragonboat's Dir lock is one), or "" if none is known: F_GETLK reports
// the first conflicting lock's process.
func lockHolder(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil || lk.Type == syscall.F_UNLCK || lk.Pid <= 0 {
		return ""
	}
	who := fmt.Sprintf("process %d", lk.Pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", lk.Pid)); err == nil && len(b) > 0 {
		cmd := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if len(cmd) > 200 {
			cmd = cmd[:200] + "…"
		}
		who += fmt.Sprintf(" (%s)", cmd)
	}
	return who
}
