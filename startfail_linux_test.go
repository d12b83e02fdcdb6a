package fencelock

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// The holder is found through fcntl(F_GETLK) and /proc: Linux only.

// A Dir held by another process: the error names the Dir and that process.
func TestLockedDirNamesItsHolder(t *testing.T) {
	dir := t.TempDir()
	lock := filepath.Join(dir, "LOCK")
	// Another process takes the lock Dragonboat takes (a POSIX lock, which
	// a process cannot conflict with itself on), and holds it until its
	// stdin closes.
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldLock$")
	cmd.Env = append(os.Environ(), "FENCELOCK_HOLD_LOCK="+lock)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "locked\n", line)

	_, err = Start(context.Background(), Config{ReplicaID: 1, Members: map[uint64]string{1: freeAddr(t)}, Dir: dir, Logger: quietLogger})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "failed to lock data directory "+dir)
	require.ErrorContains(t, err, fmt.Sprintf("process %d (", cmd.Process.Pid))
	require.ErrorContains(t, err, "TestHelperHoldLock")
	require.Equal(t, 1, strings.Count(err.Error(), "fencelock:"), "one prefix: %v", err)
	t.Log(err)
	_, err = os.Stat(lock)
	require.NoError(t, err, "the holder's lock file stays")
}

// TestHelperHoldLock is the process TestLockedDirNamesItsHolder starts.
func TestHelperHoldLock(t *testing.T) {
	path := os.Getenv("FENCELOCK_HOLD_LOCK")
	if path == "" {
		t.Skip("a helper process of TestLockedDirNamesItsHolder")
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	require.NoError(t, err)
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK}
	require.NoError(t, syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk))
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
