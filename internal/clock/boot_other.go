//go:build !linux

package clock

import "time"

// Outside Linux, fencelock reads Go's monotonic clock. Whether it counts the
// time the machine was suspended depends on the OS (on macOS it does not),
// so there a suspend longer than the holder's TTL can leave the holder
// believing it still holds its locks until its deadline passes by this clock.
const bootSource = "monotonic"

func bootNanos() int64 { return int64(time.Since(origin)) }
