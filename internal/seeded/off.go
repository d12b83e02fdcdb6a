//go:build !fencelock_seeded

package seeded

import "time"

// Enabled reports whether this build can plant defects: not without the
// fencelock_seeded tag.
const Enabled = false

// On reports whether bug is planted: never in this build.
func On(Bug) bool { return Enabled }

// Margin is the holder's safety margin m, as the lease uses it.
func Margin(m time.Duration) time.Duration { return m }
