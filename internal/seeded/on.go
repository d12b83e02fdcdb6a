//go:build fencelock_seeded

package seeded

import (
	"os"
	"sync/atomic"
	"time"
)

// Enabled reports whether this build can plant defects: built with the
// fencelock_seeded tag, it can.
const Enabled = true

var planted atomic.Pointer[Bug]

func init() {
	if b := Bug(os.Getenv("FENCELOCK_SEEDED_BUG")); b != "" {
		planted.Store(&b)
	}
}

// On reports whether bug is planted.
func On(bug Bug) bool {
	b := planted.Load()
	return b != nil && *b == bug
}

// Plant plants bug ("" plants none) in every replica of this process until
// undo is called. Only a test that starts its replicas after the call
// should use it: a replica built its state with whatever was planted then.
func Plant(bug Bug) (undo func()) {
	prev := planted.Swap(&bug)
	return func() { planted.Store(prev) }
}

// Margin is the holder's safety margin m, as the lease uses it: none with
// MarginDropped (lease = send + TTL), −m with LeasePlusMargin.
func Margin(m time.Duration) time.Duration {
	switch {
	case On(MarginDropped):
		return 0
	case On(LeasePlusMargin):
		return -m
	}
	return m
}
