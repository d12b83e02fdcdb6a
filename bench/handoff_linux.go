package main

import (
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// futex(2) operations (linux/futex.h), which x/sys/unix does not name.
const (
	futexWaitPrivate = 0 | 128
	futexWakePrivate = 1 | 128
)

// threadWakeDelays measures the wake-up that handoffDelays' awake case
// waits on, without the Go scheduler: one OS thread blocks in futex(2),
// another wakes it and keeps running for busy. If this is fast where the
// goroutine hand-off is slow, the hand-off's cost is the runtime's (how
// its idle processor is started and takes the readied goroutine), not the
// machine's waking of an idle CPU.
func threadWakeDelays(n int, busy time.Duration) []time.Duration {
	var word atomic.Uint32
	var sent atomic.Int64 // UnixNano of the latest wake
	out := make(chan time.Duration, 1)
	addr := uintptr(unsafe.Pointer(&word))
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range n {
			for word.Load() == 0 {
				// A spurious or early return (EAGAIN, EINTR) only loops.
				unix.Syscall6(unix.SYS_FUTEX, addr, futexWaitPrivate, 0, 0, 0, 0)
			}
			out <- time.Duration(time.Now().UnixNano() - sent.Load())
			word.Store(0)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	delays := make([]time.Duration, 0, n)
	for range n {
		time.Sleep(300 * time.Microsecond)
		sent.Store(time.Now().UnixNano())
		word.Store(1)
		unix.Syscall6(unix.SYS_FUTEX, addr, futexWakePrivate, 1, 0, 0, 0)
		for t := time.Now(); time.Since(t) < busy; {
		}
		delays = append(delays, <-out)
	}
	slices.Sort(delays)
	return delays
}
