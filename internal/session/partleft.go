package session

import (
	"time"

	"github.com/fencelock/fencelock/internal/clock"
)

// Now reads the clock the holder's deadlines are measured on (the boot
// clock of the Host's clock), for a caller that times something against
// them: PartLeft.
func (h *Host) Now() clock.Instant { return clock.Boot(h.cfg.Clock) }

// PartLeft returns how long after at (a Host.Now reading) the holder keeps
// the part that holds g: until that part's deadline, the send of its last
// acknowledged renewal (or open, or resume) + TTL − margin. It is 0 if the
// deadline is not after at, if the part has ended, or for an ended grant
// with no part (the zero Lock's). A grant does not outlive its part, so a
// caller told that g was granted may act on it for no longer than this
// after at; the grant's own end (a release, a maximum hold) is not counted.
func (g *Grant) PartLeft(at clock.Instant) time.Duration {
	if g.p == nil || g.p.ended() {
		return 0
	}
	return max(0, g.p.deadline().Sub(at))
}
